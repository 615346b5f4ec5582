"""What a session works with: the workspace, the drivers, and the plan's ledger as one handle (`Session`).

`Session` is the one mutable thing of a session: the ledger version it may compare-and-swap on, moved by
`write`. The phases (runner.drivers.session.phases) pass frozen values from one to the next; the same
phases serve the local loop and the GitHub job; the drivers (state store, dispatcher, parker) are what differ.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from runner.adapters import clock as wallclock
from runner.adapters.git import work as gitwork

from runner.adapters.sandbox import identity as sandbox
from runner.core.actions import ConsultAdvisor, Finish, Park, Verdict
from runner.adapters.secrets import secret_forms, secret_values
from runner.core.errors import PlanRunnerError, Refused
from runner.core.evidence import Evidence
from runner.core.ledger import Entry, EntrySequence, Finished, Parked, SessionRecord
from runner.core.network import Phase, Refusal
from runner.core.plan import Plan
from runner.core.planfile import parse_plan, with_tracker
from runner.core.policy import (
    AnyAction, RunState, advice_entry, fold, folded, snapshot_json,
)
from runner.core.ports import AppendOptions, Dispatcher, Parker, StateStore
from runner.adapters.render.report import Markdown, fence, render_park_issue, render_report
from runner.drivers.session.faults import fault_point

Status = Literal["ran", "waiting", "parked", "finished", "superseded", "busy"]
EVIDENCE_FILE = "last-evidence.json"
TRANSCRIPTS_DIR = "transcripts"  # kept with the plan's state as a git tree (unchanged files are not stored again)


class _Appended(EntrySequence):
    """The ledger as read plus what this process appended, without parsing what it never looks at."""

    def __init__(self, base: Sequence[Entry], more: list[Entry]) -> None:
        self.base, self.more = base, list(more)

    def __len__(self) -> int:
        return len(self.base) + len(self.more)

    def _entry(self, index: int) -> Entry:
        return self.base[index] if index < len(self.base) else self.more[index - len(self.base)]

    def __add__(self, other) -> list[Entry]:
        return list(self) + list(other)


@dataclass
class Ports:
    """What a session reaches the world through, swapped between the local loop and the GitHub job: the state
    store, dispatching the next session, parking for a human (runner/core/ports.py), an advisor and the
    runner of `checks:` gates."""

    store: StateStore
    dispatcher: Dispatcher
    parker: Parker
    # (question, ledger, plan) -> (answer, reason, valid, model); None: the plan's configured advisor
    advisor: Callable[[str, list, Plan], tuple[str, str, bool, str]] | None = None
    checks_runner: Callable | None = None


@dataclass
class Workspace:
    repo: Path
    plan_path: str  # repository-relative
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))  # the install adds CLI paths to it
    remote: str | None = None
    job: str = field(default_factory=lambda: f"local:{socket.gethostname()}:{os.getpid()}")
    clock: Callable[[], datetime] = field(default=lambda: wallclock.now())  # runner/adapters/clock.py (its testing switch)
    on_event: Callable[[str, str], None] = field(default=lambda event, detail: None)
    scratch: Path | None = None  # transcripts and the gate cache; default .git/plan-runner
    isolation: str | None = None  # overrides the plan's `isolation` (--isolation)
    actions: bool = False  # a GitHub Actions job: no `isolation: none`
    # Local mode: the plan's base branch, named by the plan file the user pointed at. The plan and its
    # configuration are then read from that branch's commit only, never from the user's HEAD or work tree.
    base: str | None = None
    # On GitHub: the branch (or tag) this job runs on (GITHUB_REF_NAME). A session records it; every later job of
    # the plan (a reply, a tick, a reconcile) dispatches its next session there, not on the default branch.
    ref: str = ""

    @property
    def scratch_dir(self) -> Path:
        return self.scratch or self.repo / ".git" / "plan-runner"


@dataclass(frozen=True)
class SessionResult:
    status: Status
    plan: Plan
    state: RunState
    action: AnyAction | None
    message: str
    verdict: Verdict | None = None
    evidence: Evidence | None = None
    record: SessionRecord | None = None
    report_text: str = ""
    url: str | None = None
    # Rendering a report costs template work; most callers (--json, the loop) never read it.
    report_fn: Callable[[], str] | None = field(default=None, repr=False, compare=False)

    @property
    def report(self) -> str:
        if self.report_text or self.report_fn is None:
            return self.report_text
        return self.report_fn()


def agent_pid_file(ws: Workspace, plan_id: str) -> Path:
    """Where the running agent's process group is recorded, for the next plan-runner if this one is killed."""
    return ws.scratch_dir / plan_id / "agent.pid"


def judge_tree(ws: Workspace, plan_id: str) -> Path:
    """plan-runner's own work tree of the plan (a linked worktree with its own HEAD and index): where the
    judge takes the agent's work in and commits its corrections, never the user's work tree."""
    return judge_tree_at(ws.scratch_dir, plan_id)


def judge_tree_at(scratch: Path, plan_id: str) -> Path:
    return scratch / plan_id / "tree"


def load_trusted_plan(ws: Workspace, repo: gitwork.Repository | None = None) -> tuple[Plan, str]:
    """The plan with configuration from the base branch (never from the agent's work branch); `repo`: the session's
    reads of `ws.repo`, when a session loads it."""
    repo = repo or gitwork.Repository(ws.repo)
    if ws.base is not None:
        return _plan_on_base(ws, repo, ws.base)
    text = gitwork.read_file_at(repo, "HEAD", ws.plan_path)
    if text is None:
        raise PlanRunnerError(
            what=f"{ws.plan_path} is not committed in {ws.repo}",
            why="configuration is read from a commit, never from the work tree, so the agent cannot change it",
            fix=f"git add {ws.plan_path} && git commit -m 'Add plan', then run again")
    plan = parse_plan(text, ws.plan_path)
    for ref in ([f"{ws.remote}/{plan.config.base}"] if ws.remote else []) + [plan.config.base]:
        sha = gitwork.ref_sha(repo, ref)
        base_text = gitwork.read_file_at(repo, sha, ws.plan_path) if sha else None
        if base_text is not None:
            return (plan if base_text == text else parse_plan(base_text, ws.plan_path)), base_text
    return plan, text


def _plan_on_base(ws: Workspace, repo: gitwork.Repository, base: str) -> tuple[Plan, str]:
    for ref in ([f"refs/remotes/{ws.remote}/{base}"] if ws.remote else []) + [f"refs/heads/{base}"]:
        sha = gitwork.ref_sha(repo, ref)
        text = gitwork.read_file_at(repo, sha, ws.plan_path) if sha else None
        if text is not None:
            return parse_plan(text, ws.plan_path), text
    raise PlanRunnerError(
        what=f"{ws.plan_path} is not committed on the base branch {base!r} in {ws.repo}",
        why="plan-runner reads a plan and its configuration from its base branch's commit (never from your work "
            "tree or current branch), and starts the work branch there: without the plan, the work has no plan",
        fix=f"commit the plan on {base} (`git switch {base} && git add {ws.plan_path} && git commit -m 'Add plan'`), "
            "or set `base:` in the plan to the branch that holds it")


def _tracked_plan(ws: Workspace, repo: gitwork.Repository, plan: Plan) -> tuple[Plan, str | None]:
    """The trusted plan with checkpoint states from the work branch head, if the branch exists."""
    for ref in [plan.work_branch] + ([f"{ws.remote}/{plan.work_branch}"] if ws.remote else []):
        if gitwork.ref_sha(repo, ref):
            text = gitwork.read_file_at(repo, ref, plan.path)
            if text is not None:
                return with_tracker(plan, text), text
    return plan, None


def isolation_of(ws: Workspace, plan: Plan) -> sandbox.Isolation:
    """The plan's `isolation`, unless the run overrides it (`--isolation`, PLAN_RUNNER_ISOLATION)."""
    override = ws.isolation or ws.env.get("PLAN_RUNNER_ISOLATION")
    if override and override not in ("auto", "user", "none"):
        raise PlanRunnerError(what=f"unknown isolation {override!r}", why="it must be auto, user or none",
                              fix="pass --isolation auto|user|none (or unset PLAN_RUNNER_ISOLATION)")
    return override or plan.config.isolation  # type: ignore[return-value]


def load_session(ws: Workspace, ports: Ports) -> Session:
    """Read what one invocation starts from: the trusted plan (from its base), the plan's ledger (fetched in one go
    with the work branch and the base, where there is a remote) and the tracker on the work branch. The
    session's reads of git go through one `Repository` of its own, remembered while the session lives."""
    repo = gitwork.Repository(ws.repo)
    trusted, trusted_text = load_trusted_plan(ws, repo)
    if ws.remote:
        # One fetch for the session: the plan's state, its work branch and the base it starts from.
        branch, base = trusted.work_branch, trusted.config.base
        ports.store.fetch_also(trusted.id, gitwork.branch_refspecs(ws.remote, branch, base),
                               [f"refs/remotes/{ws.remote}/{branch}", f"refs/heads/{branch}",
                                f"refs/remotes/{ws.remote}/{base}"])
    entries, version = ports.store.read(trusted.id)
    # The work branch and base came with the state (None: the store fetched neither, e.g. no remote).
    branches_fetched = ports.store.fetched_with(trusted.id)
    plan, _ = _tracked_plan(ws, repo, trusted)
    return Session(ws, ports, repo=repo, trusted=trusted, trusted_text=trusted_text, entries=entries,
                   version=version, branches_fetched=branches_fetched, plan=plan)


class Session:
    """One invocation: what it was loaded with (`load_session`), and the ledger version it may write on."""

    def __init__(self, ws: Workspace, ports: Ports, *, repo: gitwork.Repository, trusted: Plan, trusted_text: str,
                 entries: EntrySequence, version: str | None, branches_fetched: bool, plan: Plan) -> None:
        self.ws, self.d = ws, ports
        # The session's reads of git, remembered while it lives (and closed with it): the repository, and
        # plan-runner's own work tree of the plan (a work tree of it, with a HEAD of its own).
        self.repo, self.tree = repo, gitwork.Repository(judge_tree(ws, trusted.id))
        self.trusted, self.trusted_text = trusted, trusted_text
        self.entries, self.version = entries, version
        self.branches_fetched = branches_fetched
        self.plan = plan
        self.state = folded(self.entries)
        self.secrets = secret_values(ws.env)
        # what each phase's allow-list proxy refused (a room only), for the one line of the session's report
        self.refused: dict[Phase, list[Refusal]] = {"agent": [], "setup": [], "gates": []}

    def close(self) -> None:
        """The session's git readers stopped (a later read starts them again)."""
        self.repo.close()
        self.tree.close()

    # --- ledger -------------------------------------------------------------------------

    def write(self, entries: list[Entry], files: dict[str, bytes] | None = None,
              dirs: dict[str, Path] | None = None, also_push=(), push: bool = True) -> None:
        """Compare-and-swap append on this plan's state ref, with the folded state stored beside it.
        A conflict always means another job advanced this plan (plans never share a ref): re-raised."""
        state = fold(entries, self.state)
        options = AppendOptions(snapshot=snapshot_json(state), dirs=dirs or {},
                                redact=tuple(secret_forms(self.secrets)) if dirs else (), also_push=tuple(also_push),
                                push=push)
        self.version = self.d.store.append(self.trusted.id, entries, self.version, files, options)
        self.entries = _Appended(self.entries, entries)
        self.state = state

    # --- the non-running actions ----------------------------------------------------------

    def report(self, title: str, action: AnyAction | None, evidence: Evidence | None = None,
               verdict: Verdict | None = None) -> str:
        reason = getattr(action, "reason", "") if action is not None else ""
        details = getattr(action, "details", ()) if action is not None else ()
        return render_report(self.plan, self.state, title=title, verdict=verdict, evidence=evidence,
                             reason=reason, details=details, next_action=action, secrets=self.secrets)

    def last_evidence(self) -> Evidence | None:
        raw = self.d.store.read_file(self.trusted.id, EVIDENCE_FILE)
        return Evidence.model_validate_json(raw) if raw else None

    def park_unpublished(self) -> bool:
        """The plan parked but GitHub refused the park issue (only a refusal records no issue URL)."""
        for entry in reversed(self.entries):
            if isinstance(entry, Parked):
                return entry.issue_url is None and entry.report_path is not None and self.state.parked
        return False

    def apply_park(self, action: Park, evidence: Evidence | None = None, verdict: Verdict | None = None,
                   *, again: bool = False) -> SessionResult:
        """Publish the park once. `again`: a human started the plan by hand after a park GitHub refused
        to publish (issues were disabled): try to open the issue now."""
        if self.state.park_issue and not (again and self.park_unpublished()):
            return SessionResult("parked", self.plan, self.state, action, f"parked, waiting for a human: {self.state.park_issue}",
                                 url=self.state.park_issue)
        evidence = evidence or self.last_evidence()
        report = self.report(f"plan-runner parked {self.plan.id}: {action.reason}", action, evidence, verdict)
        checkpoint = self.state.last.checkpoint if self.state.last else None
        body = render_park_issue(self.plan, report, checkpoint, local=self.d.parker.local)
        try:
            url = self.d.parker.open_park(self.plan.id, f"plan-runner: {self.plan.id} needs a human", body)
        except Refused as err:
            if self.park_unpublished():
                raise  # still refused: the record is there; say so once, write nothing new
            # Recorded once, so no tick asks again; the report is in this job's summary.
            self.write([Parked(at=self.ws.clock(), reason=f"{action.reason}; the park issue could not be opened: "
                               f"{err.what}", report_path=err.report_url or UNPUBLISHED)])
            notice = Markdown(f"**The park issue could not be opened.**\n\n{fence(err.render())}\n\n")
            return SessionResult("parked", self.plan, self.state, action, f"parked: {action.reason}; {err.render()}",
                                 report_text=notice + body, url=err.report_url)
        fault_point(self.ws.env, "park-opened")
        self.write([Parked(at=self.ws.clock(), reason=action.reason, issue_url=url)])
        return SessionResult("parked", self.plan, self.state, action, f"parked: {action.reason}", report_text=body, url=url)

    def apply_finish(self, action: Finish, evidence: Evidence | None = None, verdict: Verdict | None = None) -> SessionResult:
        if self.state.finished:
            return SessionResult("finished", self.plan, self.state, action, "the plan is finished", url=self.state.pull_request)
        report = self.report(f"plan-runner finished {self.plan.id}", action, evidence or self.last_evidence(), verdict)
        self.tidy_work_branch()
        try:
            url = self.d.parker.open_finish(self.plan.id, self.plan.work_branch, self.trusted.config.base,
                                            f"plan-runner: {self.plan.title or self.plan.id}", report)
        except Refused as err:
            # The work is done but GitHub will not take the pull request until a person changes a setting:
            # park with the fix (one issue, no retry loop); `/plan-runner resume` then finishes.
            return self.apply_park(Park(reason=f"the plan is done, but {err.what}",
                                        details=(f"why: {err.why}", *err.fix.splitlines())), evidence, verdict)
        self.write([Finished(at=self.ws.clock(), reason=action.reason, pull_request_url=url)])
        from runner.adapters.sandbox import agent_clone

        agent_clone.discard_area(agent_clone.area_for(self.ws.repo, self.plan.id))  # in the background
        return SessionResult("finished", self.plan, self.state, action, f"finished: {action.reason}", report_text=report, url=url)

    def tidy_work_branch(self) -> None:
        """Before the finish is offered for merging: the plan on the work branch takes the base's front matter
        and structure (its ticks and notes kept), and the handoff loses its answered `HUMAN:` lines, in one
        commit of plan-runner's, so the printed merge command merges cleanly after a fix made on the base
        mid-run. Best effort: the work is done whatever happens here."""
        from runner.adapters.judge.collect import handoff_path_of
        from runner.core.tidy import tidy_handoff, tidy_plan

        plan, repo, branch = self.trusted, self.repo, self.trusted.work_branch
        head = gitwork.ref_sha(repo, f"refs/heads/{branch}")
        if head is None:
            return
        changes: dict[str, str | None] = {}
        tidied = tidy_plan(self.trusted_text, gitwork.read_file_at(repo, head, plan.path))
        if tidied is not None:
            changes[plan.path] = tidied
        handoff = handoff_path_of(plan)
        rest = tidy_handoff(gitwork.read_file_at(repo, head, handoff))
        if rest is not None:
            changes[handoff] = rest or None
        if not changes:
            return
        try:
            base = gitwork.ref_sha(repo, f"refs/remotes/{self.ws.remote}/{plan.config.base}") if self.ws.remote \
                else gitwork.ref_sha(repo, f"refs/heads/{plan.config.base}")
            new = gitwork.commit_on_branch(repo, branch, changes, "Finish: the plan as on the base, answered "
                                           "HUMAN: lines removed", own=judge_tree(self.ws, plan.id),
                                           merge=base if tidied is not None else None)
            if new is not None and self.ws.remote:
                gitwork.push_branch(repo, branch, self.ws.remote, head)
        except PlanRunnerError as err:
            self.ws.on_event("warning", f"the work branch was left as the agent's last session made it: {err.what}")

    def consult(self, action: ConsultAdvisor) -> AnyAction:
        asked = self.d.advisor is not None or (self.trusted.config.advisor is not None
                                               and self.trusted.config.advisor.enabled)
        answer, reason, valid, model = self._ask_advisor(action.reason)
        entry = advice_entry(answer, reason, self.state, self.plan, at=self.ws.clock(), valid=valid, model=model,
                             checkpoint=action.checkpoint, asked=asked)
        self.write([entry])
        self.ws.on_event("advisor", f"{answer}: {reason}")
        return entry.next_action

    def _ask_advisor(self, question: str) -> tuple[str, str, bool, str]:
        """Deterministic first, model second: no advisor configured means a human decides."""
        if self.d.advisor is not None:
            return self.d.advisor(question, list(self.entries), self.trusted)
        cfg = self.trusted.config.advisor
        if cfg is None or not cfg.enabled:
            return "human", question, False, ""  # the park says what happened (policy.decide_after_advice)
        from runner.adapters.advisor import consult_advisor, render_history  # an SDK client, loaded only at dead ends

        records = [e for e in self.entries if isinstance(e, SessionRecord)]
        a = consult_advisor(render_history(records), question, model=cfg.model, env=self.ws.env)
        return a.answer, a.reason, a.valid, a.model


UNPUBLISHED = "not published: the report is in the summary of the job that parked the plan"


def spent_so_far(ws, plan_id: str, started_at):
    """The meter's last reading of the session started at `started_at` (runner.backends.common.meter), if it left one
    in this machine's scratch: what a session cut short had spent counts toward `max_cost_usd` like any other."""
    from runner.backends.common.meter import read_meter

    return read_meter(ws.scratch_dir / plan_id / "transcripts", started_at)
