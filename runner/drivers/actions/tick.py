"""`mode: tick` (the clock's `schedule`) and `mode: reconcile` (`workflow_run` completed, not a success).

For each plan with state: a session that started and never finished, and is older
than it could possibly run (or whose run GitHub says ended: reconcile), is reconciled
(TimedOut); a plan whose wait expired, or whose decided next step was never dispatched,
gets at most one dispatch. Parked, stopped, finished and waiting plans cost nothing:
the only API calls are the dispatches of the plans that are due.

The clock (docs/github-actions.md, "What it costs"): the tick's schedule lives in a workflow of
its own that runs only while some plan needs it (`needs_clock`): a job that leaves a plan
waiting enables it, a tick that finds none waiting disables it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from runner.adapters import clock as wallclock
from runner.drivers.actions.env import (
    REMOTE, ModeResult, fetch_work_branch, plan_files, plan_workspace, workspace_root)
from runner.adapters.git import work as gitwork
from runner.core.actions import ConsultAdvisor, Finish, Park, RunSession, SessionKind, Wait, describe
from runner.core.errors import PlanRunnerError, Refused, StateConflict
from runner.adapters.github.events import GitHubContext, WorkflowRun
from runner.core.exits import Exit
from runner.core.ledger import Dispatched, Place, Reply, SessionRecord, SessionStarted
from runner.core.plan import Plan
from runner.core.policy import decide_start
from runner.core.planfile import plan_id_from_path
from runner.drivers.session import Ports, Session, Workspace, load_session
from runner.adapters.store.state import GitStateStore
from runner.drivers.session.cut_short import reconcile_orphan
from runner.drivers.session.phases import dispatch, park_refused_dispatch, record_dispatched_run

ORPHAN_MARGIN = timedelta(minutes=15)  # job set-up, pushes, reports: beyond the agent and the gates
LOST_DISPATCH_AFTER = timedelta(minutes=30)  # a dispatched run that never started by then was lost


def orphan_deadline(started_at: datetime, plan: Plan) -> datetime:
    """When a session that started at `started_at` cannot still be running in a live job."""
    gates = sum(g.timeout_s for g in plan.config.gates) * 2  # a red required gate runs twice
    return started_at + timedelta(seconds=plan.config.agent.time_limit_s + gates) + ORPHAN_MARGIN


def stopped_by_reply(entries: Sequence) -> bool:
    """The last human word was `stop` and nothing ran since: the plan stays stopped."""
    for entry in reversed(entries):
        if isinstance(entry, Reply):
            return entry.command == "stop"
        if isinstance(entry, (SessionRecord, SessionStarted)):
            return False
    return False


def unaccounted_after(plan: Plan) -> timedelta:
    """How long after its dispatch intent a session can still be running without a word on the remote: a
    dispatched session records its start only locally (one push less), so until its final push the remote
    shows only the intent. Queueing (LOST_DISPATCH_AFTER) plus the longest a session can run."""
    zero = datetime(2000, 1, 1, tzinfo=timezone.utc)
    return LOST_DISPATCH_AFTER + (orphan_deadline(zero, plan) - zero)


def lost_dispatch(entries: Sequence, n: int, now: datetime, after: timedelta = LOST_DISPATCH_AFTER) -> bool:
    """A dispatch for session `n` was recorded at least `after` ago and that session left no start on the remote.
    Reads back only to the last session record: anything about session `n` comes after it."""
    times = []
    for e in reversed(entries):
        if isinstance(e, SessionStarted) and e.n >= n:
            return False
        if isinstance(e, Dispatched) and e.for_session >= n and not e.confirmed:
            times.append(e.at)
        if isinstance(e, SessionRecord) and e.n < n:
            break
    return bool(times) and now - max(times) >= after


def intents_for(entries: Sequence, n: int) -> list[Dispatched]:
    """The dispatch intents for session `n` since the last session record, oldest first."""
    found = []
    for e in reversed(entries):
        if isinstance(e, SessionRecord):
            break
        if isinstance(e, Dispatched) and e.for_session == n and not e.confirmed:
            found.append(e)
    return found[::-1]


def dispatched_run(entries: Sequence, n: int) -> int | None:
    """The run GitHub said it started for session `n`'s latest dispatch (None: not said, or `n` started since)."""
    for e in reversed(entries):
        if isinstance(e, SessionRecord) and e.n < n or isinstance(e, SessionStarted) and e.n >= n:
            return None
        if isinstance(e, Dispatched) and e.for_session == n:
            return e.run_id if e.confirmed else None
    return None


def ended_run(s: Session, ended: frozenset[int]) -> int | None:
    """The run of this plan's next or open session when GitHub said it ended without succeeding (reconcile)."""
    open_ = s.state.open_session
    if open_ is not None:
        return int(open_.job) if open_.job.isdigit() and int(open_.job) in ended else None
    run = dispatched_run(s.entries, s.state.sessions + 1) if s.state.last_dispatch > s.state.sessions else None
    return run if run in ended else None


def watched_run(s: Session) -> int | None:
    """The workflow run this plan's open session runs in, or its next session was dispatched as (GitHub named it):
    the run the clock's tick asks GitHub about. None: no such run, or none known."""
    open_ = s.state.open_session
    if open_ is not None:
        return int(open_.job) if open_.job.isdigit() else None
    n = s.state.sessions + 1
    return dispatched_run(s.entries, n) if s.state.last_dispatch >= n else None


def needs_clock(s: Session) -> str | None:
    """Why this plan needs the clock (the tick's schedule), or None. Three things wait on a clock: a plan waiting
    out a rate or usage limit until a known reset; a dispatch GitHub named no run for (a lost call is found only by
    its age); and a session that runs, or was dispatched: if its job dies (cancelled, timed out, its runner lost,
    a crash) nothing else would ever look at the plan again. GitHub starts no workflow for the events of the job's
    token but the two dispatches ("Triggering a workflow from a workflow"), so the end of a run one session
    dispatched for the next is no `workflow_run` event: the clock's tick asks GitHub how the run ended
    (`GitHubDriver.run_ended`) and reconciles the session, or reconciles it past its deadline."""
    st = s.state
    if st.finished or not s.entries:
        return None
    if st.open_session is not None:
        return f"session {st.open_session.n} running (reconciled if its job dies)"
    if stopped_by_reply(s.entries):
        return None
    n = st.sessions + 1
    if st.last_dispatch >= n:
        run = dispatched_run(s.entries, n)
        return (f"dispatch of session {n} has no run yet" if run is None
                else f"session {n} dispatched as run {run} (reconciled if its job dies)")
    action = decide_start(st, s.plan)
    if isinstance(action, Wait):
        return f"waiting until {action.until.isoformat(timespec='seconds')}"
    return None


def decide_tick(s: Session, now: datetime, ended: frozenset[int] = frozenset()
                ) -> tuple[str, RunSession | Wait | ConsultAdvisor | Park | Finish | None]:
    """(what the tick sees, the action to dispatch or None). Pure over the session's state; `ended`: runs GitHub
    said ended without succeeding (mode reconcile)."""
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
    if st.last_dispatch >= n and not lost_dispatch(s.entries, n, now, unaccounted_after(s.trusted)) \
            and ended_run(s, ended) is None:
        return f"session {n} already dispatched", None
    return seen, action


def tick_plan(ws: Workspace, ports: Ports, log=lambda text: None,
              ended: frozenset[int] = frozenset(), ask: Callable[[int], bool | str] | None = None,
              reconciled: list[Reconciled] | None = None,
              conclusions: Mapping[int, str] | None = None) -> tuple[str, bool]:
    """One plan's tick: reconcile, then dispatch at most one run. Returns (a line for the summary, dispatched?).
    `ended`: runs GitHub said ended without succeeding: their sessions are reconciled now, not after a deadline.
    `ask`: whether GitHub says a run ended without succeeding (`GitHubDriver.run_ended`), asked of the run of the
    plan's open or dispatched session (one call a running plan; none for a plan that waits, is parked or done).
    `reconciled`: each session reconciled here, for its progress comment (runner.drivers.actions.progress.
    end_orphan_progress) and its verdict's check run, once the tick's push landed."""
    s = load_session(ws, ports)
    now = ws.clock()
    run = watched_run(s)
    conclusions = dict(conclusions or {})
    if ask is not None and run is not None and run not in ended:
        try:
            said = ask(run)
            if said:
                ended = ended | {run}
                if isinstance(said, str):
                    conclusions[run] = said
                log(f"{s.trusted.id}: GitHub says run {run} ended without succeeding")
        except PlanRunnerError as err:  # the deadline still holds: the next tick asks again
            log(f"{s.trusted.id}: could not ask GitHub how run {run} is: {err.what}")
    open_ = s.state.open_session
    if open_ is not None and (now >= orphan_deadline(open_.started_at, s.trusted) or ended_run(s, ended)):
        run_gone = ended_run(s, ended)
        fetch_work_branch(ws, s.trusted.work_branch)
        s = load_session(ws, ports)  # with the work branch's tracker, for the decision after the orphan
        reconcile_orphan(s)
        log(f"{s.trusted.id}: reconciled session {open_.n} (job {open_.job or '?'} never finished)")
        if reconciled is not None:
            reconciled.append(_reconciled(s, open_.n, (
                f"GitHub says its run {run_gone} ended {_how(conclusions.get(run_gone))}"
                if run_gone is not None else
                "its job never reported within the plan's time limit (killed, cancelled, timed out or its runner "
                "lost)")))
    seen, action = decide_tick(s, now, ended)
    if action is None:
        return seen, False
    n = s.state.sessions + 1
    run = ended_run(s, ended)
    if s.state.last_dispatch >= n:
        # Dispatched long ago and not a word since: the call was lost, or the run was killed outright before its
        # one push (a dispatched session pushes its start with its verdict). The remote cannot tell which: the
        # first time the run is dispatched again (nothing burned, as for a lost call); if that one goes silent
        # too, the session is classified like any that started and never finished (TimedOut), then the plan
        # goes on, so a run killed every time cannot loop for free.
        intents = intents_for(s.entries, n)
        if run is None and len(intents) < 2:
            s.write([Dispatched(at=now, for_session=n, key=f"{s.trusted.id}#{n}:redo")])
            try:
                ports.dispatcher.dispatch_next(s.trusted.path, f"{s.trusted.id}#{n}", ref=s.state.ref)
            except Refused as err:
                result = park_refused_dispatch(s, err)
                return f"parked: {result.message}", False
            return f"{seen}: session {n} never reported; dispatched again ({describe(action)})", True
        fetch_work_branch(ws, s.trusted.work_branch)
        s = load_session(ws, ports)
        reconcile_orphan(s, started=_unaccounted_start(s, n, intents[0] if intents else None, action))
        if reconciled is not None:
            reconciled.append(_reconciled(s, n, (
                f"GitHub says its run {run} ended {_how(conclusions.get(run))} without a word of the session"
                if run is not None else f"it was dispatched {len(intents)} times and never reported")))
        log(f"{s.trusted.id}: reconciled session {n} " + (f"(run {run} ended without a word)" if run is not None
                                                          else f"(dispatched {len(intents)} times, never reported)"))
        seen, action = decide_tick(s, now)
        if action is None:
            return f"reconciled session {n}; {seen}", False
    result = dispatch(s, action)
    if result.status == "parked":
        return f"parked: {result.message}", False
    return f"{seen}: dispatched ({describe(action)})", True


@dataclass(frozen=True)
class Reconciled:
    """A session a tick or reconcile recorded (TimedOut): its progress comment and its check run follow the push."""

    plan_id: str
    place: Place | None
    n: int
    how: str
    record: SessionRecord | None
    head: str | None  # the work branch's head on the remote: where the verdict's check run goes


def _reconciled(s: Session, n: int, how: str) -> Reconciled:
    from runner.drivers.actions.verdict import last_record

    head = gitwork.ref_sha(s.ws.repo, f"refs/remotes/{REMOTE}/{s.trusted.work_branch}")
    return Reconciled(s.trusted.id, s.state.place, n, how, last_record(s), head)


def publish_reconciled_check(driver, ctx: GitHubContext, done: Reconciled, log: Callable[[str], None]) -> None:
    """The verdict of a session this job reconciled (TimedOut: `failure`) as its check run `plan-runner / <plan>`, on
    the work branch's head, as a session job publishes its own (runner.drivers.actions.verdict): so every session,
    a killed one too, leaves its verdict there, and a branch rule never sees the plan's earlier green one as the
    last word. Never worth the job: a refusal (a workflow without `checks: write` in this job) is logged with the
    fix."""
    from runner.adapters.github.verdict_check import verdict_check

    if done.record is None or done.record.n != done.n or not done.head:
        return  # no record of that session, or no work branch on the remote: nothing to put it on
    nxt = done.record.next_action
    check = verdict_check(done.plan_id, done.record, next_action=describe(nxt) if nxt is not None else "",
                          run_url=ctx.run_url)
    try:
        url = driver.publish_check(check, done.head)
        log(f"session {done.n}'s verdict is the check run {check.name} ({check.conclusion}) on {done.head[:12]}"
            + (f": {url}" if url else ""))
    except PlanRunnerError as err:
        log(f"session {done.n}'s verdict could not be published as the check run {check.name}: {err.what} (add "
            "`checks: write` to this job's `permissions:`, as `plan-runner init` writes it)")
    except Exception as exc:  # noqa: BLE001 - a check run is never worth the tick
        log(f"session {done.n}'s verdict could not be published as the check run {check.name}: {exc}")


def _unaccounted_start(s: Session, n: int, intent: Dispatched | None, action) -> SessionStarted:
    """The start a dispatched session would have recorded, as far as the remote knows it."""
    run = action if isinstance(action, RunSession) else s.state.pending if isinstance(s.state.pending, RunSession) \
        else None
    work = s.ws.remote and gitwork.ref_sha(s.ws.repo, f"refs/remotes/{s.ws.remote}/{s.trusted.work_branch}")
    return SessionStarted(n=n, kind=run.kind if run else SessionKind.DELIVERY, checkpoint=run.checkpoint if run else None,
                          started_at=intent.at if intent else s.ws.clock(), base_sha=work or "",
                          job=f"dispatched as {intent.key}" if intent else "",
                          resume_session_id=run.resume_session_id if run else None)


class _DispatchLater:
    """The dispatcher of a tick: a run is dispatched only after its intent is on the remote, and the tick
    pushes every plan's intent in one atomic push at the end, so the calls wait for that push."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def collect_into(self, calls: list[tuple[str, str, str | None]]) -> None:
        """The plan's own list of calls, for the plan ticked next."""
        self.calls = calls

    def dispatch_next(self, plan_path: str, key: str, ref: str | None = None) -> None:
        self.calls.append((plan_path, key, ref))

    @property
    def dispatched_runs(self) -> tuple[tuple[str, int, str], ...]:
        return ()  # nothing is started before the tick's push; the calls are made after it


KEEPALIVE_HOUR_UTC = 0  # the ticks of this hour (two: :17 and :47) keep the workflow enabled


def keepalive_due(now: datetime) -> bool:
    """Once a day is plenty against GitHub's 60 days (and survives weeks of dropped schedules)."""
    return now.astimezone(timezone.utc).hour == KEEPALIVE_HOUR_UTC


def utcnow() -> datetime:
    """The tick's time of day (the keep-alive hour): plan-runner's clock, runner/adapters/clock.py."""
    return wallclock.now()


def keep_alive(driver, rep) -> str:
    """Keep the workflow enabled on a quiet public repository; a refusal is a warning, never the tick's failure."""
    try:
        driver.keep_workflow_enabled()
        return "kept enabled"
    except PlanRunnerError as err:
        rep.annotate("warning", f"could not keep the workflow enabled: {err.what}", "plan-runner keep-alive")
        return f"not kept enabled: {err.what}"


_CONCLUSIONS = {"cancelled": "cancelled", "timed_out": "timed out (the job's `timeout-minutes`)",
                "failure": "failed (its runner lost, or the job killed)", "startup_failure": "failed to start"}


def _how(conclusion: str | None) -> str:
    """GitHub's conclusion of a run that ended without succeeding, in words (only GitHub's known values)."""
    if conclusion in _CONCLUSIONS:
        return f"{_CONCLUSIONS[conclusion]} (conclusion `{conclusion}`)"
    return "without succeeding (cancelled, timed out or its runner lost)"


def _logger(rep, prefix: str) -> Callable[[str], None]:
    return lambda text: rep.log(prefix + text)


def _session_of(key: str) -> int:
    """The session number in a dispatch key (`plan#n`, `plan#n:redo`)."""
    return int(key.rsplit("#", 1)[1].split(":", 1)[0])


def ended_runs(ctx: GitHubContext) -> frozenset[int]:
    """The run a `workflow_run` event says ended without succeeding: a session's run (started by a dispatch) in
    the session workflow. The workflow's `if:` skips the job for the rest; checked again here, in code."""
    ev = ctx.event
    if not isinstance(ev, WorkflowRun):
        raise PlanRunnerError(what=f"`reconcile` mode needs a workflow_run event, this job runs on "
                                   f"{ctx.event_name or 'none'!r}",
                              why="reconcile reads which run ended from the workflow_run payload",
                              fix="run `mode: reconcile` only from the `workflow_run` trigger, as `plan-runner init` "
                                  "writes it (.github/workflows/plan-runner-reconcile.yml)")
    if ev.action != "completed" or ev.conclusion in ("", "success", "skipped") or ev.event != "workflow_dispatch":
        return frozenset()
    return frozenset({ev.run_id})


def mode_reconcile(ctx: GitHubContext, env: Mapping[str, str], driver, rep) -> ModeResult:
    """A session's run ended and did not succeed (killed, cancelled, timed out, failed): reconcile its plan now."""
    ended = ended_runs(ctx)
    ev = ctx.event
    said = {ev.run_id: ev.conclusion} if isinstance(ev, WorkflowRun) and ev.run_id in ended else {}
    return mode_tick(ctx, env, driver, rep, ended=ended, name="reconcile", conclusions=said)


def set_clock(ctx: GitHubContext, driver, rep, waiting: Mapping[str, str], *, may_disable: bool) -> str:
    """Enable the clock when a plan waits on it; disable it (`may_disable`: the clock's own tick) when none does.
    Never the session workflow (the old single file holds both): disabling it would stop every session and reply.
    A refusal is a warning: the plans' state holds the wait, and the next job that sees it tries again."""
    clock = ctx.clock_workflow
    if not waiting and not may_disable:
        return ""
    if clock == ctx.session_workflow:
        return ""
    try:
        driver.set_workflow_enabled(clock, bool(waiting))
    except PlanRunnerError as err:
        what = "enable" if waiting else "disable"
        if "(404)" in err.what:  # no such file on the default branch: the old single workflow, or a rename
            err = PlanRunnerError(what=f"{err.what}; there is no workflow {clock} on the default branch (with the old "
                                       "single workflow its own tick wakes the plan: run `plan-runner init --force` "
                                       "to migrate)", why=err.why, fix=err.fix)
        rep.annotate("warning", f"could not {what} the clock {clock}: {err.what}"
                     + (f" ({'; '.join(f'{p}: {w}' for p, w in waiting.items())}: start the plan again by hand "
                        "when it is due, or fix the token's `actions: write`)" if waiting else ""),
                     "plan-runner clock")
        return f"Clock `{clock}`: could not {what} it: {err.what}.\n"
    if waiting:
        return f"Clock `{clock}`: enabled ({'; '.join(f'`{p}` {w}' for p, w in waiting.items())}).\n"
    return f"Clock `{clock}`: disabled (no plan waits on a clock: nothing is billed until one does).\n"


def plan_clock(ctx: GitHubContext, driver, rep, s: Session, *, already_on: bool = False) -> str:
    """After a session or a reply: enable the clock when this plan now needs it (a line for the summary).
    `already_on`: this job enabled it, or found the plan needing it already (whoever left it so enabled it, and no
    tick disables the clock while a plan needs it): no call."""
    why = needs_clock(s)
    return set_clock(ctx, driver, rep, {s.trusted.id: why}, may_disable=False) if why and not already_on else ""


OLD_SINGLE_WORKFLOW = (
    "this tick runs in the session workflow {file} (the single workflow of plan-runner before the clock had its own "
    "file): it runs every 30 minutes whatever waits, about 1,440 billable minutes a month. Run `plan-runner init "
    "--force` in your checkout (it writes .github/workflows/plan-runner-clock.yml and plan-runner-reconcile.yml and "
    "a plan-runner.yml without the schedule; keep your edits), commit the three files on the default branch")


def mode_tick(ctx: GitHubContext, env: Mapping[str, str], driver, rep, *, ended: frozenset[int] = frozenset(),
              name: str = "tick", conclusions: Mapping[int, str] | None = None) -> ModeResult:
    repo = workspace_root(env)
    store = GitStateStore(repo, remote=REMOTE)
    with_state = set(store.plans())
    later = _DispatchLater()
    ports = Ports(store=store, dispatcher=later, parker=driver)
    store.defer_pushes()  # every plan's writes go in one atomic push, after the loop
    rows, dispatched, failed = [], 0, 0
    annotations = []
    calls: dict[str, list[tuple[str, str, str | None]]] = {}
    spaces: dict[str, Workspace] = {}
    reconciled: list[Reconciled] = []
    here = [plan_id_from_path(path) for path in plan_files(repo)]
    # a plan whose file is only on the branch its sessions run on (started there with Run workflow) is ticked too,
    # its file read from that branch (runner.drivers.actions.env.plan_on_its_branch)
    for plan_id in [*here, *sorted(with_state - set(here))]:
        if plan_id not in with_state or plan_id in spaces:
            continue
        try:
            found = plan_workspace(repo, env, plan_id, store)
        except PlanRunnerError as err:
            found = None
            rep.log(f"plan-runner {name}: {plan_id}: its plan file could not be looked for ({err.what})")
        if found is None:
            continue  # no file anywhere: a plan deleted (its state stays for `plan-runner status`)
        ws = found
        went = False
        spaces[plan_id] = ws
        later.collect_into(calls.setdefault(plan_id, []))
        try:
            line, went = tick_plan(ws, ports, rep.log, ended, ask=driver.run_end,
                                   reconciled=reconciled, conclusions=conclusions)
        except StateConflict:
            line = "another job moved the plan first; nothing to do"
        except PlanRunnerError as err:
            failed += 1
            line = f"error: {err.what}"
            annotations.append(("error", f"{plan_id}: {err.what}", f"plan-runner {name}"))
        dispatched += went
        rows.append([plan_id, line])
    runs: dict[str, tuple[int, str, int]] = {}
    lost = store.flush()  # one push for every plan the tick wrote to; a plan another job moved meanwhile is left out
    from runner.drivers.actions.progress import end_orphan_progress

    for done in reconciled:  # the killed session's progress comment says it ended, and how; its verdict's check run
        if done.plan_id in lost:
            continue
        say = _logger(rep, f"plan-runner {name}: {done.plan_id}: ")
        if done.place is not None:
            end_orphan_progress(driver, done.plan_id, done.place.issue, done.n, done.how, say)
        publish_reconciled_check(driver, ctx, done, say)
    for row in rows:
        plan_id = row[0]
        if plan_id in lost:
            dispatched -= any(calls.get(plan_id, ()))
            row[1] = "another job moved the plan first; nothing to do"
            continue
        for plan_path, key, ref in calls.get(plan_id, ()):
            try:
                run_id = driver.dispatch_next(plan_path, key, ref=ref)
                if run_id is not None:
                    runs[plan_id] = (_session_of(key), key, run_id)
            except Refused as err:  # only a person can fix it: park once with the fix (voids the intent)
                dispatched -= 1
                try:
                    parked = park_refused_dispatch(load_session(spaces[plan_id], Ports(store=store, dispatcher=driver,
                                                                                  parker=driver)), err)
                    row[1] = f"parked: {parked.message}"
                except StateConflict:
                    row[1] = "another job moved the plan first; nothing to do"
                except PlanRunnerError as park_err:
                    failed += 1
                    row[1] = f"error: {park_err.what}"
                    annotations.append(("error", f"{plan_id}: {park_err.what}", "plan-runner tick"))
            except PlanRunnerError as err:
                failed += 1
                dispatched -= 1
                row[1] = f"error: {err.what}"
                annotations.append(("error", f"{plan_id}: {err.what}", "plan-runner tick"))
    waiting: dict[str, str] = {}
    if runs:  # the runs GitHub started, in the ledger (one more atomic push): a reconcile for one names its plan
        store.reuse_fetched(runs)
        store.defer_pushes()
        for plan_id, (n, key, run_id) in runs.items():
            record_dispatched_run(load_session(spaces[plan_id], ports), n, key, run_id)
        store.flush()
    store.reuse_fetched(spaces)  # no fetch more: the state as this tick left it
    for plan_id, ws in spaces.items():
        try:
            why = needs_clock(load_session(ws, ports))
        except PlanRunnerError:
            continue
        if why:
            waiting[plan_id] = why
    for plan_id, line in rows:
        rep.log(f"plan-runner {name}: {plan_id}: {line}")
    table = "\n".join(f"| `{pid}` | {line.replace('|', '/')} |" for pid, line in rows) or "| - | no plan has state yet |"
    summary = (f"# plan-runner {name}: {dispatched} run(s) dispatched\n\n| plan | state |\n|---|---|\n{table}\n")
    if ended:
        summary = summary.replace("\n\n", f"\n\nRun {', '.join(map(str, sorted(ended)))} ended without succeeding.\n\n", 1)
    own = name == "tick" and ctx.workflow_file == ctx.clock_workflow  # the clock's own tick
    single = name == "tick" and ctx.workflow_file == ctx.session_workflow  # the old single workflow
    if single:
        old = OLD_SINGLE_WORKFLOW.format(file=ctx.workflow_file)
        annotations.append(("warning", old, "plan-runner migrate the workflow"))
        summary += f"\n> **Migrate the workflow.** {old}.\n"
    elif not (own and waiting):  # a running clock is enabled: only the daily keep-alive below
        clock = set_clock(ctx, driver, rep, waiting, may_disable=own)
        summary += f"\n{clock}" if clock else ""
    if (single and with_state or own and waiting) and keepalive_due(utcnow()):
        kept = keep_alive(driver, rep)
        rep.log(f"plan-runner tick: workflow {ctx.workflow_file}: {kept}")
        summary += f"\nWorkflow `{ctx.workflow_file}`: {kept} (GitHub disables a public repository's scheduled workflow after 60 days without activity).\n"
    return ModeResult(outcome="dispatched" if dispatched else "idle", summary=summary, annotations=annotations,
                      exit_code=Exit.USER_ERROR if failed else Exit.OK)
