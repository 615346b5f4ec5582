"""An interrupted session is recorded as what it was (`Interrupted`), not as a TimedOut orphan.

When plan-runner itself is stopped mid-session (Ctrl-C in `run` or `session`, SIGTERM, or
its own failure after the start was recorded), the process that started the session records
it before exiting: the agent is stopped, its uncommitted work kept as a WIP commit, and the
next run starts the same session again. No blame, and no attempt, resume or backoff budget is
burned (runner/core/policy.py). A job killed outright (SIGKILL, a lost runner) cannot record
anything; the next run reconciles it as before.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

from runner.adapters.git import work as gitwork
from runner.core.actions import Blame, Outcome, RunSession
from runner.core.ledger import SessionRecord
from runner.core.outcome import INTERRUPTED_RULE
from runner.drivers.session import Drivers, Session, Workspace, agent_pid_file, spent_so_far


def record_interruption(ws: Workspace, drivers: Drivers, why: str) -> SessionRecord | None:
    """Record this job's open session as Interrupted; None when it has none (nothing was running)."""
    s = Session(ws, drivers)
    open_ = s.state.open_session
    if open_ is None or open_.job != ws.job:
        return None
    from runner.adapters.sandbox.supervise import reap_leftover

    reap_leftover(agent_pid_file(ws, s.trusted.id))  # the agent never outlives the session
    if gitwork.current_branch(ws.repo) == s.trusted.work_branch:
        gitwork.commit_leftovers(ws.repo)  # the interrupted agent's uncommitted work is kept, not counted
    stage = s.plan.stage_of(open_.checkpoint) if open_.checkpoint else None
    again = RunSession(kind=open_.kind, checkpoint=open_.checkpoint, resume_session_id=open_.resume_session_id,
                       reason="interrupted: run the same session again", instructions=s.state.instructions)
    spent = spent_so_far(ws, s.trusted.id, open_.started_at)
    record = SessionRecord(
        n=open_.n, kind=open_.kind, checkpoint=open_.checkpoint, stage=stage.number if stage else None,
        started_at=open_.started_at, finished_at=ws.clock(), outcome=Outcome.INTERRUPTED, blame=Blame.NONE,
        rule=INTERRUPTED_RULE, reasons=(f"{why}; no attempt or resume budget was used",), base_sha=open_.base_sha,
        tokens=spent.tokens if spent else 0, cost_usd=spent.cost_usd if spent else None,
        cost_lower_bound=spent is not None,
        resume_session_id=open_.resume_session_id, instructions=s.state.instructions, next_action=again)
    s.write([record])
    ws.on_event("outcome", f"Interrupted: {why}")
    return record


@contextmanager
def sigterm_as_interrupt():
    """Inside: SIGTERM raises KeyboardInterrupt like Ctrl-C, so both are recorded the same way."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def recorded_interruptions(ws: Workspace, drivers: Drivers):
    """Run sessions inside: a Ctrl-C, SIGTERM or an unexpected failure mid-session is recorded, then re-raised."""
    with sigterm_as_interrupt():
        try:
            yield
        except KeyboardInterrupt:
            _record_quietly(ws, drivers, "plan-runner was interrupted (Ctrl-C or SIGTERM) during the session")
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, then re-raised for the CLI's one error handler
            _record_quietly(ws, drivers, f"plan-runner stopped during the session: {type(exc).__name__}: {exc}")
            raise


def _record_quietly(ws: Workspace, drivers: Drivers, why: str) -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not lose the record
    try:
        record_interruption(ws, drivers, why)
    except Exception:  # noqa: BLE001 - the next run reconciles the open session instead
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
