"""The GitHub driver: dispatch, park issues, pull requests, permissions, reactions.

It implements `runner.core.ports.Dispatcher` and `runner.core.ports.Parker` over PyGithub,
so the session loop runs the same on GitHub as locally. Every call goes through
`github_call`, which turns failures into `PlanRunnerError`/`ServiceUnavailable`.
The token is handed to PyGithub and never kept, printed or logged here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from github import GithubException
from github.GithubException import RateLimitExceededException
from github.Requester import Requester

from runner.core.errors import PlanRunnerError, Refused
from runner.adapters.github.events import GitHubContext, IssueComment
from runner.core.evidence import GateResult
from runner.adapters.github.api import (
    DISPATCH_PERMISSION_FIX, DISPATCH_RESUME, RetryPolicy, accepted_permissions, api_message, github_call, make_client,
)
from runner.adapters.github.body import cap_body
from runner.adapters.github.checks import NO_CI_AFTER_S, collect_checks_gate
from runner.core.plan import GateConfig

PARK_LABEL = "plan-runner"
LABEL_COLOR = "5319e7"
LABEL_DESCRIPTION = "A plan parked by plan-runner, waiting for a human"
# `permission` is the legacy base permission: maintain reads "write", a custom role its base role's name.
STEERING_PERMISSIONS = frozenset({"admin", "write"})
# Every comment plan-runner writes carries this line, so a reply never acts on plan-runner's own words
# (its help text quotes the commands), even when the token is a person's and the author looks human.
COMMENT_MARKER = "<!-- plan-runner:comment -->"
MAX_ISSUE_PAGES = 20  # 2,000 open plan-runner issues; past that something else is wrong
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
_PLAN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_MARKER = re.compile(r"<!-- plan-runner:park plan=(?P<id>[A-Za-z0-9][A-Za-z0-9._-]{0,99}) -->")
_ANSWERS = re.compile(r"<!-- plan-runner:answers (\d{1,20}) -->")
# The line a watch pull request closed at a park carries: the next session reopens only such a one (one a
# person closed stays closed, though still kept up to date, until the finish).
CLOSED_AT_PARK = "<!-- plan-runner:closed-at-park -->"
WATCH_STATES = ("draft", "ready", "closed")  # what the watch pull request is left as (GitHubDriver.update_watch)
# A plan's run: the time of its ledger's first entry (runner.drivers.actions.watch.run_key). `plan-runner reset` starts a
# new run (a new ledger); the watch pull request carries its run's key, so the next job tells the pull request of
# a run before a reset from its own, closes it with a link to the backup ref and opens its own.
_RUN_KEY = re.compile(r"[0-9]{8}T[0-9]{6}\.[0-9]{6}Z")
_RUN = re.compile(r"<!-- plan-runner:run ([0-9]{8}T[0-9]{6}\.[0-9]{6}Z) -->")
CLOSED_AT_RESET = "<!-- plan-runner:closed-at-reset -->"


def watch_marker(plan_id: str) -> str:
    """The hidden line that makes a pull request the plan's watch view (render's watch.md.j2 writes it)."""
    park_marker(plan_id)  # the same check of the id
    return f"<!-- plan-runner:watch plan={plan_id} -->"


_WATCH = re.compile(r"<!-- plan-runner:watch plan=(?P<id>[A-Za-z0-9][A-Za-z0-9._-]{0,99}) -->")


def run_marker(run: str) -> str:
    """The hidden line naming the run a watch pull request shows ("" for none: a run not started yet)."""
    if not run:
        return ""
    if not _RUN_KEY.fullmatch(run):
        raise ValueError(f"not a run key: {run!r}")
    return f"<!-- plan-runner:run {run} -->"


def run_of(body: str | None) -> str | None:
    """The run a watch pull request's description names: its first run line, plan-runner's own (None: written
    before runs had keys)."""
    match = _RUN.search(body or "")
    return match[1] if match else None


@dataclass(frozen=True)
class ParkIssue:
    number: int
    url: str
    title: str
    body: str
    state: str
    labels: tuple[str, ...]
    pull_request: bool
    author: str = ""  # who opened it: plan-runner's own identity for a park issue (the job token's)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ParkIssue:
        return cls(number=int(data["number"]), url=str(data.get("html_url", "")), title=str(data.get("title") or ""),
                   body=str(data.get("body") or ""), state=str(data.get("state", "open")),
                   labels=tuple(str(lab.get("name", "")) for lab in data.get("labels") or [] if isinstance(lab, dict)),
                   pull_request=data.get("pull_request") is not None,
                   author=str((data.get("user") or {}).get("login") or ""))


def park_marker(plan_id: str) -> str:
    if not _PLAN_ID.fullmatch(plan_id):
        raise PlanRunnerError(what=f"plan id {plan_id!r} cannot be put in a park issue marker",
                              why="plan ids are 1-100 characters from `A-Z a-z 0-9 . _ -`",
                              fix="rename the plan file to a simple name such as `add-auth.md`")
    return f"<!-- plan-runner:park plan={plan_id} -->"


def parse_park_marker(body: str | None) -> str | None:
    match = _MARKER.search(body or "")
    return match["id"] if match else None


def dispatch_refusal(exc: GithubException, action: str, workflow: str, ref: str) -> Refused | None:
    """GitHub's answers to a workflow dispatch that asking again cannot change, as a `Refused` with the fix:
    403 (the token lacks `actions: write`), 404 (no such workflow file on GitHub), 422 (the workflow has no
    `workflow_dispatch` trigger, or does not declare the `plan` input, or the ref is gone). None for the rest
    (rate limits, 5xx), which `github_call` translates as usual."""
    message = api_message(exc)
    if exc.status == 403 and not Requester.isRateLimitError(message):
        accepted = accepted_permissions(exc.headers)
        return Refused(
            what=f"GitHub refused {action} (403): the job's token may not start workflow runs",
            why=f"{message or 'Resource not accessible by integration'}; creating a workflow dispatch event "
                f"needs `{accepted or 'actions=write'}` (GitHub's X-Accepted-GitHub-Permissions)",
            fix=DISPATCH_PERMISSION_FIX.format(workflow=workflow))
    if exc.status == 404:
        return Refused(
            what=f"GitHub found no workflow {workflow} to dispatch (404)",
            why=f"{message or 'Not Found'}: the workflow file was renamed or deleted on GitHub, or the token cannot "
                "see it",
            fix=f"restore .github/workflows/{workflow} (from `plan-runner init`), then " + DISPATCH_RESUME)
    if exc.status == 422:
        if "disabled workflow" in message.lower():
            why, fix = (f"{message}: the workflow {workflow} is disabled (by hand, or by GitHub after 60 days without "
                        "activity in a public repository), and a disabled workflow starts no run for any trigger",
                        f"enable the workflow: the repository's Actions tab, the workflow `{workflow}`, *Enable "
                        f"workflow* (or `gh workflow enable {workflow}`), then " + DISPATCH_RESUME)
        elif "workflow_dispatch" in message:
            why, fix = (f"{message}: GitHub starts a run by API only for a workflow whose `on:` lists "
                        "`workflow_dispatch`",
                        f"add to .github/workflows/{workflow} on the default branch:\n  on:\n    workflow_dispatch:\n"
                        "      inputs:\n        plan:\n          required: true\n          type: string\n"
                        "then " + DISPATCH_RESUME)
        elif "input" in message.lower():
            why, fix = (f"{message}: the workflow must declare the `plan` input plan-runner sends",
                        f"declare `workflow_dispatch.inputs.plan` in .github/workflows/{workflow} (as `plan-runner "
                        "init` writes it), then " + DISPATCH_RESUME)
        else:
            why, fix = (f"{message}: the branch `{ref}` the next run would use is not on GitHub",
                        f"push `{ref}` again (or start the plan from another branch), then " + DISPATCH_RESUME)
        return Refused(what=f"GitHub refused {action} (422)", why=why, fix=fix)
    return None


def written_by_plan_runner(body: str | None) -> bool:
    return COMMENT_MARKER in (body or "")


def answered_comments(comments: list[IssueComment], author: str) -> frozenset[int]:
    """The ids of the comments plan-runner has answered: named by the hidden `answers` marker of a comment whose
    author is `author` (the park issue's, i.e. plan-runner's own identity), so nobody else can mark a
    maintainer's command as answered by writing the marker."""
    return frozenset(int(n) for c in comments if author and c.user_login == author for n in _ANSWERS.findall(c.body))


class GitHubDriver:
    """Use as a context manager (or call `close()`): it holds an HTTP connection pool."""

    def __init__(self, ctx: GitHubContext, token: str, *, retry: RetryPolicy | None = None,
                 label: str = PARK_LABEL, pull_token: str | Callable[[], str] | None = None) -> None:
        """`pull_token`: the token the final pull request is listed, opened and updated with (the action's
        `push-token`). GitHub starts no `pull_request` workflow for what GITHUB_TOKEN does ("Triggering a
        workflow from a workflow"), and its "Allow GitHub Actions to create and approve pull requests" setting
        binds only that token: a pull request opened with an App's or a person's token gets its CI."""
        self.ctx = ctx
        self.label = label
        self._gh = make_client(ctx.api_url, token, retry or RetryPolicy.default())
        self._repo = self._gh.get_repo(ctx.repository)  # lazy: no request until used
        self._pull_gh = make_client(ctx.api_url, pull_token, retry or RetryPolicy.default()) if pull_token else None
        self._pull_repo = self._pull_gh.get_repo(ctx.repository) if self._pull_gh else self._repo
        self.pull_request_starts_ci = self._pull_gh is not None
        self.dispatched_runs: list[tuple[str, int, str]] = []  # (ledger key, run id, run URL) GitHub reported
        self._label_ready = False
        # The plan's current run and where a reset kept the run before (runner.drivers.actions.watch.attach sets both for
        # a session job): without them every watch pull request of the plan is the current run's.
        self.run_key: Callable[[], str] = lambda: ""
        self.reset_note: Callable[[str], str] = lambda head_sha: (
            "plan-runner: this plan was started over (`plan-runner reset`); this pull request showed the run "
            "before.")

    local = False  # a park is answered by a comment on its issue

    def follow_run(self, run_key: Callable[[], str], reset_note: Callable[[str], str]) -> None:
        """Which run of the plan this job is in, and how to head a pull request of the run before a reset."""
        self.run_key = run_key
        self.reset_note = reset_note

    def close(self) -> None:
        self._gh.close()
        if self._pull_gh is not None:
            self._pull_gh.close()

    def __enter__(self) -> GitHubDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GitHubDriver({self.ctx.repository!r} at {self.ctx.api_url!r})"

    def _request(self, verb: str, path: str, **kw: Any) -> tuple[dict[str, Any], Any]:
        return self._gh.requester.requestJsonAndCheck(verb, f"/repos/{self.ctx.repository}{path}", **kw)

    # ---- Dispatcher ------------------------------------------------------

    def keep_workflow_enabled(self) -> None:
        """`PUT .../actions/workflows/{file}/enable` for the running workflow (needs `actions: write`): GitHub
        disables a public repository's scheduled workflow after 60 days without activity, and with it the
        file's `workflow_dispatch` and `issue_comment` runs; enabling it keeps it active (docs/github-actions.md)."""
        self.set_workflow_enabled(self.ctx.workflow_file, True)

    def set_workflow_enabled(self, workflow: str, enabled: bool) -> None:
        """`PUT .../actions/workflows/{file}/enable` or `/disable` (`actions: write`; 204, idempotent): the clock
        (plan-runner-clock.yml, the tick's schedule) runs only while some plan waits on it (docs/github-actions.md,
        Billing)."""
        verb = "enable" if enabled else "disable"
        with github_call(f"{'enabling' if enabled else 'disabling'} {workflow}"):
            self._request("PUT", f"/actions/workflows/{quote(workflow, safe='')}/{verb}")

    def run_ended(self, run_id: int) -> bool:
        """Whether GitHub says the workflow run ended without succeeding (`GET .../actions/runs/{id}`, `actions:
        read`): cancelled, timed out, or failed (a lost runner, a crash). The clock's tick asks it of a session's
        run: GitHub sends no `workflow_run` event for a run the job's token dispatched, so this is how a session
        whose job died is found before its deadline. Still queued or running, a success, or a run GitHub does not
        know (404: deleted; the session's deadline still holds): False."""
        return bool(self.run_end(run_id))

    def run_end(self, run_id: int) -> str:
        """How the run ended when it ended without succeeding (its `conclusion`: cancelled, timed_out, failure, ...),
        else "" (`run_ended`'s question, with GitHub's answer kept)."""
        with github_call(f"reading workflow run {run_id}"):
            try:
                _, data = self._request("GET", f"/actions/runs/{int(run_id)}", parameters={
                    "exclude_pull_requests": "true"})
            except GithubException as exc:
                if exc.status == 404:
                    return ""
                raise
        if data.get("status") != "completed" or data.get("conclusion") in ("success", "skipped"):
            return ""
        return str(data.get("conclusion") or "failure")

    def dispatch_next(self, plan_path: str, key: str, ref: str | None = None) -> int | None:
        """One POST: a workflow_dispatch of the session workflow on `ref` (the branch the plan's sessions run on,
        as its ledger says) or else the running ref; the id of the run GitHub started (`return_run_details`), or
        None when GitHub answered without it (204, older servers). A reply or a tick runs on the default branch:
        without `ref`, a plan started on another branch would move there.

        `key` identifies the dispatch in the ledger (written before this call);
        it is not sent because the workflow declares only the `plan` input.
        """
        workflow = self.ctx.session_workflow
        ref = ref or self.ctx.ref_name
        if not ref:
            raise PlanRunnerError(what="GITHUB_REF_NAME is empty; cannot tell which ref to dispatch",
                                  why="the next session runs the same workflow on the same branch",
                                  fix="run plan-runner inside a GitHub Actions job")
        action = f"dispatching the next session ({key}) of {workflow}"
        with github_call(action):
            try:
                # return_run_details: GitHub answers 200 with the run it started (workflow_run_id, html_url)
                _, data = self._request("POST", f"/actions/workflows/{quote(workflow, safe='')}/dispatches",
                                        input={"ref": ref, "inputs": {"plan": plan_path},
                                               "return_run_details": True})
                run_id = data.get("workflow_run_id") if isinstance(data, dict) else None
                if isinstance(run_id, int) and not isinstance(run_id, bool):
                    self.dispatched_runs.append((key, run_id, str(data.get("html_url") or "")))
                    return run_id
                return None
            except RateLimitExceededException:
                raise  # waited out, or past the budget: ServiceUnavailable, never a refusal
            except GithubException as exc:
                refusal = dispatch_refusal(exc, action, workflow, ref)
                if refusal is None:
                    raise
                raise refusal from None

    # ---- Parker ----------------------------------------------------------

    def open_park(self, plan_id: str, title: str, body: str) -> str:
        """The URL of the plan's one open park issue: reused (body updated, comment added) or new."""
        marker = park_marker(plan_id)
        full_body = cap_body(body if marker in body else f"{marker}\n{body}", link=self.ctx.run_url)
        try:
            existing = self.find_park_issue(plan_id)
            with github_call(f"opening the park issue for {plan_id}"):
                if existing is not None:
                    self._request("PATCH", f"/issues/{existing.number}", input={"title": title, "body": full_body})
                    self._request("POST", f"/issues/{existing.number}/comments", input={
                        "body": f"plan-runner parked `{plan_id}` again: {title}\n\n"
                                f"The issue description now holds the new report.\n{COMMENT_MARKER}"})
                    return existing.url
                self._ensure_label()
                _, data = self._request("POST", "/issues", input={"title": title, "body": full_body,
                                                                  "labels": [self.label]})
                return str(data["html_url"])
        except Refused as err:
            err.report_url = self.ctx.run_url  # the job summary holds the report the issue would have
            raise

    def open_finish(self, plan_id: str, head: str, base: str, title: str, body: str) -> str:
        """The URL of the plan's pull request from `head` to `base`: its watch view (reopened if a park closed
        it) or another open one, body updated and ready for review; or a new one. A watch view of a run before a
        reset is closed first, never reopened (`_close_earlier_runs`)."""
        with github_call(f"opening the pull request for {plan_id}"):
            existing, earlier = self._watch_pulls(plan_id, head, base)
            body = self._watch_body(plan_id, body, earlier)
            self._close_earlier_runs(earlier)
            if existing is None:
                try:
                    return self._pull_repo.create_pull(base=base, head=head, title=title, body=body).html_url
                except GithubException as exc:
                    if exc.status != 422 or "already exists" not in str(exc.data):
                        raise
                existing = self._open_pull(head, base)  # another job opened it between list and create
                if existing is None:
                    raise PlanRunnerError(what=f"GitHub says a pull request from {head} exists but lists none",
                                          why="it may be open against another base branch",
                                          fix=f"close or retarget the existing pull request from {head}")
            if existing.state != "open":
                existing.edit(title=title, body=body, state="open")
            else:
                existing.edit(title=title, body=body)
            if existing.draft:  # the plan's watch view until now: the finish turns it ready for review
                self._ready_for_review(existing)
            return existing.html_url

    def _ready_for_review(self, pull: Any) -> None:
        """GitHub's REST API cannot take a pull request out of draft (`PATCH .../pulls/{n}` has no `draft`);
        the GraphQL mutation `markPullRequestReadyForReview` on its node id is the only way (PyGithub's
        `mark_ready_for_review`, POST to the GraphQL endpoint beside the REST one)."""
        pull.mark_ready_for_review()

    def update_watch(self, plan_id: str, head: str, base: str, title: str, body: str, state: str | None) -> str | None:
        """The plan's one watch pull request (`head` to `base`, with the plan's watch marker), edited in place:
        opened as a draft when none exists yet, reopened after a park, left open (`draft`, or `ready`: the finish,
        `open_finish`, is what takes it out of draft) or `closed`; `state` None: nothing to show yet, only the
        watch view of a run before a reset is closed. One list and at most one write per call (and two more per
        earlier run's pull request, once); the URL, or None when there is nothing to show (no pull request, and
        `closed` or None asked)."""
        if state is not None and state not in WATCH_STATES:
            raise ValueError(f"not a watch state: {state!r}")
        with github_call(f"updating the pull request that shows {plan_id}"):
            pull, earlier = self._watch_pulls(plan_id, head, base)
            body = self._watch_body(plan_id, body, earlier) + (f"\n{CLOSED_AT_PARK}" if state == "closed" else "")
            self._close_earlier_runs(earlier)
            if state is None:
                return None
            if pull is None:
                if state == "closed":
                    return None
                created = self._pull_repo.create_pull(base=base, head=head, title=title, body=body,
                                                      draft=state == "draft")
                return created.html_url
            want = "closed" if state == "closed" else "open"
            if pull.state == "closed" and want == "open" and CLOSED_AT_PARK not in (pull.body or ""):
                want = "closed"  # a person closed it while the plan ran: kept closed (the finish reopens it)
            if pull.state != want:
                pull.edit(title=title, body=body, state=want)
            elif pull.body != body or pull.title != title:  # unchanged: no write (a job dispatched twice)
                pull.edit(title=title, body=body)
            return pull.html_url

    def _watch_body(self, plan_id: str, body: str, earlier: list[Any]) -> str:
        """The description as published: the plan's watch marker, its run's key, a line naming the pull requests
        of the runs before a reset (GitHub cross-references them), capped to GitHub's limit."""
        marker = watch_marker(plan_id)
        # the run's key first, always: the first one in a description is plan-runner's own (a fenced report may
        # quote another)
        head = "\n".join(m for m in (run_marker(self.run_key()), "" if marker in body else marker) if m)
        text = f"{head}\n{body}" if head else body
        if earlier:
            numbers = ", ".join(f"#{p.number}" for p in earlier)
            text += f"\n\n_Before `plan-runner reset` started this plan over: {numbers} (closed)._\n"
        return cap_body(text, link=self.ctx.run_url)

    def _close_earlier_runs(self, earlier: list[Any]) -> None:
        """Each watch pull request of a run before a reset, once: closed, its description headed by what
        happened and where its work is kept (`reset_note`: the backup ref `plan-runner reset` pushed), the
        same words as a comment (so its watchers hear of it). Marked, so no later job writes to it again."""
        for pull in earlier:
            if (pull.body or "").startswith(CLOSED_AT_RESET):  # its first line (a fenced report may quote it)
                continue
            note = self.reset_note(str(pull.head.sha or ""))
            pull.edit(body=cap_body(f"{CLOSED_AT_RESET}\n{note}\n\n{pull.body or ''}", link=self.ctx.run_url),
                      state="closed")
            pull.create_issue_comment(f"{note}\n{COMMENT_MARKER}")

    def _watch_pulls(self, plan_id: str, head: str, base: str) -> tuple[Any, list[Any]]:
        """The plan's watch pull request from `head` to `base`: the newest with its marker and the current
        run's key (or no key: one written before keys), open or closed (merged ones are done with); else the
        open one from `head` (the finish's, opened before the watch view existed). And the watch pull requests
        of the runs before a reset (a marker with another key), newest first."""
        marker, run = watch_marker(plan_id), self.run_key()
        current = open_one = None
        earlier: list[Any] = []
        pulls = self._pull_repo.get_pulls(state="all", head=f"{self.ctx.owner}:{head}", base=base,
                                          sort="created", direction="desc")
        for i, pull in enumerate(pulls):
            if i >= 30:  # the first page; a branch with more plan-runner pull requests is not one of ours
                break
            if pull.merged_at is not None:
                continue
            if marker in (pull.body or ""):
                theirs = run_of(pull.body)
                if run and theirs and theirs != run:
                    earlier.append(pull)
                elif current is None:
                    current = pull
            elif pull.state == "open" and open_one is None:
                open_one = pull
        return current or open_one, earlier

    def _open_pull(self, head: str, base: str) -> Any:
        for pull in self._pull_repo.get_pulls(state="open", head=f"{self.ctx.owner}:{head}", base=base):
            return pull
        return None

    # ---- issues, comments, reactions -------------------------------------

    def _ensure_label(self) -> None:
        if self._label_ready:
            return
        try:  # one call either way: created, or 422 because it exists, which is what we wanted
            self._request("POST", "/labels", input={"name": self.label, "color": LABEL_COLOR,
                                                    "description": LABEL_DESCRIPTION})
        except GithubException as exc:
            if exc.status != 422:
                raise
        self._label_ready = True

    def find_park_issue(self, plan_id: str) -> ParkIssue | None:
        """The open park issue for the plan (park label plus hidden marker), if any."""
        with github_call(f"looking for the park issue of {plan_id}"):
            for page in range(1, MAX_ISSUE_PAGES + 1):
                _, batch = self._request("GET", "/issues", parameters={
                    "state": "open", "labels": self.label, "per_page": 100, "page": page})
                for item in batch:
                    issue = ParkIssue.from_json(item)
                    if issue.pull_request is False and parse_park_marker(issue.body) == plan_id:
                        return issue
                if len(batch) < 100:
                    break
        return None

    def plan_id_of_issue(self, issue: ParkIssue | int) -> str | None:
        """The plan a park issue belongs to, read from GitHub, not from the event payload.

        Only an issue carrying the park label (which only triagers and up can
        set) counts, so a stranger cannot aim a reply at a plan with a forged issue.
        """
        if isinstance(issue, int):
            with github_call(f"reading issue #{issue}"):
                _, data = self._request("GET", f"/issues/{issue}")
            issue = ParkIssue.from_json(data)
        if issue.pull_request or self.label.lower() not in {name.lower() for name in issue.labels}:
            return None
        return parse_park_marker(issue.body)

    def park_issue(self, number: int) -> ParkIssue:
        with github_call(f"reading issue #{number}"):
            _, data = self._request("GET", f"/issues/{number}")
        return ParkIssue.from_json(data)

    def plan_id_of_watch_pull(self, number: int) -> str | None:
        """The plan whose watch pull request #number is (its watch marker, read from GitHub: `GET .../issues/{n}`,
        which `issues: read` allows), or None: not a pull request, or not a plan's."""
        with github_call(f"reading pull request #{number}"):
            _, data = self._request("GET", f"/issues/{number}")
        match = _WATCH.search(str(data.get("body") or "")) if data.get("pull_request") else None
        return match["id"] if match else None

    def issue_comments(self, number: int) -> list[IssueComment]:
        """The comments of an issue, oldest first (`GET .../issues/{n}/comments`, 100 a page)."""
        out: list[IssueComment] = []
        with github_call(f"reading the comments of #{number}"):
            for page in range(1, MAX_ISSUE_PAGES + 1):
                _, data = self._request("GET", f"/issues/{number}/comments",
                                        parameters={"per_page": 100, "page": page})
                items = data if isinstance(data, list) else []
                for item in items:
                    user = item.get("user") or {}
                    out.append(IssueComment(action="created", comment_id=int(item["id"]), body=str(item.get("body") or ""),
                                            user_login=str(user.get("login") or ""),
                                            user_is_bot=user.get("type") == "Bot", issue_number=number))
                if len(items) < 100:
                    break
        return out

    def comment(self, issue_number: int, body: str, *, answers: int | None = None) -> str:
        """`answers`: the id of the comment this one answers, marked so a later reply job knows it was answered."""
        body = cap_body(body, limit=60_000, link=self.ctx.run_url) + f"\n{COMMENT_MARKER}"
        if answers is not None:
            body += f"\n<!-- plan-runner:answers {int(answers)} -->"
        with github_call(f"commenting on #{issue_number}"):
            _, data = self._request("POST", f"/issues/{issue_number}/comments", input={"body": body})
            return str(data.get("html_url", ""))

    # ---- a session's progress (runner.drivers.actions.progress) -----------

    def post_comment(self, issue_number: int, body: str) -> tuple[int, str]:
        """A new comment of plan-runner's (marked as its own); its id (to edit it) and URL."""
        body = cap_body(body, limit=60_000, link=self.ctx.run_url) + f"\n{COMMENT_MARKER}"
        with github_call(f"commenting on #{issue_number}"):
            _, data = self._request("POST", f"/issues/{issue_number}/comments", input={"body": body})
        return int(data["id"]), str(data.get("html_url", ""))

    def edit_comment(self, comment_id: int, body: str) -> None:
        """`PATCH .../issues/comments/{id}`: one of plan-runner's comments rewritten in place."""
        body = cap_body(body, limit=60_000, link=self.ctx.run_url) + f"\n{COMMENT_MARKER}"
        with github_call(f"editing comment {comment_id}"):
            self._request("PATCH", f"/issues/comments/{int(comment_id)}", input={"body": body})

    def open_issue(self, title: str, body: str) -> tuple[int, str]:
        """A new issue (no label: it is no park issue); its number and URL."""
        with github_call("opening an issue"):
            _, data = self._request("POST", "/issues", input={
                "title": title, "body": cap_body(body, link=self.ctx.run_url)})
        return int(data["number"]), str(data.get("html_url", ""))

    def react(self, comment_id: int, content: str) -> None:
        if content not in REACTIONS:
            raise ValueError(f"not a GitHub reaction: {content!r}")
        with github_call(f"reacting to comment {comment_id}"):
            self._request("POST", f"/issues/comments/{comment_id}/reactions", input={"content": content})

    def react_review(self, comment_id: int, content: str) -> None:
        """A reaction on a pull request's review comment (`POST .../pulls/comments/{id}/reactions`, `pull-requests:
        write`): review comments are not issue comments, and have their own endpoint."""
        if content not in REACTIONS:
            raise ValueError(f"not a GitHub reaction: {content!r}")
        with github_call(f"reacting to review comment {comment_id}"):
            self._request("POST", f"/pulls/comments/{int(comment_id)}/reactions", input={"content": content})

    def close_issue(self, number: int) -> None:
        with github_call(f"closing #{number}"):
            self._request("PATCH", f"/issues/{number}", input={"state": "closed", "state_reason": "completed"})

    # ---- permissions -----------------------------------------------------

    def permission(self, user: str) -> str:
        """The user's base permission on the repository, asked from GitHub (never taken from the payload).

        GitHub's `permission` field: admin, write, read or none (maintain reads
        write, triage read, a custom role its base role's). `role_name` is not
        read: for a custom role it is the role's own name. A user GitHub does
        not know as a collaborator (404, e.g. an app bot) has `none`.
        """
        with github_call(f"checking {user}'s permission"):
            try:
                _, data = self._request("GET", f"/collaborators/{quote(user, safe='')}/permission")
            except GithubException as exc:
                if exc.status == 404:
                    return "none"
                raise
        return str(data.get("permission") or "none").lower()

    def can_steer(self, user: str) -> bool:
        return self.permission(user) in STEERING_PERMISSIONS

    # ---- the verdict as a check run ---------------------------------------

    def publish_check(self, check: Any, head_sha: str) -> str:
        """`POST .../check-runs` (`checks: write`): the session's verdict (`runner.adapters.github.verdict_check`)
        as a completed check run on `head_sha`, which a branch rule can require. The check run's URL."""
        body: dict[str, Any] = {"name": check.name, "head_sha": head_sha, "status": "completed",
                                "conclusion": check.conclusion,
                                "output": {"title": check.title, "summary": check.summary, "text": check.text}}
        if check.details_url:
            body["details_url"] = check.details_url
        with github_call(f"publishing the check run {check.name!r} on {head_sha[:12]}"):
            _, data = self._request("POST", "/check-runs", input=body)
        return str(data.get("html_url") or "")

    # ---- checks gate -----------------------------------------------------

    def checks_gate(self, gate: GateConfig, sha: str, timeout_s: float | None = None,
                    poll_s: float = 10.0, *, pushed_with_job_token: bool = False,
                    no_ci_after_s: float = NO_CI_AFTER_S) -> GateResult:
        with github_call(f"reading checks of {sha[:12]}"):
            return collect_checks_gate(self._request, gate, sha,
                                       timeout_s=gate.timeout_s if timeout_s is None else timeout_s,
                                       poll_s=poll_s, pushed_with_job_token=pushed_with_job_token,
                                       no_ci_after_s=no_ci_after_s)

    def checks_runner(self, sha: str, poll_s: float = 10.0, *, pushed_with_job_token: bool = False) -> Any:
        """A `runner.adapters.judge.gates.ChecksRunner` bound to `sha`, for `run_gates(checks_runner=...)`."""
        return lambda gate: self.checks_gate(gate, sha, poll_s=poll_s, pushed_with_job_token=pushed_with_job_token)
