"""`mode: reply` (on `issue_comment`): a human answers a park issue.

Who may steer is asked from GitHub (the collaborator permission API), never taken
from the payload; which plan the issue belongs to is read from the issue on GitHub
(park label plus hidden marker). An unauthorised commenter gets one polite
refusal and nothing else changes. An accepted reply is recorded in the ledger
first (the instructions reach the next prompt), then acknowledged, the issue
closed, and the next run dispatched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from runner.drivers.actions.env import (
    REMOTE, ModeResult, fetch_work_branch, normalise_plan_path, plan_files, plan_workspace, workspace_root)
from runner.core.actions import describe
from runner.core.errors import PlanRunnerError
from runner.adapters.github.events import GitHubContext, IssueComment, IssueLabeled, ReviewComment
from runner.adapters.github.client import answered_comments, written_by_plan_runner
from runner.core.ledger import Note, Place, Reply
from runner.core.planfile import plan_id_from_path
from runner.core.policy import decide_after_reply
from runner.core.replies import HELP, MAX_INSTRUCTIONS, ReplyProblem, Verb, parse_reply
from runner.adapters.render.report import defang
from runner.drivers.session import Ports, Workspace, load_session, load_trusted_plan
from runner.adapters.store.state import GitStateStore
from runner.drivers.actions.tick import plan_clock
from runner.drivers.session.phases import dispatch

REFUSAL = ("Thanks for your reply, @{user}. Only people with write access to this repository can steer "
           "plan-runner, so this comment changes nothing. A maintainer can answer with one of the "
           "commands in the issue description.")


# `/plan-runner start plans/X.md` on its own line of an issue comment: start that plan (docs/github-actions.md)
START = re.compile(r"^[ \t]*/plan-runner[ \t]+start[ \t]+(?P<path>[^\s`]{1,300})[ \t]*$", re.MULTILINE)
# A plan path named in an issue's body (`plans/X.md`, on its own, in backticks or in a start command)
PLAN_IN_BODY = re.compile(r"(?<![\w./-])(plans/[A-Za-z0-9._/-]{1,300}?\.md)(?![\w/-])")
# The label that starts the plan an issue's body names (`issues: labeled`); the repository variable of that name
# overrides it, in the workflow's `if:` and in the job's environment alike (docs/github-actions.md). Not the park
# label `plan-runner`: plan-runner puts that one on its own issues.
START_LABEL_ENV = "PLAN_RUNNER_START_LABEL"
DEFAULT_START_LABEL = "plan-runner-start"
_STARTED_BY = "<!-- plan-runner:started-by-run {} -->"
# `/plan-runner note <text>` on the watch pull request: the rest of the comment reaches the next session's prompt
NOTE = re.compile(r"^[ \t]*/plan-runner[ \t]+note(?:[ \t]+|$)(?P<text>.*)\Z", re.MULTILINE | re.DOTALL)
MAX_BACKLOG = 20  # earlier unanswered commands one reply job answers (the newest ones: each has had its own job)


def issue_number_of(url: str | None) -> int | None:
    """The number at the end of an issue URL (`.../issues/12`), or None."""
    tail = (url or "").rstrip("/").rsplit("/", 2)
    return int(tail[-1]) if len(tail) == 3 and tail[-2] == "issues" and tail[-1].isdigit() else None


def _ignored(why: str) -> ModeResult:
    return ModeResult(outcome="ignored", summary=f"# plan-runner reply: ignored\n\n{why}\n")


def plan_ws(repo, env: Mapping[str, str], plan_id: str) -> Workspace:
    """The plan's Workspace: its file on the checked-out (default) branch, else on the branch its sessions run on
    (a plan started there with *Run workflow*: runner.drivers.actions.env.plan_on_its_branch)."""
    ws = plan_workspace(repo, env, plan_id, GitStateStore(repo, remote=REMOTE))
    if ws is not None:
        return ws
    raise PlanRunnerError(
        what=f"the park issue names plan {plan_id!r}, but no plans/*.md file has that id",
        why="the plan file was renamed or deleted after the plan parked",
        fix=f"restore plans/{plan_id}.md on the default branch (or on the branch its sessions ran on), or close "
            "the issue")


def mode_reply(ctx: GitHubContext, env: Mapping[str, str], driver, rep) -> ModeResult:
    """Answer the event's command, and first every earlier command on the issue no job answered.

    GitHub keeps one pending job per concurrency group: a third `/plan-runner` comment while a reply job runs
    cancels the second's pending job. So each reply job reads the issue's comments and answers, oldest first,
    every command that has no answer of plan-runner's yet (an answer names its comment in a hidden marker, and
    counts only when plan-runner's own identity wrote it). No command is lost however GitHub orders the jobs.
    """
    if isinstance(ctx.event, IssueLabeled):
        return start_from_label(ctx, env, driver, ctx.event)
    if isinstance(ctx.event, ReviewComment):
        rc = ctx.event
        if rc.action != "created" or rc.user_is_bot or written_by_plan_runner(rc.body):
            return _ignored(f"review comment {rc.action} by @{rc.user_login}: only people's new comments steer")
        text = f"(on `{rc.path}`) {rc.body}" if rc.path else rc.body
        return take_note(ctx, env, driver, number=rc.pull_number, comment_id=rc.comment_id, user=rc.user_login,
                         text=text, source=rc.html_url or f"review comment {rc.comment_id}", react=False,
                         review=True)
    ev = ctx.issue_comment()
    if ev.action != "created":
        return _ignored(f"comment {ev.action}, not created: only new comments steer a plan")
    if ev.user_is_bot:
        return _ignored(f"@{ev.user_login} is a bot")
    if written_by_plan_runner(ev.body):  # its help text quotes the commands; the token may be a person's
        return _ignored("the comment is plan-runner's own")
    note = NOTE.search(ev.body) if ev.is_pull_request else None
    if note is not None:
        return take_note(ctx, env, driver, number=ev.issue_number, comment_id=ev.comment_id, user=ev.user_login,
                         text=note["text"], react=True,
                         source=f"{ctx.server_url}/{ctx.repository}/pull/{ev.issue_number}#issuecomment-{ev.comment_id}")
    if ev.is_pull_request:
        return _ignored("a comment on a pull request, not on a park issue")
    start = START.search(ev.body)
    if start is not None:
        return start_from_comment(ctx, env, driver, ev, start["path"])
    if parse_reply(ev.body) is None:
        return _ignored("no `/plan-runner` command in the comment")
    issue = driver.park_issue(ev.issue_number)
    plan_id = driver.plan_id_of_issue(issue)  # read from GitHub, not the payload
    if plan_id is None:
        return _ignored(f"#{ev.issue_number} is not a plan-runner park issue")
    comments = driver.issue_comments(ev.issue_number)
    answered = answered_comments(comments, issue.author)
    if ev.comment_id in answered:
        return _ignored(f"comment {ev.comment_id} was answered already (by a later comment's job, or this job's "
                        "first run)")
    earlier = [c for c in comments if c.comment_id < ev.comment_id and c.comment_id not in answered
               and not c.user_is_bot and not written_by_plan_runner(c.body) and parse_reply(c.body) is not None]
    earlier = earlier[-MAX_BACKLOG:]  # a flood of commands is answered by the jobs it starts, not all by one
    results = [_answer(ctx, env, driver, rep, c, plan_id) for c in [*earlier, ev]]
    if len(results) == 1:
        return results[0]
    decisive = [r for r in results if r.outcome in ("accepted", "stopped", "parked")]
    head = decisive[-1] if decisive else results[-1]
    parts = "\n".join(r.summary.replace("# plan-runner reply", "## plan-runner reply", 1) for r in results)
    summary = (f"# plan-runner reply: {len(results)} commands answered\n\n{len(earlier)} earlier command(s) on "
               f"#{ev.issue_number} had no answer (their jobs were cancelled while another reply job ran); "
               f"answered oldest first.\n\n{parts}")
    return ModeResult(outcome=head.outcome, next_action=head.next_action, issue_url=head.issue_url, summary=summary,
                      annotations=[a for r in results for a in r.annotations],
                      exit_code=max(r.exit_code for r in results))


def _answer(ctx: GitHubContext, env: Mapping[str, str], driver, rep, ev: IssueComment, plan_id: str) -> ModeResult:
    """One command comment on the park issue of `plan_id`, answered (every path leaves a marked answer)."""
    command = parse_reply(ev.body)
    assert command is not None
    user = ev.user_login

    def say(text: str) -> None:
        driver.comment(ev.issue_number, text, answers=ev.comment_id)

    if not driver.can_steer(user):
        say(REFUSAL.format(user=user))
        return ModeResult(outcome="refused", summary=f"# plan-runner reply: refused\n\n@{user} has no write "
                          f"access to the repository; plan `{plan_id}` is unchanged.\n",
                          annotations=[("warning", f"@{user} may not steer {plan_id}; nothing changed", "plan-runner reply")])
    if isinstance(command, ReplyProblem):
        say(f"@{user}: {defang(command.what)}.\n\n{HELP}")
        return ModeResult(outcome="invalid", summary=f"# plan-runner reply: not understood\n\n{command.what}\n")

    repo = workspace_root(env)
    ws = plan_ws(repo, env, plan_id)
    trusted, _ = load_trusted_plan(ws)
    fetch_work_branch(ws, trusted.work_branch)  # checkpoint states as the work branch has them
    ports = Ports(store=GitStateStore(repo, remote=REMOTE), dispatcher=driver, parker=driver)
    s = load_session(ws, ports)
    if not s.state.parked:
        say(f"@{user}: plan `{plan_id}` is not parked any more (another reply or run moved it on), so this reply "
            "changes nothing.")
        return ModeResult(outcome="not-parked", summary=f"# plan-runner reply: `{plan_id}` is not parked\n")
    if issue_number_of(s.state.park_issue) != ev.issue_number:
        current = s.state.park_issue or "none"
        say(f"@{user}: this is not the current park issue of plan `{plan_id}` (that is {current}), so this reply "
            "changes nothing. Answer there.")
        return _ignored(f"#{ev.issue_number} is an earlier park issue of `{plan_id}`; the current one is {current}")

    verb = command.verb.value
    action = decide_after_reply(verb, command.instructions, user, s.state, s.plan)
    source = f"{ctx.server_url}/{ctx.repository}/issues/{ev.issue_number}#issuecomment-{ev.comment_id}"
    s.write([Reply(at=ws.clock(), command=verb, text=command.instructions, user=user, source=source,
                   next_action=action)])
    driver.react(ev.comment_id, "+1")
    if command.verb is Verb.STOP:
        say(f"@{user}: plan `{plan_id}` is stopped. Nothing more runs; start it again with the workflow's "
            "`Run workflow` button.")
        driver.close_issue(ev.issue_number)
        return ModeResult(outcome="stopped", next_action=describe(action),
                          summary=f"# plan-runner reply: `{plan_id}` stopped by @{user}\n")
    said = " Your instructions go into the next session's prompt." if command.instructions else ""
    say(f"@{user}: `{verb}` accepted for plan `{plan_id}`.{said}\n\n"
        f"Next: {describe(action)}. This issue is closed; plan-runner opens a new one if it parks again.")
    driver.close_issue(ev.issue_number)
    result = dispatch(s, action)
    if result.status == "parked":  # GitHub refused the dispatch: parked again, with the fix, in a new issue
        return ModeResult(outcome="parked", next_action=describe(result.action) if result.action is not None else "", issue_url=result.url or "",
                          summary=f"# plan-runner reply: `{verb}` from @{user}\n\nPlan `{plan_id}`: {result.message}\n",
                          annotations=[("warning", f"{plan_id} parked: {result.message}", "plan-runner parked")])
    driver.react(ev.comment_id, "rocket")
    clock = plan_clock(ctx, driver, rep, load_session(ws, ports))
    return ModeResult(outcome="accepted", next_action=describe(action),
                      summary=f"# plan-runner reply: `{verb}` from @{user}\n\nPlan `{plan_id}`: {describe(action)}; "
                              "the next run is dispatched.\n" + (f"\n{clock}" if clock else ""))


def start_from_comment(ctx: GitHubContext, env: Mapping[str, str], driver, ev: IssueComment, raw: str) -> ModeResult:
    """`/plan-runner start plans/X.md` in an issue comment: a person with write access (asked from GitHub, as for a
    reply) starts the plan, a `workflow_dispatch` of the session workflow on the default branch, as *Run workflow*
    does. The comment is answered (marked), so a re-run of this job starts nothing twice."""
    user = ev.user_login

    def say(text: str) -> None:
        driver.comment(ev.issue_number, text, answers=ev.comment_id)

    own = driver.issue_comments(ev.issue_number)
    if ev.comment_id in answered_comments(own, _author_of_answers(own)):
        return _ignored(f"comment {ev.comment_id} was answered already")
    if not driver.can_steer(user):
        say(REFUSAL.format(user=user).replace("A maintainer can answer with one of the commands in the issue "
                                              "description.", "A maintainer can start a plan."))
        return ModeResult(outcome="refused", summary=f"# plan-runner start: refused\n\n@{user} has no write access "
                          "to the repository; nothing was started.\n",
                          annotations=[("warning", f"@{user} may not start a plan; nothing started", "plan-runner start")])
    repo = workspace_root(env)
    try:
        path = normalise_plan_path(raw)
    except PlanRunnerError:
        path = ""  # answered below as no such plan, with the plans there are
    plans = plan_files(repo)
    if not path or path not in plans:
        listed = ", ".join(f"`{p}`" for p in plans[:20]) or "none"
        say(f"@{user}: there is no plan `{defang(raw)}` on the default branch. Plans: {listed}.\n\n"
            "Start one with `/plan-runner start plans/<name>.md` on a line of its own.")
        return ModeResult(outcome="invalid", summary=f"# plan-runner start: no such plan\n\n`{defang(raw)}` is not a "
                          f"plan file on the default branch ({listed}).\n")
    return _start(ctx, env, driver, path, ev.issue_number, user, say, key=f"start-{ev.comment_id}", how="",
                  where=f"from #{ev.issue_number}", react_to=ev.comment_id)


def _start(ctx: GitHubContext, env: Mapping[str, str], driver, path: str, number: int, user: str, say, *, key: str,
           how: str, where: str, react_to: int | None = None) -> ModeResult:
    """Start the plan `path` for `user` from issue `number` (a comment's or a label's): its place recorded, its
    session dispatched (`key`: the dispatch's idempotency key after the plan's id), the start said there."""
    unrecorded = record_place(ctx, env, driver, path, number, user)
    run_id = driver.dispatch_next(path, f"{plan_id_from_path(path)}#{key}")
    if react_to is not None:
        driver.react(react_to, "rocket")
    link = f"{ctx.server_url}/{ctx.repository}/actions/runs/{run_id}" if run_id else ""
    say(f"Started `{path}` for @{user}{how}" + (f": [run {run_id}]({link})." if link else ".")
        + " Each of its sessions posts its progress here, edited while it runs, and how it ended; the work shows in "
          "the plan's pull request once a checkpoint is credited; it parks in an issue of its own if it needs a "
          "human." + unrecorded)
    return ModeResult(outcome="dispatched", next_action=f"session of {path}",
                      summary=f"# plan-runner start: `{path}`\n\nStarted by @{user} {where}"
                              + (f": run [{run_id}]({link}).\n" if link else ".\n"))


def record_place(ctx: GitHubContext, env: Mapping[str, str], driver, path: str, number: int, user: str) -> str:
    """The issue a plan is started from becomes its place (a `Place` in its ledger): each session's progress
    comment goes there (runner.drivers.actions.progress). "" when recorded, else a sentence saying why not (the
    plan is started all the same)."""
    try:
        repo = workspace_root(env)
        ws = Workspace(repo=repo, plan_path=path, env=dict(env), remote=REMOTE,
                       job=env.get("GITHUB_RUN_ID", "") or "actions")
        trusted, _ = load_trusted_plan(ws)
        fetch_work_branch(ws, trusted.work_branch)
        s = load_session(ws, Ports(store=GitStateStore(repo, remote=REMOTE), dispatcher=driver, parker=driver))
        s.write([Place(at=ws.clock(), issue=number, url=f"{ctx.server_url}/{ctx.repository}/issues/{number}",
                       user=user)])
        return ""
    except PlanRunnerError as err:
        return f" (Its progress could not be tied to this issue: {defang(err.what)}.)"


def _author_of_answers(comments: list[IssueComment]) -> str:
    """plan-runner's identity as the author of its marked comments (the job token's bot), for `answered_comments`."""
    for c in comments:
        if c.user_is_bot and written_by_plan_runner(c.body):
            return c.user_login
    return ""


def start_from_label(ctx: GitHubContext, env: Mapping[str, str], driver, ev: IssueLabeled) -> ModeResult:
    """The start label put on an issue whose body names a plan: as `/plan-runner start`, for the person who put
    the label (write access asked from GitHub). The answer is marked with this job's run id, so a re-run of the
    job (the same label event) starts nothing twice; labelling again is a new event and starts again."""
    label = (env.get(START_LABEL_ENV) or "").strip() or DEFAULT_START_LABEL
    if ev.action != "labeled" or ev.label != label:
        return _ignored(f"label `{defang(ev.label)}` {ev.action}, not the start label `{defang(label)}` added")
    if ev.sender_is_bot:
        return _ignored(f"@{ev.sender_login} is a bot")
    if ev.is_pull_request:
        return _ignored("a label on a pull request, not on an issue")
    user, run = ev.sender_login, ctx.run_id or "0"
    marker = _STARTED_BY.format(int(run))
    own = driver.issue_comments(ev.issue_number)
    author = _author_of_answers(own)
    if author and any(c.user_login == author and marker in c.body for c in own):
        return _ignored(f"this label event (run {run}) was answered already")

    def say(text: str) -> None:
        driver.comment(ev.issue_number, f"{text}\n{marker}")

    if not driver.can_steer(user):
        say(f"Thanks, @{user}. Only people with write access to this repository can start a plan, so the label "
            f"`{defang(label)}` starts nothing. A maintainer can start a plan.")
        return ModeResult(outcome="refused", summary=f"# plan-runner start: refused\n\n@{user} has no write access "
                          "to the repository; nothing was started.\n",
                          annotations=[("warning", f"@{user} may not start a plan; nothing started", "plan-runner start")])
    plans = plan_files(workspace_root(env))
    named = list(dict.fromkeys(m[1] for m in PLAN_IN_BODY.finditer(ev.issue_body)))
    known = [p for p in named if p in plans]
    if len(known) != 1:
        listed = ", ".join(f"`{p}`" for p in plans[:20]) or "none"
        what = ("names no plan" if not named else
                f"names no plan file of the default branch ({', '.join(f'`{defang(p)}`' for p in named[:5])})"
                if not known else f"names {len(known)} plans ({', '.join(f'`{p}`' for p in known[:5])})")
        say(f"@{user}: this issue's description {what}, so the label `{defang(label)}` starts nothing. Plans: "
            f"{listed}.\n\nName exactly one, e.g. `plans/<name>.md`, in the description, then put the label again "
            "(or comment `/plan-runner start plans/<name>.md`).")
        return ModeResult(outcome="invalid", summary=f"# plan-runner start: no plan\n\nThe description of "
                          f"#{ev.issue_number} {what} ({listed}).\n")
    (path,) = known
    return _start(ctx, env, driver, path, ev.issue_number, user, say, key=f"start-label-{run}",
                  how=f" (label `{defang(label)}`)", where=f"with a label on #{ev.issue_number}")


def take_note(ctx: GitHubContext, env: Mapping[str, str], driver, *, number: int, comment_id: int, user: str,
              text: str, source: str, react: bool, review: bool = False) -> ModeResult:
    """A note on a plan's watch pull request (`/plan-runner note ...`, or a review comment) from a person with
    write access (asked from GitHub): recorded in the plan's ledger, it reaches the next session's prompt, quoted
    and attributed (`runner.core.policy.with_notes`); nothing parks or is dispatched. Answered (marked) once."""
    plan_id = driver.plan_id_of_watch_pull(number)  # read from GitHub, not the payload
    if plan_id is None:
        return _ignored(f"#{number} is not a plan's watch pull request")
    own = driver.issue_comments(number)
    if comment_id in answered_comments(own, _author_of_answers(own)):
        return _ignored(f"comment {comment_id} was answered already")

    def say(line: str) -> None:
        driver.comment(number, line, answers=comment_id)

    if not driver.can_steer(user):
        say(f"Thanks, @{user}. Only people with write access to this repository can steer plan-runner, so this "
            "note does not reach the agent.")
        return ModeResult(outcome="refused", summary=f"# plan-runner note: refused\n\n@{user} has no write access "
                          f"to the repository; plan `{plan_id}` is unchanged.\n",
                          annotations=[("warning", f"@{user} may not steer {plan_id}; nothing changed", "plan-runner note")])
    text = text.strip()
    if not text or len(text) > MAX_INSTRUCTIONS:
        what = "the note is empty" if not text else f"the note is {len(text)} characters long; at most {MAX_INSTRUCTIONS}"
        say(f"@{user}: {what}, so nothing reaches the agent. Write `/plan-runner note <what the next session should "
            "know>`.")
        return ModeResult(outcome="invalid", summary=f"# plan-runner note: not taken\n\n{what}.\n")
    repo = workspace_root(env)
    ws = plan_ws(repo, env, plan_id)
    trusted, _ = load_trusted_plan(ws)
    fetch_work_branch(ws, trusted.work_branch)
    s = load_session(ws, Ports(store=GitStateStore(repo, remote=REMOTE), dispatcher=driver, parker=driver))
    s.write([Note(at=ws.clock(), text=text, user=user, source=source)])
    if react:
        driver.react(comment_id, "+1")
    reacted = ""
    if review:  # a review comment's reaction needs `pull-requests: write`, which older workflows do not grant
        try:
            driver.react_review(comment_id, "+1")
        except PlanRunnerError as err:
            reacted = (f"\n\nThe review comment got no reaction: {err.what}. Give the reply job `pull-requests: write` "
                       "(the workflow `plan-runner init` writes has it).\n")
    say(f"@{user}: noted for plan `{plan_id}`. Your note goes into the next session's prompt, quoted and with your "
        "name; the plan is not paused.")
    return ModeResult(outcome="noted", summary=f"# plan-runner note: `{plan_id}`\n\n@{user}'s note reaches the next "
                      "session's prompt.\n" + reacted)
