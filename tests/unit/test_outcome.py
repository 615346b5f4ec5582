"""The outcome table (SPEC section 6), row by row, plus the evidence-over-hints rules."""

from __future__ import annotations

from datetime import timedelta

from core_builders import (
    BLOCKED, DONE, T0, TODO, evidence, flip, gate, signals, tracker_commit, wip_commit, work_commit,
)
from runner.core.actions import Blame, Outcome
from runner.core.evidence import ExitKind, Hints
from runner.core.outcome import INTERRUPTED_RULE, RULES, TIMED_OUT_RULE, classify, human_lines


def test_row1_handoff_with_human_line_needs_human():
    """A handoff line starting `HUMAN:` parks the plan even when everything else advanced."""
    v = classify(evidence(flips=(flip(),), handoff="Did 1.1.\nHUMAN: which token lifetime?\n"))
    assert (v.outcome, v.blame, v.rule) == (Outcome.NEEDS_HUMAN, Blame.NONE, 1)
    assert any("which token lifetime" in r for r in v.reasons)


def test_row1_checkpoint_flipped_to_blocked_needs_human():
    """A checkpoint flipped to BLOCKED is a request for a human."""
    v = classify(evidence(flips=(flip("2.2", TODO, BLOCKED),)))
    assert v.outcome is Outcome.NEEDS_HUMAN and "2.2" in v.reasons[0]


def test_row1_auth_failure_needs_human():
    """Authentication or billing failures cannot be retried away."""
    v = classify(evidence(signals=signals(ExitKind.AUTH, error="401 invalid x-api-key")))
    assert v.outcome is Outcome.NEEDS_HUMAN and "401" in v.reasons[0]


def test_row1_tampering_needs_human():
    """An agent edit of gates or configuration parks the plan."""
    v = classify(evidence(tampering=("front matter: gates changed",)))
    assert v.outcome is Outcome.NEEDS_HUMAN and "gates changed" in v.reasons[0]


def test_row1_a_secret_in_the_commits_needs_human_even_when_everything_advanced():
    """Green gates, work and a genuine flip do not matter: a commit holding a secret is for a human."""
    v = classify(evidence(flips=(flip(),), leaked_secrets=("config/settings.py",)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.NEEDS_HUMAN, Blame.NONE, 1)
    assert "config/settings.py" in v.reasons[0] and "nothing of this session was pushed" in v.reasons[0]


def test_row1_a_required_gate_that_cannot_be_decided_here_needs_human():
    """A required gate that cannot be decided in this job (a `checks:` gate no CI run can answer) is for a human,
    blamed on nobody; the same answer from an optional gate parks nothing."""
    why = "no check run can appear for a push made with GITHUB_TOKEN"
    v = classify(evidence(flips=(flip(),), gates=(gate("ci", passed=False, needs_human=why),)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.NEEDS_HUMAN, Blame.NONE, 1)
    assert list(v.reasons) == [f"gate ci cannot be decided here: {why}"]
    optional = classify(evidence(flips=(flip(),), gates=(gate(), gate("ci", passed=False, required=False,
                                                                            needs_human=why))))
    assert optional.outcome is not Outcome.NEEDS_HUMAN


def test_interrupted_is_rule_0_outside_the_table():
    """Interrupted is recorded as rule 0, a number no row of the table has (docs and reports name the rule)."""
    assert INTERRUPTED_RULE == 0 and INTERRUPTED_RULE not in {r.row for r in RULES}


def test_row2_rate_limit_is_limit_backoff_blamed_on_environment():
    """A rate limit is weather: LimitBackoff with the backend's reset time."""
    reset = T0 + timedelta(hours=1)
    v = classify(evidence(commits=(), signals=signals(ExitKind.RATE_LIMIT, reset_at=reset, error="429")))
    assert (v.outcome, v.blame, v.rule, v.reset_at) == (Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT, 2, reset)
    assert not v.transient


def test_row2_rate_limit_reported_as_success_is_still_a_limit():
    """Claude Code's `subtype: success` with `is_error` and 429 is a limit; the claim is noted as overruled."""
    hints = Hints(result_subtype="success", is_error=True, claimed_done=True)
    v = classify(evidence(commits=(), signals=signals(ExitKind.RATE_LIMIT, hints=hints)))
    assert v.outcome is Outcome.LIMIT_BACKOFF
    assert any("overruled" in r for r in v.reasons)


def test_row3_transient_error_is_short_limit_backoff():
    """5xx / overloaded / network errors back off briefly and blame the environment."""
    v = classify(evidence(signals=signals(ExitKind.TRANSIENT, error="529 overloaded")))
    assert (v.outcome, v.blame, v.rule, v.transient) == (Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT, 3, True)


def test_row4_token_budget_rolls_over():
    """A spent token budget rolls over to a fresh session, blamed on the environment."""
    v = classify(evidence(signals=signals(ExitKind.TOKEN_BUDGET)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.ROLLED_OVER, Blame.ENVIRONMENT, 4)


def test_row5_stall_is_stalled_and_zero_output_is_marked():
    """No output for stall_minutes is Stalled; a stall that printed nothing is a zero-output stall."""
    v = classify(evidence(commits=(), signals=signals(ExitKind.STALLED, output_bytes=0)))
    assert (v.outcome, v.blame, v.rule, v.zero_output) == (Outcome.STALLED, Blame.NONE, 5, True)
    assert classify(evidence(signals=signals(ExitKind.STALLED))).zero_output is False


def test_row6_time_limit_is_timed_out():
    """The hard time limit is TimedOut, not blamed on anyone."""
    v = classify(evidence(signals=signals(ExitKind.TIME_LIMIT)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.TIMED_OUT, Blame.NONE, 6)


def test_an_orphaned_session_is_recorded_under_the_time_limits_row():
    """A session whose job died without a word is recorded under the row a hit time limit is judged by."""
    assert TIMED_OUT_RULE == classify(evidence(signals=signals(ExitKind.TIME_LIMIT))).rule


def test_row7_crash_is_agent_error():
    """A process that failed for another reason is AgentError and burns an attempt."""
    v = classify(evidence(signals=signals(ExitKind.CRASHED, exit_code=1, error="boom")))
    assert (v.outcome, v.blame, v.rule) == (Outcome.AGENT_ERROR, Blame.AGENT, 7)
    assert v.fingerprint


def test_row7_nonzero_exit_reported_as_finished_is_agent_error():
    """A non-zero exit code is evidence of failure even when the backend called it finished."""
    v = classify(evidence(signals=signals(ExitKind.FINISHED, exit_code=2)))
    assert v.outcome is Outcome.AGENT_ERROR


def test_row8_required_gate_red_is_gates_red():
    """Any required red gate is GatesRed, blamed on the agent, with a fingerprint of the failures."""
    v = classify(evidence(flips=(flip(),), gates=(gate("tests", passed=False, reran=True), gate("lint"))))
    assert (v.outcome, v.blame, v.rule) == (Outcome.GATES_RED, Blame.AGENT, 8)
    assert "re-run once" in v.reasons[0]
    assert v.rejected_flips == ("1.1: required gates are red",)


def test_row8_gates_red_as_on_the_base_before_any_work_blame_nobody():
    """Every red required gate red on the base commit too, before any work: GatesRed (the plan may start from a
    failing test), blamed on nobody, the base's failing line in the reasons; one gate red only after the work is
    the agent's again, and so is an optional gate's mark (it does not decide)."""
    on_base = "it was red on a fresh checkout of the base commit abc too (exit 1: No module named pytest)"
    v = classify(evidence(gates=(gate("tests", passed=False, red_on_base=on_base),)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.GATES_RED, Blame.NONE, 8)
    assert "No module named pytest" in v.reasons[0] and v.fingerprint
    mixed = classify(evidence(gates=(gate("tests", passed=False, red_on_base=on_base), gate("lint", passed=False))))
    assert (mixed.outcome, mixed.blame, mixed.rule) == (Outcome.GATES_RED, Blame.AGENT, 8)
    same = classify(evidence(gates=(gate("tests", passed=False),)))
    assert same.fingerprint == v.fingerprint  # the same failure after work: the circuit breaker counts it


def test_row8_optional_red_gate_does_not_decide():
    """Optional gates are reported, never decide."""
    v = classify(evidence(gates=(gate("tests"), gate("lint", passed=False, required=False))))
    assert v.outcome is Outcome.PROGRESS


def test_row9_genuine_flip_advances():
    """Green gates, work commits and a flip in this session's commits: Advanced."""
    v = classify(evidence(commits=(work_commit(), tracker_commit()), flips=(flip(verify_passed=True),)))
    assert (v.outcome, v.blame, v.rule, v.advanced) == (Outcome.ADVANCED, Blame.NONE, 9, ("1.1",))
    assert v.rejected_flips == ()


def test_row9_flip_whose_verify_fails_is_rejected_not_advanced():
    """A checkpoint's own verify: must pass for the flip to count."""
    v = classify(evidence(flips=(flip(verify_passed=False),)))
    assert v.outcome is Outcome.PROGRESS
    assert v.rejected_flips == ("1.1: its own verify: command failed",)


def test_row9_flip_outside_session_commits_is_rejected():
    """A flip that is not in this session's commits does not count."""
    v = classify(evidence(flips=(flip(in_session_commits=False),)))
    assert v.outcome is Outcome.PROGRESS and v.rejected_flips[0].startswith("1.1: the flip is not")


def test_row10_work_without_flip_is_progress():
    """Green gates and work commits without a flip: Progress."""
    v = classify(evidence())
    assert (v.outcome, v.blame, v.rule) == (Outcome.PROGRESS, Blame.NONE, 10)


def test_rows9_to_11_count_the_unjudged_work_of_interrupted_sessions_before():
    """A session resumed after a stall that only ticks the checkpoint is backed by the stalled session's
    commits (no verdict judged them); the reasons say so. Carried WIP alone backs nothing."""
    carried = (work_commit("s1", "Add sessions table"), wip_commit("s2"))
    v = classify(evidence(commits=(tracker_commit(),), flips=(flip(in_session_commits=True),),
                          carried_commits=carried))
    assert (v.outcome, v.rule) == (Outcome.ADVANCED, 9) and not v.rejected_flips
    assert any("1 work commit(s) of the earlier session(s)" in r for r in v.reasons)
    v = classify(evidence(commits=(), carried_commits=carried))
    assert (v.outcome, v.rule) == (Outcome.PROGRESS, 10)
    v = classify(evidence(commits=(tracker_commit(),), flips=(flip(in_session_commits=True),),
                          carried_commits=(wip_commit(),)))
    assert v.outcome is Outcome.NO_PROGRESS and v.rejected_flips == ("1.1: no work commits back it",)


def test_row11_no_work_commits_is_no_progress():
    """Commits that only touch the tracker, and WIP commits, are not work."""
    v = classify(evidence(commits=(tracker_commit(), wip_commit()), flips=(flip(),)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.NO_PROGRESS, Blame.AGENT, 11)
    assert v.rejected_flips == ("1.1: no work commits back it",)


def test_claimed_done_without_work_is_no_progress_and_noted():
    """The seed's bug: a confident 'done' with nothing behind it is NoProgress, and the report says so."""
    hints = Hints(claimed_done=True, final_text="All done. All tests pass.", claims=("all tests pass",))
    v = classify(evidence(commits=(), signals=signals(hints=hints)))
    assert v.outcome is Outcome.NO_PROGRESS
    assert any("claimed it was done" in r for r in v.reasons)


def test_all_failed_session_is_marked_for_an_error_report():
    """Every tool call failed and nothing was committed: the report explains the failure instead of summarising."""
    v = classify(evidence(commits=(), signals=signals(tool_calls=3, tool_failures=3)))
    assert v.all_failed and v.outcome is Outcome.NO_PROGRESS
    assert not classify(evidence()).all_failed


def test_human_in_agent_text_is_not_a_handoff():
    """`HUMAN:` mid-line or in the agent's chat text is not a park request (the fixture's 'All done. HUMAN: nothing')."""
    hints = Hints(final_text="All done. HUMAN: nothing")
    v = classify(evidence(signals=signals(hints=hints), handoff="All done. HUMAN: nothing"))
    assert v.outcome is Outcome.PROGRESS
    assert human_lines("- HUMAN: decide\n> human: too") == ["HUMAN: decide", "human: too"]


def test_needs_human_outranks_a_rate_limit():
    """First match wins: a BLOCKED flip parks even when the session then hit a limit."""
    v = classify(evidence(flips=(flip("1.2", TODO, BLOCKED),), signals=signals(ExitKind.RATE_LIMIT)))
    assert v.outcome is Outcome.NEEDS_HUMAN


def test_same_failure_twice_has_the_same_fingerprint():
    """The circuit breaker compares fingerprints: same failing gates, same fingerprint."""
    a = classify(evidence(gates=(gate("tests", passed=False, fingerprint="x"),)))
    b = classify(evidence(session_number=2, gates=(gate("tests", passed=False, fingerprint="x"),)))
    c = classify(evidence(gates=(gate("tests", passed=False, fingerprint="y"),)))
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_unflipping_a_checkpoint_is_not_rejected():
    """An agent that unticks a checkpoint it had wrongly ticked is allowed to."""
    v = classify(evidence(flips=(flip(before=DONE, after=TODO),)))
    assert v.outcome is Outcome.PROGRESS and v.rejected_flips == ()


def test_row4_live_usage_past_the_budget_rolls_over_when_nothing_is_credited():
    """A backend that finished on its own with its usage past the plan's session_tokens: RolledOver (not
    Progress), blamed on the environment; under the budget it is Progress as before."""
    over = evidence(token_budget=1000, signals=signals(total_tokens=1500))
    v = classify(over)
    assert (v.outcome, v.blame, v.rule) == (Outcome.ROLLED_OVER, Blame.ENVIRONMENT, 4)
    assert "1,500 tokens of 1,000" in v.reasons[0]
    assert classify(evidence(token_budget=1000, signals=signals(total_tokens=999))).outcome is Outcome.PROGRESS


def test_row4_live_usage_past_the_budget_still_advances_a_genuine_flip():
    """Past the budget, a checkpoint genuinely done is still Advanced: the work is credited, not rolled over."""
    e = evidence(token_budget=1000, signals=signals(total_tokens=5000), flips=(flip(),))
    assert classify(e).outcome is Outcome.ADVANCED


def test_row1_a_required_gate_that_cannot_start_on_the_base_needs_human():
    """A set-up problem (a required gate that cannot start on the base commit either) is not the agent's failure:
    NeedsHuman, saying which gate and why."""
    v = classify(evidence(flips=(flip(),), gates=(gate(passed=False, setup_problem="pytest: command not found"),)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.NEEDS_HUMAN, Blame.NONE, 1)
    assert any("set-up problem" in r and "tests: pytest: command not found" in r for r in v.reasons)


def test_row4_a_stopped_session_says_the_backends_words_and_only_those():
    """The backend's error, when it gave one, follows the reason; none, nothing follows."""
    with_error = classify(evidence(signals=signals(ExitKind.TOKEN_BUDGET, error="600000 tokens")))
    assert with_error.reasons == ("the session's token budget was reached: 600000 tokens",)
    assert classify(evidence(signals=signals(ExitKind.TOKEN_BUDGET))).reasons == ("the session's token budget was reached",)


def test_row4_usage_exactly_at_the_budget_rolls_over():
    """The budget stops the session at 100 % (docs/plan-format.md, `agent.session_tokens`): usage equal to it is
    the budget reached, not one token short of it."""
    v = classify(evidence(token_budget=1000, signals=signals(total_tokens=1000)))
    assert (v.outcome, v.blame, v.rule) == (Outcome.ROLLED_OVER, Blame.ENVIRONMENT, 4)
