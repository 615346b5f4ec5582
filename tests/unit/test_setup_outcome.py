"""Issue 27 in the core: a gate that cannot start on the base commit either is a set-up problem (row 1,
NeedsHuman, blame none, nothing burned, the fix in the reasons); work no verdict credited is judged again."""

from __future__ import annotations

from core_builders import evidence, flip, gate, plan, record, tracker_commit, work_commit
from runner.core.actions import Blame, Outcome, Park
from runner.core.outcome import classify
from runner.core.policy import decide_next, fold

FIX = "fix: add a `setup:` ..."


def _missing(setup_problem: str | None):
    return gate(passed=False, output_tail="bash: .venv/bin/pytest: No such file or directory",
                fingerprint="f", setup_problem=setup_problem).model_copy(update={"exit_code": 127})


def test_row1_a_gate_that_cannot_start_on_the_base_either_is_a_set_up_problem_blamed_on_nobody():
    v = classify(evidence(commits=(work_commit(),), flips=(flip(),), gates=(_missing(f"cannot start; {FIX}"),)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.NEEDS_HUMAN, Blame.NONE, 1)
    assert any(r.startswith("set-up problem, not the agent's failure: tests: cannot start") and FIX in r
               for r in v.reasons)
    assert v.advanced == () and v.rejected_flips  # the tick is not credited now: the next verdict judges it


def test_a_gate_the_agent_broke_stays_the_agents():
    """127 on the judged commit only (it starts on the base: no set-up problem recorded) is GatesRed, the agent's."""
    v = classify(evidence(commits=(work_commit(),), gates=(_missing(None),)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.GATES_RED, Blame.AGENT, 8)


def test_an_optional_gate_with_a_set_up_problem_decides_nothing():
    optional = _missing("cannot start").model_copy(update={"required": False})
    assert classify(evidence(commits=(work_commit(),), gates=(optional,))).outcome is Outcome.PROGRESS


def test_a_set_up_problem_parks_once_and_burns_no_attempt():
    v = classify(evidence(commits=(work_commit(),), gates=(_missing(f"cannot start; {FIX}"),)))
    r = record(1, v.outcome, v.blame, stage=1, base_sha="b1")
    state = fold([r])
    action = decide_next(v, state, plan())
    assert isinstance(action, Park) and any(FIX in d for d in action.details)
    assert state.stage_attempts.get(1, 0) == 0 and state.streak == 0
    assert state.uncredited_base == "b1"  # its work waits for the next verdict


def test_a_tick_one_session_late_is_credited_by_the_earlier_sessions_work():
    """Session 1's work was judged red by a broken gate (or parked as a set-up problem); after the fix, session 2
    only ticks: the carried commits back the flip, judged by session 2's green gates."""
    late = evidence(commits=(tracker_commit(),), flips=(flip(),), carried_commits=(work_commit("s1"),))
    v = classify(late)
    assert (v.outcome, v.advanced) == (Outcome.ADVANCED, ("1.1",)) and not v.rejected_flips
    alone = classify(evidence(commits=(tracker_commit(),), flips=(flip(),)))
    assert alone.outcome is Outcome.NO_PROGRESS and alone.rejected_flips  # control: nothing carried, no credit
    for before in (Outcome.GATES_RED, Outcome.NEEDS_HUMAN, Outcome.PROGRESS, Outcome.NO_PROGRESS):
        assert fold([record(1, before, base_sha="b1")]).uncredited_base == "b1", before
    assert fold([record(1, Outcome.GATES_RED, base_sha="b1"),
                 record(2, Outcome.ADVANCED, base_sha="b2")]).uncredited_base is None
