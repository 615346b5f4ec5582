"""`mode: tick` (on `schedule`): wake plans whose wait is over, reconcile orphaned sessions.

For each plan with state: a session that started and never finished, and is older
than it could possibly run, is reconciled (TimedOut); a plan whose wait expired, or
whose decided next step was never dispatched, gets at most one dispatch. Parked,
stopped, finished and waiting plans cost nothing: the only API calls are the
dispatches of the plans that are due.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from runner.action import ModeResult, REMOTE, fetch_work_branch, plan_files, workspace_root
from runner.actions import ConsultAdvisor, Finish, Park, RunSession, Wait, describe
from runner.errors import PlanRunnerError, Refused, StateConflict
from runner.events import GitHubContext
from runner.exits import Exit
from runner.ledger import Dispatched, Reply, SessionRecord, SessionStarted
from runner.plan import Plan
from runner.policy import decide_start
from runner.planfile import plan_id_from_path
from runner.session import Drivers, Session, Workspace
from runner.state import GitStateStore
from runner.step import dispatch, park_refused_dispatch

ORPHAN_MARGIN = timedelta(minutes=15)  # job set-up, pushes, reports: beyond the agent and the gates
LOST_DISPATCH_AFTER = timedelta(minutes=30)  # a dispatched run that never started by then was lost


def orphan_deadline(started_at: datetime, plan: Plan) -> datetime:
    """When a session that started at `started_at` cannot still be running in a live job."""
    gates = sum(g.timeout_minutes for g in plan.config.gates) * 2  # a red required gate runs twice
    return started_at + timedelta(seconds=plan.config.agent.time_limit_minutes + gates) + ORPHAN_MARGIN


def stopped_by_reply(entries: Sequence) -> bool:
    """The last human word was `stop` and nothing ran since: the plan stays stopped."""
    for entry in reversed(entries):
        if isinstance(entry, Reply):
            return entry.command == "stop"
        if isinstance(entry, (SessionRecord, SessionStarted)):
            return False
    return False


def lost_dispatch(entries: Sequence, n: int, now: datetime) -> bool:
    """A dispatch for session `n` was recorded long ago and that session never started.
    Reads back only to the last session record: anything about session `n` comes after it."""
    times = []
    for e in reversed(entries):
        if isinstance(e, SessionStarted) and e.n >= n:
            return False
        if isinstance(e, Dispatched) and e.for_session >= n:
            times.append(e.at)
        if isinstance(e, SessionRecord) and e.n < n:
            break
    return bool(times) and now - max(times) >= LOST_DISPATCH_AFTER


def decide_tick(s: Session, now: datetime) -> tuple[str, object | None]:
    """(what the tick sees, the action to dispatch or None). Pure over the session's state."""
    st = s.state
    if st.finished:
        return "finished", None
    if st.open_session is not None:
        return f"session {st.open_session.n} running in job {st.open_session.job or '?'}", None
    if not s.entries:
        return "not started (start it with workflow_dispatch)", None
    if stopped_by_reply(s.entries):
        return "stopped by a maintainer", None
    action = decide_start(st, s.plan)
    if isinstance(action, Park) and st.park_issue:
        return f"parked, waiting for a human: {st.park_issue}", None
    seen = "due"
    if isinstance(action, Wait):
        if action.until > now:
            return f"waiting until {action.until.isoformat(timespec='seconds')}", None
        seen = "wait is over"
    if not isinstance(action, (Wait, RunSession, ConsultAdvisor, Park, Finish)):
        return "nothing to do", None
    n = st.sessions + 1
    if st.last_dispatch >= n and not lost_dispatch(s.entries, n, now):
        return f"session {n} already dispatched", None
    return seen, action


def tick_plan(ws: Workspace, drivers: Drivers, log=lambda text: None) -> tuple[str, bool]:
    """One plan's tick: reconcile, then dispatch at most one run. Returns (a line for the summary, dispatched?)."""
    s = Session(ws, drivers)
    now = ws.clock()
    open_ = s.state.open_session
    if open_ is not None and now >= orphan_deadline(open_.started_at, s.trusted):
        fetch_work_branch(ws, s.trusted.work_branch)
        s = Session(ws, drivers)  # with the work branch's tracker, for the decision after the orphan
        s.reconcile_orphan()
        log(f"{s.trusted.id}: reconciled session {open_.n} (job {open_.job or '?'} never finished)")
    seen, action = decide_tick(s, now)
    if action is None:
        return seen, False
    if s.state.last_dispatch >= s.state.sessions + 1:  # a lost dispatch: record a fresh intent
        s.write([Dispatched(at=now, for_session=s.state.sessions + 1, key=f"{s.trusted.id}#{s.state.sessions + 1}:redo")])
        try:
            drivers.dispatcher.dispatch_next(s.trusted.path, f"{s.trusted.id}#{s.state.sessions + 1}")
        except Refused as err:
            result = park_refused_dispatch(s, err)
            return f"parked: {result.message}", False
    else:
        result = dispatch(s, action)
        if result.status == "parked":
            return f"parked: {result.message}", False
    return f"{seen}: dispatched ({describe(action)})", True


def mode_tick(ctx: GitHubContext, env: Mapping[str, str], driver, rep) -> ModeResult:
    repo = workspace_root(env)
    store = GitStateStore(repo, remote=REMOTE)
    with_state = set(store.plans())
    drivers = Drivers(store=store, dispatcher=driver, parker=driver)
    rows, dispatched, failed = [], 0, 0
    annotations = []
    for path in plan_files(repo):
        plan_id = plan_id_from_path(path)
        if plan_id not in with_state:
            continue
        ws = Workspace(repo=repo, plan_path=path, env=dict(env), remote=REMOTE,
                       job=env.get("GITHUB_RUN_ID", "") or "actions")
        went = False
        try:
            line, went = tick_plan(ws, drivers, rep.log)
        except StateConflict:
            line = "another job moved the plan first; nothing to do"
        except PlanRunnerError as err:
            failed += 1
            line = f"error: {err.what}"
            annotations.append(("error", f"{plan_id}: {err.what}", "plan-runner tick"))
        dispatched += went
        rows.append((plan_id, line))
        rep.log(f"plan-runner tick: {plan_id}: {line}")
    table = "\n".join(f"| `{pid}` | {line.replace('|', '/')} |" for pid, line in rows) or "| - | no plan has state yet |"
    summary = (f"# plan-runner tick: {dispatched} run(s) dispatched\n\n| plan | state |\n|---|---|\n{table}\n")
    return ModeResult(outcome="dispatched" if dispatched else "idle", summary=summary, annotations=annotations,
                      exit_code=Exit.USER_ERROR if failed else Exit.OK)
