"""Builders for core records: realistic defaults, one override per test."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from runner.core.actions import Blame, Outcome, SessionKind
from runner.core.evidence import (
    CheckpointState, CommitInfo, Evidence, ExitKind, Flip, GateResult, SessionSignals,
)
from runner.core.ledger import SessionRecord
from runner.core.plan import BudgetConfig, Checkpoint, Plan, PlanConfig, Stage

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)

DONE, TODO, BLOCKED = CheckpointState.DONE, CheckpointState.TODO, CheckpointState.BLOCKED


def gate(name="tests", passed=True, required=True, fingerprint="", **kw) -> GateResult:
    return GateResult(name=name, passed=passed, required=required, exit_code=0 if passed else 1,
                      fingerprint=fingerprint or ("" if passed else f"fp-{name}"), **kw)


def work_commit(sha="a1", summary="Add sessions table") -> CommitInfo:
    return CommitInfo(sha=sha, summary=summary, files=("app/db.py",))


def tracker_commit(sha="b1") -> CommitInfo:
    return CommitInfo(sha=sha, summary="Tick 1.1", files=("plans/auth.md",), counts_as_work=False)


def wip_commit(sha="c1") -> CommitInfo:
    return CommitInfo(sha=sha, summary="plan-runner: WIP", files=("app/x.py",), wip=True)


def flip(cid="1.1", before=TODO, after=DONE, **kw) -> Flip:
    return Flip(checkpoint_id=cid, before=before, after=after, **kw)


def signals(kind=ExitKind.FINISHED, **kw) -> SessionSignals:
    kw.setdefault("exit_code", 0 if kind is ExitKind.FINISHED else None)
    kw.setdefault("output_bytes", 1000)
    kw.setdefault("agent_session_id", "sess-1")
    return SessionSignals(backend="script", exit_kind=kind, **kw)


def evidence(**kw) -> Evidence:
    base = dict(
        plan_id="auth", session_number=1, session_kind="delivery", started_at=T0,
        observed_at=T0 + timedelta(minutes=10), base_sha="0" * 40, head_sha="1" * 40,
        commits=(work_commit(),), flips=(), gates=(gate(),), signals=signals(), handoff=None,
        next_checkpoint="1.1",
    )
    base.update(kw)
    return Evidence(**base)


def plan(states=None, sessions=(1, 2), budget=None) -> Plan:
    """Two stages: 1.1, 1.2 (expects sessions[0]) and 2.1 (sessions[1])."""
    states = states or {}
    def cp(cid):
        return Checkpoint(id=cid, title=f"Checkpoint {cid}", state=states.get(cid, TODO))
    return Plan(
        path="plans/auth.md", id="auth",
        config=PlanConfig(budget=budget or BudgetConfig()),
        stages=(Stage(number=1, title="Store", sessions=sessions[0], checkpoints=(cp("1.1"), cp("1.2"))),
                Stage(number=2, title="Protect", sessions=sessions[1], checkpoints=(cp("2.1"),))),
    )


def record(n=1, outcome=Outcome.PROGRESS, blame=Blame.NONE, kind=SessionKind.DELIVERY, checkpoint="1.1",
           stage=1, fingerprint=None, **kw) -> SessionRecord:
    return SessionRecord(n=n, kind=kind, checkpoint=checkpoint, stage=stage, started_at=T0,
                         finished_at=T0 + timedelta(minutes=n), outcome=outcome, blame=blame, rule=0,
                         fingerprint=fingerprint, **kw)
