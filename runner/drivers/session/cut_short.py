"""A session cut short, one path whatever cut it: reap, salvage, keep, record.

Ctrl-C or SIGTERM in `run`/`session` (or plan-runner's own failure after the start was recorded), a job
killed outright and found later by the next run or tick, a cancelled Actions job: each goes through

1. **reap**: the agent's process group, if it outlived its plan-runner, is stopped before anything is read;
2. **salvage**: what the agent left in its own clone (its commits, and its uncommitted changes as a marked WIP
   commit, made by a git running as the agent) comes onto the judge's work branch (`salvage`);
3. **keep**: where there is a remote, the work branch goes with the record (one atomic push), or, when no
   record can be written now (a cancelled job, killed seconds later), to the session's own ref (`keep_on_remote`);
4. **record**: `Interrupted` when the process that started the session is the one stopping it (no blame, no
   budget: runner/core/policy.py), `TimedOut` when it died without a word and is found later (`reconcile_orphan`).
"""

from __future__ import annotations

import os
import signal
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runner.adapters.git import work as gitwork
from runner.adapters.judge.base import BaseTree
from runner.adapters.sandbox import agent_clone as agentarea
from runner.adapters.sandbox import identity as sandbox
from runner.core.actions import Blame, Outcome, RunSession, Verdict, describe
from runner.core.errors import PlanRunnerError
from runner.core.ledger import SessionRecord, SessionStarted
from runner.core.bounds import bound_text
from runner.core.outcome import CRASH_REPORT_URL, INTERRUPTED_RULE, TIMED_OUT_RULE
from runner.core.policy import decide, fold
from runner.core.session_record import session_record
from runner.drivers.session.context import (
    Ports, Session, Workspace, agent_pid_file, isolation_of, judge_tree, load_session, spent_so_far,
)


def session_ref(plan_id: str, n: int) -> str:
    """Where a session's commits are kept on the remote when its record could not be pushed with them."""
    return f"refs/plan-runner/sessions/{plan_id}/{n}"


@dataclass(frozen=True)
class Salvaged:
    """What reaping and salvaging a cut-short session did."""

    stopped: int | None  # the process group of an agent still running, stopped first
    head: str | None  # the work branch's head after the salvage, when it moved
    words: str  # what was done, for the record ("" when there was nothing to save)


def reap_and_salvage(s: Session, open_: SessionStarted, *, grace_s: float = 2.0) -> Salvaged:
    """Steps 1 and 2: stop a leftover agent, then bring its work from its clone onto the work branch."""
    from runner.adapters.sandbox.supervise import reap_leftover

    stopped = reap_leftover(agent_pid_file(s.ws, s.trusted.id), grace_s=grace_s)
    head, words = salvage(s, open_.base_sha)
    return Salvaged(stopped=stopped, head=head, words=words)


def salvage(s: Session, base_sha: str | None) -> tuple[str | None, str]:
    """Import what the agent of a cut-short session left in its area (its commits and, as a WIP commit, its
    uncommitted changes) onto the work branch: (the new head or None, what was done in words). Only while the
    work branch is still at the session's base: once the session imported the agent's work, it is there."""
    ws, plan = s.ws, s.trusted
    area = agentarea.area_for(ws.repo, plan.id)
    branch = plan.work_branch
    if base_sha is None or not agentarea.has_tree(area) or gitwork.ref_sha(ws.repo, f"refs/heads/{branch}") != base_sha:
        return None, ""
    try:
        with sandbox.leased(isolation_of(ws, plan), actions=ws.actions, repo=ws.repo) as identity, \
                BaseTree(area, Path(ws.repo)).held() as base:
            base.at(base_sha)  # the agent's tree lies on the base it started from (its upper holds what it changed)
            imported = agentarea.export_work(area, identity, ws.repo, branch, base_sha, plan.id,
                                             ws.scratch_dir / plan.id)
    except PlanRunnerError as exc:
        return None, f"its agent's work could not be saved: {exc.what}"
    if imported.problem:
        return None, f"its agent's work could not be saved: {imported.problem}"
    head = imported.head
    if head and head != base_sha and gitwork.is_ancestor(ws.repo, base_sha, head):
        gitwork.fast_forward(ws.repo, branch, head, own=judge_tree(ws, plan.id))
        return head, f"its agent's work up to {head[:12]} was saved on {branch}"
    return None, ""


def _with_work(s: Session, saved: Salvaged) -> list[tuple[str | None, str, str | None]]:
    """Step 3 with a record: the salvaged work branch pushed atomically with it, forward only."""
    ws, branch = s.ws, s.trusted.work_branch
    if not ws.remote or saved.head is None:
        return []
    expected = gitwork.ref_sha(ws.repo, f"refs/remotes/{ws.remote}/{branch}")
    if expected and not gitwork.is_ancestor(ws.repo, expected, saved.head):
        return []  # the remote moved on meanwhile: the commits stay local, the next session's push settles it
    return [(saved.head, f"refs/heads/{branch}", expected)]


def _write_with_work(s: Session, entries: list, saved: Salvaged) -> None:
    """The record, with the salvaged work branch in the same atomic push; the remote's copy as now seen."""
    work = _with_work(s, saved)
    s.write(entries, also_push=work)
    if work and saved.head is not None:  # (work: there is a head) the next session leases its push on the remote's
        gitwork.run_git(s.ws.repo, "update-ref", f"refs/remotes/{s.ws.remote}/{s.trusted.work_branch}", saved.head)


def keep_on_remote(s: Session, open_: SessionStarted, remote: str) -> str | None:
    """Step 3 without a record: the work branch's head, when the session moved it, pushed to the session's
    own ref (the next tick's reconciliation names it). Returns the ref, None when there was nothing to keep."""
    head = gitwork.ref_sha(s.ws.repo, f"refs/heads/{s.trusted.work_branch}")
    if head is None or head == open_.base_sha:
        return None
    ref = session_ref(s.trusted.id, open_.n)
    gitwork.push_ref(s.ws.repo, remote, head, ref, None, what="the session's commits")
    return ref


# --- the two records -------------------------------------------------------------------------------------


def record_interruption(ws: Workspace, ports: Ports, why: str, *, only_if_saved: bool = False,
                        outcome: Outcome = Outcome.INTERRUPTED) -> SessionRecord | None:
    """This job's own open session, stopped by it: Interrupted; None when it has none (nothing was running).
    `only_if_saved`: when the agent's work could not be saved (a full disk), write no record either: the session
    stays open, and the next run, once space is back, salvages the agent's clone and records it."""
    s = load_session(ws, ports)
    open_ = s.state.open_session
    if open_ is None or open_.job != ws.job:
        return None
    saved = reap_and_salvage(s, open_)
    if only_if_saved and saved.words.startswith("its agent's work could not be saved"):
        return None
    again = RunSession(kind=open_.kind, checkpoint=open_.checkpoint, resume_session_id=open_.resume_session_id,
                       reason=f"{outcome.value.lower()}: run the same session again",
                       instructions=s.state.instructions)
    verdict = Verdict(outcome=outcome, blame=Blame.NONE, rule=INTERRUPTED_RULE, observed_at=ws.clock(),
                      reasons=(f"{why}; no attempt or resume budget was used"
                               + (f"; {saved.words}" if saved.words else ""),))
    record = session_record(open_, verdict, s.plan, head_sha=saved.head or "", **_spent(ws, s.trusted.id, open_),
                            instructions=s.state.instructions, next_action=again)
    _write_with_work(s, [record], saved)
    ws.on_event("outcome", f"{outcome.value}: {why}")
    return record


def _pid_alive(job: str) -> bool:
    parts = job.split(":")
    if len(parts) != 3 or parts[0] != "local" or parts[1] != socket.gethostname():
        return False
    try:
        os.kill(int(parts[2]), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return int(parts[2]) != os.getpid()


def reconcile_orphan(s: Session, started: SessionStarted | None = None) -> bool:
    """A session that started and never finished is classified TimedOut, not forgotten.
    Returns False when it may still be running (a live local process). `started`: a dispatched session
    the remote knows only by its dispatch intent (the tick passes the start it would have recorded)."""
    open_ = started or s.state.open_session
    if open_ is None:
        return True
    if started is None and _pid_alive(open_.job):
        return False
    saved = reap_and_salvage(s, open_)  # the killed agent's work, committed or not, is kept
    if saved.stopped is not None:  # its plan-runner was killed outright; it must not write while we save its work
        s.ws.on_event("reconciled", f"stopped the agent of session {open_.n} (process group {saved.stopped}), "
                                    "still running after its plan-runner was killed")
    now = s.ws.clock()
    what = (f"session {open_.n} was dispatched at {open_.started_at.isoformat(timespec='seconds')} ({open_.job}) "
            "and left no record: its job was killed or lost before its final push, or never started"
            if started is not None else
            f"session {open_.n} started at {open_.started_at.isoformat(timespec='seconds')} "
            f"by job {open_.job or '?'} and never finished (the job was killed or lost)")
    verdict = Verdict(outcome=Outcome.TIMED_OUT, blame=Blame.NONE, rule=TIMED_OUT_RULE, observed_at=now,
                      reasons=(what
                               + (f"; its agent was still running (process group {saved.stopped}) and was stopped "
                                  "before its work was saved" if saved.stopped is not None else "")
                               + (f"; {saved.words}" if saved.words else "")
                               + (f"; if it got past the agent's exit, the agent's commits are kept on {s.ws.remote} at "
                                  f"{session_ref(s.trusted.id, open_.n)}" if s.ws.remote else ""),),
                      agent_session_id=open_.resume_session_id)
    # the record names no agent session: the dead job's agent never reported one (the verdict's, the session it
    # resumed, is for the policy's choice only)
    record = session_record(open_, verdict, s.plan, agent_session_id=None, reconciled=True,
                            **_spent(s.ws, s.trusted.id, open_))
    first = [started] if started is not None else []
    decision = decide(verdict, fold([*first, record], s.state), s.plan)
    action = decision.action
    _write_with_work(s, [*first, record.model_copy(update={"next_action": action, "decided_by": decision.rule})], saved)
    s.ws.on_event("reconciled", f"session {open_.n}: TimedOut ({describe(action)})")
    return True


def _spent(ws, plan_id: str, open_) -> dict:
    """A session cut short (interrupted, or a killed job's): the meter reading its backend left, when it ran on this
    machine, as the record's fields (a lower bound); nothing when it left none."""
    spent = spent_so_far(ws, plan_id, open_.started_at)
    return {} if spent is None else {"tokens": spent.tokens, "cost_usd": spent.cost_usd, "cost_lower_bound": True}


# --- the signals ----------------------------------------------------------------------------------------


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


def space_places(ws: Workspace) -> list:
    """The folders of plan-runner's own on every file system it writes: its scratch folder and its sandbox root."""
    return [ws.scratch_dir, sandbox.judge_dir("reserve")]


@contextmanager
def recorded_interruptions(ws: Workspace, ports: Ports):
    """Run sessions inside: a Ctrl-C, SIGTERM or an unexpected failure mid-session is recorded, then re-raised.
    A full file system (runner/drivers/session/space.py) is recorded in the space its reserve frees, and re-raised as
    the clear OutOfSpace error; the reserve is made before anything starts."""
    from runner.drivers.session import space

    places = space_places(ws)
    reserve = space.Reserve(places)
    reserve.ensure()
    with sigterm_as_interrupt():
        try:
            yield
        except KeyboardInterrupt:
            _record_quietly(ws, ports, "plan-runner was interrupted (Ctrl-C or SIGTERM) during the session")
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, then re-raised for the CLI's one error handler
            # a failure plan-runner names (what, why, fix): not a crash, unless what it names is a full disk (git's
            # "Out of diskspace" writing the gates' index, say): then the full disk's own record and message below
            if isinstance(exc, space.OutOfSpace) or isinstance(exc, PlanRunnerError) and not space.exhausted(exc):
                _record_quietly(ws, ports, f"plan-runner stopped during the session: {type(exc).__name__}: {exc}")
                raise
            if not space.exhausted(exc):
                _record_quietly(ws, ports, f"plan-runner itself failed during the session (a bug of plan-runner's, "
                                             f"not the agent's or the plan's): {type(exc).__name__}: "
                                             f"{bound_text(str(exc), 600)}; please report it at {CRASH_REPORT_URL} "
                                             "with this record", outcome=Outcome.CRASHED)
                raise
            seen = space.usage(places)
            reserve.release()
            record = _record_quietly(ws, ports, f"a file system plan-runner writes was full during the session "
                                                  f"({space.full_words(seen)})", only_if_saved=True)
            outcome = (f"Session {record.n} was recorded as Interrupted (no attempt or budget used), in space "
                       "plan-runner had held back; "
                       + (f"{record.reasons[0].rsplit('; ', 1)[-1]}." if record.head_sha else
                          "the agent had no work to save.")
                       if record is not None else
                       "The session could not be recorded even so; it stays open, and the next run, once space is "
                       "back, saves its agent's work from the agent's clone and records it. Nothing is lost.")
            raise space.out_of_space(places, when="during the session", outcome=outcome, seen=seen) from exc


def _record_quietly(ws: Workspace, ports: Ports, why: str, *, only_if_saved: bool = False,
                    outcome: Outcome = Outcome.INTERRUPTED) -> SessionRecord | None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not lose the record
    try:
        return record_interruption(ws, ports, why, only_if_saved=only_if_saved, outcome=outcome)
    except Exception:  # noqa: BLE001 - the next run reconciles the open session instead
        return None
    finally:
        signal.signal(signal.SIGINT, previous)
