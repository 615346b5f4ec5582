"""Properties of the pure core, over generated evidence and outcome sequences."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from core_builders import T0, evidence, flip, gate, plan, record, signals, tracker_commit, wip_commit, work_commit
from runner.core.actions import Blame, ConsultAdvisor, Finish, Outcome, Park, RunSession, Verdict, Wait
from runner.core.evidence import CheckpointState, ExitKind, Hints
from runner.core.ledger import Advice
from runner.core.outcome import classify
from runner.core.plan import BudgetConfig
from runner.core.policy import decide_after_advice, decide_next, fold
from tests.hypothesis_profiles import examples

states = st.sampled_from(list(CheckpointState) + [None])
hints = st.builds(
    Hints,
    claimed_done=st.none() | st.booleans(),
    stop_reason=st.none() | st.sampled_from(["end_turn", "stop_sequence", "max_tokens", "refusal"]),
    result_subtype=st.none() | st.sampled_from(["success", "error_during_execution"]),
    is_error=st.none() | st.booleans(),
    empty_output=st.booleans(),
    empty_plan=st.booleans(),
    final_text=st.sampled_from(["", "All done. All tests pass.", "HUMAN: nothing", "I could not do it"]),
)
evidences = st.builds(
    lambda commits, flips, gates, kind, out, h, handoff, tamper: evidence(
        commits=commits, flips=flips, gates=gates, tampering=tamper, handoff=handoff,
        signals=signals(kind, output_bytes=out, hints=h, exit_code=None if kind is not ExitKind.FINISHED else 0)),
    commits=st.lists(st.sampled_from([work_commit(), tracker_commit(), wip_commit()]), max_size=3).map(tuple),
    flips=st.lists(st.builds(flip, cid=st.sampled_from(["1.1", "1.2"]), before=states, after=states,
                             in_session_commits=st.booleans(), verify_passed=st.none() | st.booleans()),
                   max_size=2).map(tuple),
    gates=st.lists(st.builds(gate, name=st.sampled_from(["a", "b"]), passed=st.booleans(), required=st.booleans()),
                   max_size=2).map(tuple),
    kind=st.sampled_from(list(ExitKind)),
    out=st.sampled_from([0, 10]),
    h=hints,
    handoff=st.none() | st.sampled_from(["notes", "HUMAN: decide the lifetime"]),
    tamper=st.sampled_from([(), ("gates changed",)]),
)


@settings(max_examples=examples(ci=100, thorough=1000))
@given(evidences)
def test_every_evidence_yields_exactly_one_outcome(e):
    """classify is total and deterministic: one outcome, one matching row."""
    v = classify(e)
    assert v == classify(e) and v.outcome in Outcome and 1 <= v.rule <= 11


@settings(max_examples=examples(ci=100, thorough=1000))
@given(evidences, hints)
def test_hints_never_change_the_outcome(e, other_hints):
    """Replacing everything the model said about itself leaves the verdict's outcome alone."""
    swapped = e.model_copy(update={"signals": e.signals.model_copy(update={"hints": other_hints})})
    assert classify(swapped).outcome is classify(e).outcome


@settings(max_examples=examples(ci=100, thorough=1000))
@given(evidences)
def test_claimed_done_without_work_is_never_advanced_or_progress(e):
    """A 'done' hint with no work commits never counts as Advanced or Progress."""
    e = e.model_copy(update={
        "commits": tuple(c for c in e.commits if not c.counts_as_work or c.wip),
        "signals": e.signals.model_copy(update={"hints": Hints(claimed_done=True)})})
    assert classify(e).outcome not in (Outcome.ADVANCED, Outcome.PROGRESS)


outcome_pairs = st.sampled_from([(o, b) for o, b in [
    (Outcome.NEEDS_HUMAN, Blame.NONE), (Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT), (Outcome.ROLLED_OVER, Blame.ENVIRONMENT),
    (Outcome.STALLED, Blame.NONE), (Outcome.TIMED_OUT, Blame.NONE), (Outcome.AGENT_ERROR, Blame.AGENT),
    (Outcome.GATES_RED, Blame.AGENT), (Outcome.ADVANCED, Blame.NONE), (Outcome.PROGRESS, Blame.NONE),
    (Outcome.NO_PROGRESS, Blame.AGENT)]])


@settings(max_examples=examples(ci=100, thorough=1000))
@given(st.lists(outcome_pairs, max_size=30))
def test_environment_blamed_outcomes_never_burn_an_attempt(seq):
    """Stage attempts only grow on agent-blamed outcomes."""
    history = []
    for i, (o, b) in enumerate(seq, 1):
        before = fold(history).stage_attempts.get(1, 0)
        history.append(record(i, o, b, fingerprint=f"f{i}" if b is Blame.AGENT else None))
        after = fold(history).stage_attempts.get(1, 0)
        if b is not Blame.AGENT:
            assert after <= before
        else:
            assert after == before + 1


@settings(max_examples=examples(ci=150, thorough=1500))
@given(st.lists(outcome_pairs, min_size=1, max_size=10), st.lists(st.sampled_from(["retry", "resume", "skip", "oops"]),
                                                                   min_size=1, max_size=5),
       st.booleans(), st.integers(1, 12))
def test_no_sequence_of_outcomes_runs_forever(cycle, answers, same_fp, max_sessions):
    """Any endless stream of session outcomes and advisor answers reaches park or finish within max_sessions."""
    p = plan(budget=BudgetConfig(max_sessions=max_sessions))
    history: list = []
    n = 0
    for step in range(10 * max_sessions + 20):
        o, b = cycle[step % len(cycle)]
        n += 1
        fp = "same" if same_fp else f"f{n}"
        rec = record(n, o, b, fingerprint=fp if b is Blame.AGENT else None, agent_session_id="s")
        state = fold(history + [rec])
        v_kw = dict(reset_at=T0 + timedelta(minutes=1)) if o is Outcome.LIMIT_BACKOFF else {}
        v = Verdict(outcome=o, blame=b, rule=0, reasons=(), observed_at=T0, fingerprint=rec.fingerprint,
                    agent_session_id="s", **v_kw)
        action = decide_next(v, state, p)
        history.append(rec.model_copy(update={"next_action": action}))
        while isinstance(action, ConsultAdvisor):
            answer = answers[n % len(answers)]
            answer = answer if answer in ("retry", "resume", "skip") else "human"
            action = decide_after_advice(answer, "r", fold(history), p)
            history.append(Advice(at=T0, answer=answer, reason="r", checkpoint=rec.checkpoint, next_action=action))
        if isinstance(action, (Park, Finish)):
            assert n <= max_sessions
            return
        assert isinstance(action, (RunSession, Wait))
    raise AssertionError(f"no park or finish after {n} sessions (max_sessions {max_sessions})")


CORE = ["runner/core/outcome.py", "runner/core/policy.py", "runner/core/actions.py", "runner/core/evidence.py",
        "runner/core/ledger.py", "runner/core/plan.py"]
FORBIDDEN = {"git", "github", "httpx", "anthropic", "subprocess", "os", "socket", "time", "requests", "urllib"}


def test_core_imports_no_io_libraries():
    """The pure core imports none of git, github, httpx, anthropic, subprocess (nor os, time, socket)."""
    root = Path(__file__).resolve().parents[2]
    for rel in CORE:
        tree = ast.parse((root / rel).read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{rel} imports {name}"
