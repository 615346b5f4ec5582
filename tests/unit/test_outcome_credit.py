"""A checkpoint is credited exactly when the verdict is Advanced: a session that did the work and ticked,
then ended another way (a real 1.5B run: the agent loop stopped on a repeated failed call, AgentError),
must not list the checkpoint as advanced; the tick is rejected, so the adapter reverts it and the pushed
branch agrees with the record."""

from __future__ import annotations

import pytest
from core_builders import evidence, flip, signals

from runner.core.actions import Outcome
from runner.core.evidence import ExitKind
from runner.core.outcome import classify


@pytest.mark.parametrize("kind,outcome", [
    (ExitKind.CRASHED, Outcome.AGENT_ERROR), (ExitKind.STALLED, Outcome.STALLED),
    (ExitKind.TIME_LIMIT, Outcome.TIMED_OUT), (ExitKind.TOKEN_BUDGET, Outcome.ROLLED_OVER),
    (ExitKind.TRANSIENT, Outcome.LIMIT_BACKOFF),
])
def test_a_genuine_flip_in_a_session_that_ended_otherwise_is_not_credited_and_is_reverted(kind, outcome) -> None:
    """Work, green gates and the tick in the session's commits, but an earlier row matched: advanced is empty and the tick is a rejected claim naming the outcome."""
    v = classify(evidence(flips=(flip(in_session_commits=True),), signals=signals(kind, error="same tool call failed twice")))
    assert v.outcome is outcome and v.advanced == ()
    assert v.rejected_flips == (f"1.1: the session ended {outcome.value}, and only an Advanced session credits a checkpoint",)


def test_the_same_flip_in_a_session_that_finished_is_credited() -> None:
    """The control: the same evidence with a clean finish is Advanced with 1.1, nothing rejected."""
    v = classify(evidence(flips=(flip(in_session_commits=True),)))
    assert (v.outcome, v.advanced, v.rejected_flips) == (Outcome.ADVANCED, ("1.1",), ())


def test_a_needs_human_session_does_not_credit_its_tick_either() -> None:
    """A HUMAN: line parks the plan; the tick of that session is not credited (the record says NeedsHuman)."""
    v = classify(evidence(flips=(flip(in_session_commits=True),), handoff="HUMAN: which token lifetime?"))
    assert v.outcome is Outcome.NEEDS_HUMAN and v.advanced == () and v.rejected_flips[0].startswith("1.1: the session ended NeedsHuman")
