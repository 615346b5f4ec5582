"""The core pinned at its boundaries: examples and oracle properties that kill the mutants of
runner/outcome.py and runner/policy.py (see `python -m benchmarks.mutation` and docs/reliability.md)."""

from __future__ import annotations

import pytest

from runner.policy import RunState


def test_evolve_rejects_a_misspelt_field():
    """Evolving frozen state with a field it does not have is an error naming the field, not a silent no-op."""
    with pytest.raises(TypeError, match="no field.*sesions"):
        RunState().evolve(sesions=3)
    assert RunState().evolve(sessions=3).sessions == 3


# --- the outcome table: an independent oracle, written from SPEC section 6 -----------------------

from datetime import timedelta  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from core_builders import (  # noqa: E402
    BLOCKED, DONE, T0, TODO, evidence, flip, gate, plan, record, signals, tracker_commit, wip_commit, work_commit,
)
from runner.actions import (  # noqa: E402
    Blame, ConsultAdvisor, Finish, Outcome, Park, RunSession, SessionKind, Verdict, Wait,
)
from runner.evidence import CommitInfo, Evidence, ExitKind, Hints  # noqa: E402
from runner.outcome import RULES, classify  # noqa: E402

_ROW_OUTCOME = {1: (Outcome.NEEDS_HUMAN, Blame.NONE), 2: (Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT),
                3: (Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT), 4: (Outcome.ROLLED_OVER, Blame.ENVIRONMENT),
                5: (Outcome.STALLED, Blame.NONE), 6: (Outcome.TIMED_OUT, Blame.NONE),
                7: (Outcome.AGENT_ERROR, Blame.AGENT), 8: (Outcome.GATES_RED, Blame.AGENT),
                9: (Outcome.ADVANCED, Blame.NONE), 10: (Outcome.PROGRESS, Blame.NONE),
                11: (Outcome.NO_PROGRESS, Blame.AGENT)}


def _human_asked(handoff: str | None) -> bool:
    for line in (handoff or "").split("\n"):
        words = line.strip()
        while words[:1] in ("-", "*", ">", " "):
            words = words[1:]
        if words.strip()[:6].upper() == "HUMAN:":
            return True
    return False


def _work(commits) -> list[CommitInfo]:
    return [c for c in commits if c.counts_as_work and not c.wip]


def _green(e: Evidence) -> bool:
    return not [g for g in e.gates if g.required and not g.passed]


def _genuine(e: Evidence) -> list[str]:
    credited = _work(e.carried_commits) + _work(e.commits)
    if not credited or not _green(e):
        return []
    return [f.checkpoint_id for f in e.flips if f.after == DONE and f.before != DONE and f.in_session_commits
            and f.verify_passed in (True, None)]


PREDICATES = {
    1: lambda e: (_human_asked(e.handoff) or e.signals.exit_kind == ExitKind.AUTH or bool(e.tampering)
                  or bool(e.leaked_secrets) or any(f.after == BLOCKED and f.before != BLOCKED for f in e.flips)),
    2: lambda e: e.signals.exit_kind == ExitKind.RATE_LIMIT,
    3: lambda e: e.signals.exit_kind == ExitKind.TRANSIENT,
    4: lambda e: e.signals.exit_kind == ExitKind.TOKEN_BUDGET,
    5: lambda e: e.signals.exit_kind == ExitKind.STALLED,
    6: lambda e: e.signals.exit_kind == ExitKind.TIME_LIMIT,
    7: lambda e: e.signals.exit_kind == ExitKind.CRASHED or (e.signals.exit_kind == ExitKind.FINISHED
                                                             and e.signals.exit_code is not None
                                                             and e.signals.exit_code != 0),
    8: lambda e: not _green(e),
    9: lambda e: bool(_genuine(e)),
    10: lambda e: bool(_work(e.carried_commits) + _work(e.commits)),
    11: lambda e: True,
}

_states = st.sampled_from([TODO, DONE, BLOCKED, None])
_commit = st.sampled_from([work_commit("w1"), work_commit("w2", "Fix login"), tracker_commit(), wip_commit(),
                           CommitInfo(sha="e1", summary="empty", files=(), counts_as_work=False)])
_gate = st.builds(gate, name=st.sampled_from(["tests", "types", "lint"]), passed=st.booleans(), required=st.booleans(),
                  fingerprint=st.sampled_from(["", "x", "y"]), reran=st.booleans(), timed_out=st.booleans(),
                  http_status=st.sampled_from([None, 500]), error=st.sampled_from([None, "connection refused"]))
_hints = st.builds(Hints, claimed_done=st.sampled_from([None, True, False]),
                   result_subtype=st.sampled_from([None, "success", "error_during_execution"]))
_signals = st.builds(
    lambda kind, code, out, h, calls, fails, err, reset, sid: signals(
        kind, exit_code=code, output_bytes=out, hints=h, tool_calls=calls, tool_failures=fails, error=err,
        reset_at=reset, agent_session_id=sid),
    kind=st.sampled_from(list(ExitKind)), code=st.sampled_from([None, 0, 1, 2, 137]), out=st.sampled_from([0, 1, 500]),
    h=_hints, calls=st.integers(0, 3), fails=st.integers(0, 3), err=st.sampled_from([None, "boom", "429"]),
    reset=st.sampled_from([None, T0 + timedelta(hours=1), T0 - timedelta(hours=1)]),
    sid=st.sampled_from([None, "sess-1"]))
_handoffs = st.sampled_from([None, "", "notes only", "- HUMAN: decide", "  > human: look", "All done. HUMAN: nothing",
                             "* HUMAN:x", "HUMANS: no"])
EVIDENCE = st.builds(
    lambda commits, carried, flips, gates, sig, handoff, tamper, secrets, deleted: evidence(
        commits=tuple(commits), carried_commits=tuple(carried), flips=tuple(flips), gates=tuple(gates), signals=sig,
        handoff=handoff, tampering=tamper, leaked_secrets=secrets, deleted_tests=deleted),
    commits=st.lists(_commit, max_size=3), carried=st.lists(_commit, max_size=2),
    flips=st.lists(st.builds(flip, cid=st.sampled_from(["1.1", "1.2", "2.1"]), before=_states, after=_states,
                             in_session_commits=st.booleans(), verify_passed=st.sampled_from([None, True, False])),
                   max_size=3, unique_by=lambda f: f.checkpoint_id),
    gates=st.lists(_gate, max_size=3), sig=_signals, handoff=_handoffs,
    tamper=st.sampled_from([(), ("gates changed",)]), secrets=st.sampled_from([(), ("config.py",)]),
    deleted=st.sampled_from([(), ("tests/test_a.py",), tuple(f"tests/t{i}.py" for i in range(12))]),
)


@settings(max_examples=250)
@given(EVIDENCE)
def test_row_k_matches_iff_its_predicate_holds_and_no_earlier_row_does(e):
    """The verdict's row is the first row whose SPEC predicate holds, with that row's outcome and blame."""
    expected = next(k for k in range(1, 12) if PREDICATES[k](e))
    v = classify(e)
    assert v.rule == expected, (v.rule, expected)
    assert (v.outcome, v.blame) == _ROW_OUTCOME[expected]
    assert [r.row for r in RULES] == list(range(1, 12))


@settings(max_examples=200)
@given(EVIDENCE)
def test_verdict_fields_follow_from_the_row_and_the_evidence(e):
    """transient, reset_at, zero_output, advanced, rejected flips and all_failed each follow the SPEC's definition."""
    v = classify(e)
    s = e.signals
    assert v.transient == (v.rule == 3)
    assert v.reset_at == (s.reset_at if v.rule == 2 else None)
    assert v.zero_output == (v.rule in (5, 6) and s.output_bytes == 0)
    assert list(v.advanced) == _genuine(e)
    assert v.agent_session_id == s.agent_session_id and v.observed_at == e.observed_at
    done_flips = [f for f in e.flips if f.after == DONE and f.before != DONE]
    credited = _work(e.carried_commits) + _work(e.commits)
    assert list(v.rejected_flips) == [
        f"{f.checkpoint_id}: " + ("the flip is not in this session's commits" if not f.in_session_commits
                                  else "no work commits back it" if not credited
                                  else "required gates are red" if not _green(e)
                                  else "its own verify: command failed")
        for f in done_flips if f.checkpoint_id not in v.advanced]
    failed_kinds = {ExitKind.CRASHED, ExitKind.AUTH, ExitKind.RATE_LIMIT, ExitKind.TRANSIENT, ExitKind.STALLED,
                    ExitKind.TIME_LIMIT}
    assert v.all_failed == (not _work(e.commits) and ((s.tool_calls > 0 and s.tool_failures >= s.tool_calls)
                                                      or s.exit_kind in failed_kinds))
    assert (v.fingerprint is not None) == (v.outcome in (Outcome.GATES_RED, Outcome.AGENT_ERROR, Outcome.NO_PROGRESS))


@settings(max_examples=150)
@given(EVIDENCE)
def test_hint_notes_appear_exactly_when_the_claim_contradicts_the_evidence(e):
    """A claimed 'done' is noted unless Advanced; a `success` subtype is noted on limits, errors and parks."""
    v = classify(e)
    h = e.signals.hints
    claimed = any("claimed it was done" in r for r in v.reasons)
    assert claimed == (bool(h.claimed_done) and v.outcome is not Outcome.ADVANCED)
    overruled = any("overruled by the evidence" in r for r in v.reasons)
    assert overruled == (h.result_subtype == "success"
                         and v.outcome in (Outcome.LIMIT_BACKOFF, Outcome.AGENT_ERROR, Outcome.NEEDS_HUMAN))
    deleted = [r for r in v.reasons if "test file(s)" in r]
    assert bool(deleted) == bool(e.deleted_tests)
    if deleted:
        assert f"deleted {len(e.deleted_tests)} test file(s)" in deleted[0]
        assert deleted[0].count("tests/") == min(10, len(e.deleted_tests))
        assert ("..." in deleted[0]) == (len(e.deleted_tests) > 10)
