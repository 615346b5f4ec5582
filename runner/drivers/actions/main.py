"""`plan-runner action`: the GitHub Actions job, in one of three modes (docs/github-actions.md, "The jobs").

* `session`: one session of the plan (`runner.drivers.session.phases.run_session`) with the GitHub driver.
* `tick` (schedule): wake plans whose wait is over, reconcile orphans; `runner.drivers.actions.tick`.
* `reply` (issue_comment): a maintainer's `/plan-runner ...` on a park issue; `runner.drivers.actions.reply`.
* `reconcile` (workflow_run completed, not a success): the killed or cancelled session's plan, now;
  `runner.drivers.actions.tick`.

Inputs come only from the environment (the composite action maps its inputs to
`env:`), never from the command line of a `run:` script. Every mode ends the same
way: step outputs, a job summary, annotations; secrets masked before anything prints.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from runner.adapters.git import work as gitwork
from runner.adapters.action_io import PUSH_TOKEN, Reporter, git_credentials, parse_bool
from runner.core.actions import ConsultAdvisor, Finish, Park, RunSession, Wait, describe
from runner.core.errors import PlanRunnerError, StateConflict
from runner.core.exits import Exit
from runner.adapters.github.events import GitHubContext
from runner.core.ledger import SessionRecord
from runner.core.policy import decide_start
from runner.adapters.render.report import fence, render_summary
from runner.drivers.actions.env import REMOTE, ModeResult, github_workspace, plan_input
from runner.core.planfile import plan_id_from_path
from runner.drivers.session import Ports, Session, SessionResult, Workspace, judge_tree, load_session
from runner.adapters.store.state import GitStateStore

if TYPE_CHECKING:
    from runner.drivers.actions.progress import LiveProgress
    from runner.drivers.actions.push_auth import PushAuth

MODES = ("session", "tick", "reply", "reconcile")


def open_driver(ctx: GitHubContext, env: Mapping[str, str]):
    from runner.adapters.github.client import GitHubDriver  # PyGithub is loaded only when a mode needs the API

    token = env.get("GITHUB_TOKEN", "")
    if not token:
        raise PlanRunnerError(
            what="GITHUB_TOKEN is empty",
            why="plan-runner dispatches runs, opens issues and pull requests through the GitHub API",
            fix="pass `github-token: ${{ github.token }}` (the default) and grant the job the permissions "
                "listed in docs/github-actions.md")
    # The pull request is opened with the push-token when one is given, so that its CI runs (GitHubDriver); a
    # token minted from the GitHub App is asked for at each call (a new one once it nears its hour).
    from runner.adapters.git.invoke import current_remote_auth
    from runner.drivers.actions.push_auth import PushAuth

    auth = current_remote_auth()
    if isinstance(auth, PushAuth) and auth.app is not None:
        return GitHubDriver(ctx, token, pull_token=auth.pull_token)
    return GitHubDriver(ctx, token, pull_token=env.get(PUSH_TOKEN) or None)


def head_checks_runner(driver, repo: Path, env: Mapping[str, str] | None = None) -> Callable:
    """A `checks:` gate runner asking GitHub about the commit the gates see (the HEAD of `repo`: plan-runner's
    own work tree of the plan, runner.drivers.session.judge_tree).
    Without a `push-token` the work branch is pushed with GITHUB_TOKEN, which starts no workflow: the
    gate then stops waiting when nothing reports on the commit (NeedsHuman with the fix, blaming nobody)."""
    job_token = not (env or {}).get(PUSH_TOKEN)
    return lambda gate: driver.checks_gate(gate, gitwork.ref_sha(repo, "HEAD") or "HEAD",
                                           pushed_with_job_token=job_token)


# --- session ----------------------------------------------------------------------------------


def mode_session(ctx: GitHubContext, env: Mapping[str, str], driver, rep: Reporter) -> ModeResult:
    ws = github_workspace(env, plan_input(env, ctx))
    ws.on_event = lambda kind, detail: rep.log(f"plan-runner {kind}: {detail}")
    ports = Ports(store=GitStateStore(ws.repo, remote=REMOTE), dispatcher=driver, parker=driver,
                  checks_runner=head_checks_runner(driver, judge_tree(ws, plan_id_from_path(ws.plan_path)), env))
    from runner.drivers.actions.watch import attach, rows_of, update_watch

    if parse_bool(env.get("PLAN_RUNNER_DRY_RUN")):
        s = load_session(ws, ports)
        action = decide_start(s.state, s.plan)
        return ModeResult(outcome="dry-run", next_action=describe(action),
                          summary=render_summary(s.plan, f"Dry run: nothing was changed.\n\nNext: {describe(action)}",
                                                 f"{s.plan.id}: dry run", s.state.skipped, rows_of(s, ctx)))
    from runner.drivers.actions.setup_cache import take_restored

    try:  # the plan's set-up from the Actions cache, if the setup record vouches for it (before anything runs)
        take_restored(env, lambda text: rep.log(f"plan-runner setup cache: {text}"),
                      lambda text: rep.annotate("warning", text, "plan-runner setup cache"))
    except Exception as err:  # noqa: BLE001 - a cache is never worth a session: the set-up then runs as without it
        rep.log(f"plan-runner setup cache: not used ({getattr(err, 'what', err)})")
    from runner.drivers.actions.install import ensure_agent_cli, ensure_python_packages
    from runner.adapters.github.permissions import check_job_permissions
    from runner.drivers.session.preflight import before_first_session
    from runner.drivers.session.phases import run_session

    s = load_session(ws, ports)
    attach(driver, ctx, s, REMOTE)  # which run of the plan this is: a reset's earlier pull request is closed
    # The job's token must be able to do what the session leads to (push, park, dispatch, open the pull request):
    # checked from the workflow's `permissions:` before anything is installed or recorded.
    check_job_permissions(env, "session", s.trusted, warn=lambda text: rep.log(f"plan-runner preflight: {text}"))
    if isinstance(decide_start(s.state, s.plan), (RunSession, Wait)):  # a session may run: it needs its CLI
        ensure_agent_cli(s.trusted, ws.env, rep.log)  # before anything of the session is recorded
    ensure_python_packages(s.trusted, ws.env, rep.log)  # the SDK for the built-in backend or advisor, if left out
    # a setup mistake (no agent CLI, no key, a gate command that does not exist) fails the job
    # with what/why/fix before any session is recorded
    before_first_session(ws, ports, warn=lambda text: rep.log(f"plan-runner preflight {text}"), session=s)
    version = s.version
    from runner.drivers.actions.tick import needs_clock, plan_clock, set_clock

    # The clock runs while a session does, so that a job that dies (cancelled, timed out, its runner lost) is
    # reconciled with no person and no `workflow_run` (none comes for a run the job's token dispatched): on already
    # when whoever dispatched this run left the plan needing it, else enabled here, before the session starts.
    clock_on = needs_clock(s) is not None
    clock_line = ""
    if not clock_on and isinstance(decide_start(s.state, s.plan), (RunSession, ConsultAdvisor)):
        clock_line = set_clock(ctx, driver, rep, {s.trusted.id: f"session {s.state.sessions + 1} starting"},
                               may_disable=False)
        clock_on = ": enabled" in clock_line
    with ExitStack() as progress_stack:
        progress = watch_progress(ctx, env, driver, rep, s, progress_stack)
        try:
            result = run_session(ws, ports, session=s)  # the state as read above: no second fetch
        except Exception as exc:
            if progress is not None:
                progress.end("error", "plan-runner failed in the job: its summary says why")
            from runner.adapters.git.branches import PushRefused

            if isinstance(exc, PushRefused):  # every token refused: the agent's commits kept as an artifact
                from runner.drivers.actions.unpushed import keep_unpushed

                raise keep_unpushed(exc, ws.repo, env, s.trusted.id, s.trusted.work_branch,
                                    s.state.sessions + 1) from None
            raise
        rows = rows_of(s, ctx)
        mr = session_mode_result(result, rows)
        if progress is not None:  # how the session ended: the outcome from the verdict
            progress.end(mr.outcome, mr.next_action)
    notes: list[str] = []
    # a job that recorded nothing (a finished or parked plan dispatched again) leaves the watch view as it is
    watch_url = update_watch(driver, ctx, s, result, rows, warn=notes.append) if s.version != version else None
    if watch_url:
        rep.log(f"plan-runner watch: {watch_url}")
        mr.summary += f"\nWatch the plan in its pull request: {watch_url}\n"
    for note in notes:
        rep.log(f"plan-runner watch: {note}")
        mr.annotations.append(("warning", note.splitlines()[0], "plan-runner watch"))
        mr.summary += f"\n> **The plan's pull request was not updated.**\n\n{fence(note)}\n"
    from runner.drivers.actions.verdict import publish_verdict

    verdict_line = publish_verdict(driver, ctx, s, result, s.version != version,
                                   warn=lambda text: mr.annotations.append(("warning", text, "plan-runner check run")))
    if verdict_line:
        rep.log(f"plan-runner check run: {verdict_line.strip()}")
        mr.summary += f"\n{verdict_line}"
    # a wait, a dispatched session or an unconfirmed dispatch needs the clock
    clock = clock_line + plan_clock(ctx, driver, rep, load_session(ws, ports), already_on=clock_on)
    mr.summary += f"\n{clock}" if clock else ""
    for key, run_id, url in driver.dispatched_runs:  # the run GitHub started for the dispatch
        rep.log(f"plan-runner dispatch: {key} started run {run_id} {url}".rstrip())
        mr.summary += f"\nDispatched {key}: run [{run_id}]({url}).\n" if url else f"\nDispatched {key}: run {run_id}.\n"
    if mr.pull_request_url and not env.get(PUSH_TOKEN):
        mr.annotations.append(("warning", NO_CI_ON_PULL_REQUEST, "plan-runner: no CI on the pull request"))
        mr.summary += f"\n> **No CI on this pull request yet.** {NO_CI_ON_PULL_REQUEST}\n"
    return mr


def watch_progress(ctx: GitHubContext, env: Mapping[str, str], driver, rep: Reporter, s: Session,
                   stack: ExitStack) -> LiveProgress | None:
    """The session's progress comment (runner.drivers.actions.progress), when a session is about to run on GitHub:
    its events reach it beside the job's log. Its own GitHub client (one connection is one thread's), closed with
    `stack`. None when no session runs, or GitHub refused it (logged once: the session runs as without it)."""
    from runner.adapters.github.client import GitHubDriver
    from runner.drivers.actions import progress as live

    if not isinstance(decide_start(s.state, s.plan), (RunSession, ConsultAdvisor)) or not isinstance(driver, GitHubDriver):
        return None

    def say(text: str) -> None:
        rep.log(f"plan-runner progress: {text}")

    try:
        own = stack.enter_context(open_driver(ctx, env))
    except PlanRunnerError as err:
        say(f"no progress comment for this session: {err.what}")
        return None
    progress = live.start_progress(own, ctx, s, say, clock=live.CLOCK)
    if progress is None:
        return None
    logged = s.ws.on_event

    def on_event(kind: str, detail: str) -> None:
        if kind != "tool_input":  # shown in the progress comment only: the log has the tool's name
            logged(kind, detail)
        progress.on_event(kind, detail)

    s.ws.on_event = on_event
    return progress


NO_CI_ON_PULL_REQUEST = (
    "The pull request was opened with the job's GITHUB_TOKEN, and GitHub starts no `pull_request` workflow for "
    "what that token does: required checks wait until someone pushes to the branch. Give the action a `push-token` "
    "(a GitHub App installation token, or a fine-grained personal access token with Contents and Pull requests: "
    "read and write): plan-runner then pushes and opens the pull request with it, and CI runs.")


def session_mode_result(result: SessionResult, rows: list[dict] | None = None) -> ModeResult:
    record: SessionRecord | None = result.record
    action = result.action
    outcome = record.outcome.value if record else result.status
    headline = (f"{result.plan.id} session {record.n}: {outcome}" if record
                else f"{result.plan.id}: {result.message}")
    mr = ModeResult(outcome=outcome, next_action=describe(action) if action is not None else "",
                    record=record.model_dump_json() if record else "",
                    record_name=f"plan-runner-{result.plan.id}-session-{record.n}" if record else "")
    if result.status == "parked" or isinstance(action, Park):
        mr.issue_url = result.url or result.state.park_issue or ""
        mr.annotations.append(("warning", f"{result.plan.id} parked: {getattr(action, 'reason', result.message)}"
                               + (f" ({mr.issue_url})" if mr.issue_url else ""), "plan-runner parked"))
    if result.status == "finished" or isinstance(action, Finish):
        mr.pull_request_url = result.url or result.state.pull_request or ""
        mr.annotations.append(("notice", f"{result.plan.id} finished: {mr.pull_request_url}", "plan-runner finished"))
    if isinstance(action, Wait):
        mr.annotations.append(("notice", describe(action), "plan-runner waiting"))
    for gate in result.evidence.gates if result.evidence else ():
        if gate.required and not gate.passed:
            detail = f"exit {gate.exit_code}" if gate.exit_code is not None else (gate.error or "red")
            mr.annotations.append(("error", f"required gate {gate.name} is red ({detail})", f"gate {gate.name}"))
    for claim in record.rejected_flips if record else ():
        mr.annotations.append(("warning", f"rejected claim: {claim}", "plan-runner"))
    body = result.report or result.message
    mr.summary = render_summary(result.plan, body, headline, result.state.skipped, rows)
    return mr


# --- the one entry point ----------------------------------------------------------------------


def _modes() -> dict[str, Callable[..., ModeResult]]:
    from runner.drivers.actions.reply import mode_reply
    from runner.drivers.actions.tick import mode_reconcile, mode_tick

    return {"session": mode_session, "tick": mode_tick, "reply": mode_reply, "reconcile": mode_reconcile}


def parse_mode(raw: str | None) -> str:
    mode = (raw or "session").strip().lower()
    if mode not in MODES:
        raise PlanRunnerError(what=f"unknown mode {raw!r}", why="the action runs one of: " + ", ".join(MODES),
                              fix="set `mode: session` (workflow_dispatch), `mode: tick` (schedule), "
                                  "`mode: reply` (issue_comment) or `mode: reconcile` (workflow_run)")
    return mode


def error_summary(err: PlanRunnerError) -> str:
    return f"# plan-runner: {err.what}\n\n```text\n{err.render()}\n```\n"


class Cancelled(BaseException):
    """The runner's stop signal (a cancelled or timed-out job): SIGINT first, SIGTERM a few seconds later."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def ignore_stop_signals() -> None:
    """One cancellation: the runner's SIGTERM 7.5 s after its SIGINT must not cut the salvage short."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def _raise_cancelled(signum: int, frame: object) -> None:
    ignore_stop_signals()
    raise Cancelled(signum)


@contextmanager
def stop_signals_cancel() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Cancelled` while the mode runs (main thread only: Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, _raise_cancelled) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def salvage_open_session(env: Mapping[str, str]) -> str:
    """After a stop signal, push what must survive first: the agent's work so far (leftovers committed) to
    the open session's ref; then the session's `started` entry if it was written locally only (a dispatched
    session does not push it before its agent runs). The next tick reconciles the session (TimedOut) and names
    the ref. Best effort and quick: the runner kills the job a few seconds later."""
    from runner.adapters.store.state import GitStateStore
    from runner.drivers.session.cut_short import keep_on_remote, reap_and_salvage

    try:
        ctx = GitHubContext.from_env(env)
        ws = github_workspace(env, plan_input(env, ctx))
        # The local state, as this job wrote it (no fetch: the remote may not hold the start yet).
        reading = Ports(store=GitStateStore(ws.repo, remote=None),
                        dispatcher=None, parker=None)  # type: ignore[arg-type]  # never dispatches or parks
        s = load_session(ws, reading)
        open_ = s.state.open_session
        if open_ is None:
            return "no session was running: nothing to push"
        kept = _push_start_after(ws, s.trusted.id)
        # The one path of a session cut short (runner.drivers.session.cut_short): reap, salvage the agent's
        # clone (a git running as the agent saves its leftovers and bundles its commits, never through its
        # hooks or config), keep its work on the remote. The record is the next tick's (TimedOut).
        reap_and_salvage(s, open_, grace_s=1.0)
        ref = keep_on_remote(s, open_, REMOTE)
        if ref is None:
            return (f"the agent of session {open_.n} had saved nothing yet{kept()}; the next tick reconciles "
                    "the session")
        return f"the agent's work of session {open_.n} is kept at {ref}{kept()}; the next tick reconciles the session"
    except Exception as exc:  # noqa: BLE001 - the summary and outputs still have to be written
        return f"could not push the session's work: {type(exc).__name__}: {exc}"


def _push_start_after(ws: Workspace, plan_id: str) -> Callable[[], str]:
    """Push the plan's local state (its `started` entry) once called: after the agent's commits, which go first."""
    def push() -> str:
        try:
            store = GitStateStore(ws.repo, remote=REMOTE)
            return "; its start is recorded on the remote" if store.push_pending(plan_id) else ""
        except Exception as exc:  # noqa: BLE001 - best effort: the dispatch intent still lets the tick find it
            return f"; its start could not be pushed ({type(exc).__name__})"
    return push


def run_action(env: Mapping[str, str], mode: str | None = None, out: TextIO | None = None,
               driver_factory: Callable[[GitHubContext, Mapping[str, str]], AbstractContextManager] = open_driver,
               cancelled: bool = False) -> int:
    """Run one mode as a job step; returns the step's exit code. Never raises. `cancelled`: the action's
    `if: cancelled()` backstop, after a stop whose salvage the session step did not finish."""
    env = dict(env)
    rep = Reporter(env, out or sys.stdout)
    rep.mask()
    with debug_logging(rep):
        return _run_action(env, mode, rep, driver_factory, cancelled)


@contextmanager
def debug_logging(rep: Reporter) -> Iterator[None]:
    """With the runner's debug logging on (RUNNER_DEBUG=1: the repository's ACTIONS_STEP_DEBUG), plan-runner's and
    PyGithub's log records (every API request, plan-runner's own details) as `::debug::` lines, secrets redacted."""
    if not rep.debugging:
        yield
        return
    import logging

    class ToRunner(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                rep.debug(f"{record.name}: {record.getMessage()}")
            except Exception:  # noqa: BLE001 - a debug line is never worth the job
                pass

    handler = ToRunner(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in ("runner", "github")]
    saved = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    rep.debug(f"plan-runner {env_summary(rep.env)}")
    try:
        yield
    finally:
        for lg, level in saved:
            lg.removeHandler(handler)
            lg.setLevel(level)


def env_summary(env: Mapping[str, str]) -> str:
    """What the job runs on, for a debug line (names and refs only, never a value that could be secret)."""
    keys = ("PLAN_RUNNER_MODE", "PLAN_RUNNER_PLAN", "GITHUB_EVENT_NAME", "GITHUB_REF_NAME", "GITHUB_WORKFLOW_REF",
            "GITHUB_RUN_ID", "GITHUB_API_URL")
    return "; ".join(f"{k}={env.get(k, '')}" for k in keys)


def _run_action(env: dict[str, str], mode: str | None, rep: Reporter,
                driver_factory: Callable[[GitHubContext, Mapping[str, str]], AbstractContextManager],
                cancelled: bool) -> int:
    if cancelled:
        publish(rep, cancelled_result(env, mode, rep, "the job was cancelled", Exit.UNEXPECTED, backstop=True))
        return 0  # the job is cancelled either way; a failing backstop would only add noise
    auths: list[PushAuth] = []  # the mode's push credentials, kept for a salvage after a stop
    try:
        with stop_signals_cancel():
            result = _run_mode(env, mode, rep, driver_factory, auths)
    except Cancelled as stop:
        ignore_stop_signals()  # the `with` above restored the default handlers: a SIGTERM would end the salvage
        result = cancelled_result(env, mode, rep, str(stop), 128 + stop.signum, auth=auths[0] if auths else None)
    publish(rep, result)
    return result.exit_code


def salvage_auth(env: dict[str, str], rep: Reporter) -> PushAuth:
    """The push credentials of the `if: cancelled()` step: as the session's step has them (an App's token minted
    here, `runner.drivers.actions.push_auth.push_auth`), else, when the App's inputs are wrong or GitHub mints none,
    the `push-token` or the job's token, with a note saying so. Never raises: the work must still be pushed."""
    from runner.drivers.actions.push_auth import PushAuth, push_auth, without_key

    try:
        return push_auth(env, rep.add_secret)
    except PlanRunnerError as err:
        auth = PushAuth(env, on_secret=rep.add_secret)
        auth.notes.append((
            "the GitHub App's token could not be minted for the salvage: plan-runner pushed with the "
            + ("`push-token`" if env.get(PUSH_TOKEN) else "job's GITHUB_TOKEN") + " instead",
            f"{err.what} ({err.why})", err.fix))
        return auth
    finally:
        without_key()  # nothing the salvage starts inherits the App's key


def cancelled_result(env: dict[str, str], mode: str | None, rep: Reporter, why: str, exit_code: int,
                     backstop: bool = False, auth: PushAuth | None = None) -> ModeResult:
    """After a stop: the outputs say `cancelled` at once (the runner SIGKILLs the step 10 s after its SIGINT), then
    what must survive is pushed (runner.drivers.actions.main.salvage_open_session), then `salvage: done` tells the
    action's `if: cancelled()` step that nothing is left for it to do. The pushes use the token the main path uses
    (`auth`: the session step's own; the backstop mints one from the App when it has the inputs), re-minted once
    and then replaced by the job's token when the remote refuses it, as in the main path."""
    from runner.adapters.git.invoke import remote_auth
    from runner.drivers.actions.push_auth import with_notes

    started = time.monotonic()
    rep.set_output("outcome", "cancelled")
    rep.write_outputs()  # provisional: a later entry of the same name replaces it
    rep.outputs.clear()
    chosen = (mode or env.get("PLAN_RUNNER_MODE") or "session").strip().lower()
    if chosen != "session":
        kept = "nothing to push"
    else:
        auth = auth or salvage_auth(env, rep)
        with git_credentials(auth.current(), env.get("GITHUB_SERVER_URL", "https://github.com")), remote_auth(auth):
            kept = salvage_open_session(env)
    spent = time.monotonic() - started
    rep.log(f"plan-runner: salvaged in {spent:.1f} s: {kept}")
    rep.set_output("salvage", "done")
    who = "the job's `if: cancelled()` step" if backstop else "plan-runner"
    return with_notes(ModeResult(
        outcome="cancelled", exit_code=exit_code,
        summary=f"# plan-runner: the job was cancelled ({why})\n\n{kept} ({who}, {spent:.1f} s).\n",
        annotations=[("warning", f"cancelled ({why}): {kept}", "plan-runner")]), auth)


def _run_mode(env: dict[str, str], mode: str | None, rep: Reporter,
              driver_factory: Callable[[GitHubContext, Mapping[str, str]], AbstractContextManager],
              auths: list[PushAuth] | None = None) -> ModeResult:
    from runner.adapters.git.invoke import remote_auth
    from runner.drivers.actions.push_auth import push_auth, with_notes, without_key

    auth = None
    try:
        chosen = parse_mode(mode or env.get("PLAN_RUNNER_MODE"))
        ctx = GitHubContext.from_env(env)
        if chosen != "session":  # a session checks once its plan is read (a `checks:` gate needs more)
            from runner.adapters.github.permissions import check_job_permissions

            check_job_permissions(env, chosen, warn=lambda text: rep.log(f"plan-runner preflight: {text}"))
        without_key()  # nothing this process starts inherits the App's key
        auth = push_auth(env, rep.add_secret)  # an App's token minted now (`env` then holds it as the push token)
        if auths is not None:
            auths.append(auth)
        with git_credentials(auth.current(), ctx.server_url), remote_auth(auth), driver_factory(ctx, env) as driver:
            return with_notes(_modes()[chosen](ctx, env, driver, rep), auth)
    except StateConflict as err:  # another job won the compare-and-swap: nothing is wrong
        result = ModeResult(outcome="superseded", summary=error_summary(err),
                            annotations=[("notice", err.what, "plan-runner")], exit_code=err.exit_code)
    except PlanRunnerError as err:
        from runner.adapters.git.branches import PushRefused
        from runner.drivers.actions.unpushed import RefusedKept

        result = with_notes(ModeResult(outcome="error", summary=error_summary(err), detail=err.render(),
                                       annotations=[("error", err.what, "plan-runner")], exit_code=err.exit_code), auth,
                            refused_too=isinstance(err, PushRefused))

        if isinstance(err, RefusedKept):  # for the action's upload step
            result.unpushed_file, result.unpushed_name = err.unpushed.file, err.unpushed.artifact
            result.annotations.append(("error", f"the agent's commits are kept in the artifact "
                                                f"{err.unpushed.artifact}: the summary says how to push them",
                                       "plan-runner: unpushed commits"))
    except Exception as exc:  # noqa: BLE001 - the job must still leave a summary and fail visibly
        from runner.drivers.session import space

        if space.exhausted(exc):  # a full disk is the runner's state, not a bug: say what is full
            import tempfile

            full = space.out_of_space([Path.cwd(), Path(tempfile.gettempdir())], when="in the job",
                                      outcome="The session this job ran, if any, is recorded by the next job "
                                              "(it salvages the agent's work).")
            return ModeResult(outcome="error", summary=error_summary(full),
                              annotations=[("error", full.what, "plan-runner")], exit_code=full.exit_code)
        trace = traceback.format_exc()
        result = ModeResult(outcome="error", exit_code=Exit.UNEXPECTED,
                            summary=f"# plan-runner: unexpected error\n\n`{type(exc).__name__}: {exc}`\n\n"
                                    f"Please report this with the trace below.\n\n```text\n{trace}\n```\n",
                            annotations=[("error", f"unexpected error: {type(exc).__name__}: {exc}", "plan-runner")])
    return result


def keep_record(env: Mapping[str, str], result: ModeResult) -> str:
    """The session's ledger entry as a file for the action's upload step (an artifact named `record_name`): its
    path, or "" when the job recorded no session or the runner gave no RUNNER_TEMP. Never fails the job."""
    temp = env.get("RUNNER_TEMP", "")
    if not (result.record and result.record_name and temp):
        return ""
    try:
        folder = Path(temp) / "plan-runner-record"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{result.record_name}.json"
        path.write_text(result.record + "\n", encoding="utf-8")
        return str(path)
    except OSError:
        return ""


def publish(rep: Reporter, result: ModeResult) -> None:
    for level, message, title in result.annotations:
        rep.annotate(level, message, title)
    if result.detail:  # the why and the fix in the log too, where a reader of the job looks first
        rep.log(result.detail)
    rep.set_output("outcome", result.outcome)
    rep.set_output("next-action", result.next_action)
    rep.set_output("issue-url", result.issue_url)
    rep.set_output("pull-request-url", result.pull_request_url)
    rep.set_output("record", result.record)
    record_file = keep_record(rep.env, result)
    rep.set_output("record-file", record_file)
    rep.set_output("record-artifact", result.record_name if record_file else "")
    rep.set_output("unpushed-file", result.unpushed_file)
    rep.set_output("unpushed-artifact", result.unpushed_name)
    rep.log(f"plan-runner: {result.outcome}" + (f"; next: {result.next_action}" if result.next_action else ""))
    rep.write_outputs()
    if result.summary:
        rep.write_summary(result.summary)
