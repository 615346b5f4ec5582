"""The `Interrupted` outcome in the policy: recorded when plan-runner itself was stopped mid-session,
it moves no budget and asks for the same session again (the CLI-level test is in test_first_hour.py)."""

from __future__ import annotations

from runner.core.actions import Blame, Outcome, RunSession, SessionKind
from runner.core.outcome import INTERRUPTED_RULE, RULES
from runner.core.policy import fold
from tests.core_builders import record


def _again(kind=SessionKind.FIX_GATES, resume=None) -> RunSession:
    return RunSession(kind=kind, checkpoint="1.1", reason="interrupted: run the same session again",
                      resume_session_id=resume)


def test_an_interruption_burns_no_attempt_resume_backoff_or_breaker_count():
    """After GatesRed then Stalled, an Interrupted session leaves attempts, stalls, backoffs and the streak as they were."""
    before = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="f1"),
              record(2, Outcome.STALLED, Blame.NONE, kind=SessionKind.FIX_GATES, agent_session_id="s1")]
    interrupted = record(3, Outcome.INTERRUPTED, Blame.NONE, kind=SessionKind.RESUME,
                         next_action=_again(SessionKind.RESUME, "s1"))
    a, b = fold(before), fold(before + [interrupted])
    assert (b.stage_attempts, b.consecutive_stalls, b.consecutive_zero_stalls, b.consecutive_backoffs, b.streak) == \
           (a.stage_attempts, a.consecutive_stalls, a.consecutive_zero_stalls, a.consecutive_backoffs, a.streak)
    assert b.sessions == a.sessions + 1 and b.last.outcome is Outcome.INTERRUPTED
    assert b.pending == _again(SessionKind.RESUME, "s1")


def test_interrupted_is_never_classified_from_evidence():
    """No rule of the outcome table yields Interrupted: only the stopped process records it, as rule 0."""
    assert all(rule.outcome is not Outcome.INTERRUPTED for rule in RULES) and INTERRUPTED_RULE == 0


def test_a_crash_burns_nothing_either_and_is_its_own_outcome():
    """A Crashed session (plan-runner's own unexpected failure) folds like an interruption: no attempt, stall,
    backoff or breaker count moves; it is recorded as Crashed, not Interrupted, and no rule classifies it."""
    before = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="f1")]
    crashed = record(2, Outcome.CRASHED, Blame.NONE, kind=SessionKind.FIX_GATES, next_action=_again())
    a, b = fold(before), fold(before + [crashed])
    assert (b.stage_attempts, b.consecutive_stalls, b.consecutive_backoffs, b.streak) == \
           (a.stage_attempts, a.consecutive_stalls, a.consecutive_backoffs, a.streak)
    assert b.last.outcome is Outcome.CRASHED and Outcome.CRASHED is not Outcome.INTERRUPTED
    assert all(rule.outcome is not Outcome.CRASHED for rule in RULES)
