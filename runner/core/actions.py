"""Outcomes, verdicts and next actions: the values the pure core produces.

Decide, then do: `runner.core.policy` returns a `NextAction`; one place applies it.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Literal, Union

from pydantic import Field

from runner.core.evidence import Record


class Outcome(str, Enum):
    NEEDS_HUMAN = "NeedsHuman"
    LIMIT_BACKOFF = "LimitBackoff"
    ROLLED_OVER = "RolledOver"
    STALLED = "Stalled"
    TIMED_OUT = "TimedOut"
    AGENT_ERROR = "AgentError"
    GATES_RED = "GatesRed"
    ADVANCED = "Advanced"
    PROGRESS = "Progress"
    NO_PROGRESS = "NoProgress"
    # Not in the classification table: recorded when plan-runner itself was stopped mid-session
    # (Ctrl-C, SIGTERM, its own failure). No blame; no attempt, resume or backoff budget burned.
    INTERRUPTED = "Interrupted"
    # Not in the table either: plan-runner itself failed mid-session (an unexpected error: a bug of plan-runner's,
    # not the agent's, the plan's or the environment's). Recorded with the error and where to report it; no
    # blame, no budget burned, the same session runs again, as after an interruption.
    CRASHED = "Crashed"


class Blame(str, Enum):
    AGENT = "agent"
    ENVIRONMENT = "environment"
    NONE = "none"


class Verdict(Record):
    """The classified outcome of one session, with the reasons a report shows."""

    outcome: Outcome
    blame: Blame
    rule: int  # row of the outcome table (the README, "How a session is judged") that matched
    reasons: tuple[str, ...]
    observed_at: datetime
    fingerprint: str | None = None  # failure fingerprint for the circuit breaker
    transient: bool = False  # LimitBackoff from a transient error (short backoff)
    reset_at: datetime | None = None  # LimitBackoff: when the backend said the limit ends
    advanced: tuple[str, ...] = ()  # checkpoints genuinely flipped to DONE
    rejected_flips: tuple[str, ...] = ()  # "1.2: why" for flips that are reverted
    zero_output: bool = False  # Stalled/TimedOut with no output at all
    agent_session_id: str | None = None
    all_failed: bool = False  # every step of the session failed: report from errors only


class SessionKind(str, Enum):
    DELIVERY = "delivery"  # work on the next checkpoint
    FIX_GATES = "fix-gates"  # after GatesRed: failing gate output embedded
    FIX_NO_PROGRESS = "fix-no-progress"  # after NoProgress
    FIX_ERROR = "fix-error"  # after AgentError: the error embedded
    RESUME = "resume"  # continue the same agent session after a stall / time limit
    HANDOFF = "handoff"  # fresh session after a rollover, with the handoff


class RunSession(Record):
    action: Literal["run"] = "run"
    kind: SessionKind
    checkpoint: str | None
    reason: str
    resume_session_id: str | None = None
    instructions: str | None = None  # a human's text from a park reply


class Wait(Record):
    action: Literal["wait"] = "wait"
    until: datetime
    then: RunSession
    reason: str


class ConsultAdvisor(Record):
    action: Literal["advise"] = "advise"
    reason: str
    checkpoint: str | None = None


class Park(Record):
    action: Literal["park"] = "park"
    reason: str
    details: tuple[str, ...] = ()


class Finish(Record):
    action: Literal["finish"] = "finish"
    reason: str


NextAction = Annotated[Union[RunSession, Wait, ConsultAdvisor, Park, Finish], Field(discriminator="action")]


def describe(action: RunSession | Wait | ConsultAdvisor | Park | Finish) -> str:
    """One line for terminals, summaries and step outputs."""
    if isinstance(action, RunSession):
        target = f" on {action.checkpoint}" if action.checkpoint else ""
        resume = f" (agent session {action.resume_session_id})" if action.resume_session_id else ""
        return f"run a {action.kind.value} session{target}{resume}"
    if isinstance(action, Wait):
        return f"wait until {action.until.isoformat(timespec='seconds')}, then {describe(action.then)}"
    if isinstance(action, ConsultAdvisor):
        return f"consult the advisor: {action.reason}"
    if isinstance(action, Park):
        return f"park for a human: {action.reason}"
    return f"finish: {action.reason}"


def short(action: RunSession | Wait | ConsultAdvisor | Park | Finish) -> str:
    """A few words for narrow table columns."""
    if isinstance(action, RunSession):
        return f"{action.kind.value} {action.checkpoint or ''}".strip()
    if isinstance(action, Wait):
        return f"wait, then {short(action.then)}"
    return {"advise": "ask advisor", "park": "park", "finish": "finish"}[action.action]
