"""Frozen records of what one session left behind.

Everything here is data: the collectors (gates, git, backends) fill it in, the
pure core (`runner.core.outcome`, `runner.core.policy`) reads it. The observation time is
a field; nothing in the core reads a clock.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    """Base for every record: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def evolve(self, **changes: object) -> Self:
        """A copy with `changes` applied; a name that is not a field is an error (a misspelt field
        given to pydantic's `model_copy(update=...)` would silently become an extra attribute)."""
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(unknown)}; "
                            f"its fields are {', '.join(type(self).model_fields)}")
        return self.model_copy(update=changes)


class CheckpointState(str, Enum):
    TODO = "TODO"
    DONE = "DONE"
    BLOCKED = "BLOCKED"


class GateResult(Record):
    """One gate, re-run by plan-runner itself."""

    name: str
    required: bool = True
    kind: str = "command"  # command | http | checks
    passed: bool
    exit_code: int | None = None
    http_status: int | None = None
    duration_s: float = 0.0
    output_tail: str = ""  # bounded tail of stdout+stderr (or the HTTP body)
    fingerprint: str = ""  # stable across runs: volatile parts normalised away
    timed_out: bool = False
    reran: bool = False  # a required gate that failed was run a second time
    flaky: bool = False  # failed once, passed on the re-run
    cached: bool = False  # result reused: same tree hash and gate definition
    error: str | None = None  # could not run at all (bad command, connection refused)
    # The gate cannot be decided until a person acts (e.g. CI that a GITHUB_TOKEN push never starts): the
    # session parks NeedsHuman, blaming nobody, instead of counting the gate red.
    needs_human: str | None = None
    # The command cannot start on the maintainer's base commit either (exit 126/127, or a `setup:` command
    # that fails there too): a set-up problem of the plan, not the agent's failure. What to fix.
    setup_problem: str | None = None
    # Red on a fresh checkout of the base commit too, before any work of the agent (the session began there):
    # either the plan's work to do (a failing test to make pass) or a set-up problem (`setup:` does not install
    # what the gate runs); one session cannot tell which, so the agent is not blamed for it (outcome rule 8).
    red_on_base: str | None = None


class CommitInfo(Record):
    sha: str
    summary: str
    author: str = ""
    files: tuple[str, ...] = ()
    counts_as_work: bool = True  # False when it touches only plan/tracker/handoff
    wip: bool = False  # plan-runner committed the agent's uncommitted leftovers


class Flip(Record):
    """A checkpoint whose state differs between the session base and the head."""

    checkpoint_id: str
    before: CheckpointState | None  # None: the checkpoint did not exist before
    after: CheckpointState | None  # None: the checkpoint was removed
    in_session_commits: bool = True  # the change is in this session's commits
    verify_passed: bool | None = None  # the checkpoint's own verify: (None: has none / not run)
    verify_output: str = ""


class ExitKind(str, Enum):
    """How the backend's process ended, as the supervisor and parser saw it."""

    FINISHED = "finished"  # the process ended by itself (says nothing about success)
    STALLED = "stalled"  # no output for stall_minutes; killed
    TIME_LIMIT = "time_limit"  # time_limit_minutes hit; killed
    RATE_LIMIT = "rate_limit"  # rate/usage limit reported by the backend
    TRANSIENT = "transient"  # 5xx, overloaded, network error
    TOKEN_BUDGET = "token_budget"  # session_tokens reached; stopped
    AUTH = "auth"  # authentication or billing failure
    CRASHED = "crashed"  # anything else: non-zero exit, error result, unparsable output


class Hints(Record):
    """What the model said about itself, normalised. Shown, never decisive."""

    claimed_done: bool | None = None
    stop_reason: str | None = None
    result_subtype: str | None = None
    is_error: bool | None = None
    empty_output: bool = False
    empty_plan: bool = False
    final_text: str = ""  # bounded
    claims: tuple[str, ...] = ()  # e.g. "all tests pass" found in the text


class SessionSignals(Record):
    """The backend's account of the process, normalised across backends."""

    backend: str
    exit_kind: ExitKind
    exit_code: int | None = None
    agent_session_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None  # the meter's last reading, however the session ended
    cost_estimated: bool = False  # from a price table, not the backend's own figure
    cost_lower_bound: bool = False  # the session ended before the backend's final account: at least this much
    reset_at: datetime | None = None  # when a rate limit ends, if the backend said
    error: str | None = None  # normalised error text (for the fingerprint)
    # how much the agent's work printed (a CLI's own start-up and retry lines are not work); 0 makes a
    # zero-output stall
    output_bytes: int = 0
    nudges: int = 0  # 80 % nudges delivered
    tool_calls: int = 0
    tool_failures: int = 0
    last_tool: str | None = None
    duration_s: float = 0.0
    hints: Hints = Field(default_factory=Hints)
    # what of the backend's usage report was not recorded as reported (runner.core.bounds.bound_cost, bound_count)
    usage_notes: tuple[str, ...] = ()


class Evidence(Record):
    """Everything the verdict may use, for one session."""

    plan_id: str
    session_number: int
    session_kind: str
    started_at: datetime
    observed_at: datetime
    base_sha: str
    head_sha: str
    commits: tuple[CommitInfo, ...] = ()
    commits_left_out: int = 0  # commits past runner.core.bounds.COMMIT_LIMIT, not listed (the work ones listed first)
    flips: tuple[Flip, ...] = ()
    tampering: tuple[str, ...] = ()  # human-readable: what protected file the agent changed
    deleted_tests: tuple[str, ...] = ()  # test files the session deleted: reported, a human judges
    # files where the session's commits add the value of a known secret (the paths, never the value);
    # nothing of such a session is pushed
    leaked_secrets: tuple[str, ...] = ()
    # work commits of the sessions just before this one on the same checkpoint since the last Advanced (cut
    # short, judged red by a gate that was broken, Progress not ticked then): no verdict credited them to a
    # checkpoint, so they back this session's flips (judged with this session's gates, on its head)
    carried_commits: tuple[CommitInfo, ...] = ()
    gates: tuple[GateResult, ...] = ()
    signals: SessionSignals
    handoff: str | None = None
    next_checkpoint: str | None = None  # the checkpoint the session was asked to do
    token_budget: int | None = None  # the plan's session_tokens: usage past it rolls the session over (row 4)

    @property
    def work_commits(self) -> tuple[CommitInfo, ...]:
        """This session's own work commits."""
        return tuple(c for c in self.commits if c.counts_as_work and not c.wip)

    @property
    def carried_work(self) -> tuple[CommitInfo, ...]:
        return tuple(c for c in self.carried_commits if c.counts_as_work and not c.wip)

    @property
    def credited_work(self) -> tuple[CommitInfo, ...]:
        """The work a verdict on this session judges: its own, and the interrupted sessions' before it."""
        return self.carried_work + self.work_commits

    @property
    def setup_problems(self) -> tuple[str, ...]:
        """Set-up problems: required gates (and `setup:` commands) that cannot start on the base commit either."""
        return tuple(f"{g.name}: {g.setup_problem}" for g in self.gates if g.required and g.setup_problem)

    @property
    def required_gates(self) -> tuple[GateResult, ...]:
        return tuple(g for g in self.gates if g.required)

    @property
    def gates_green(self) -> bool:
        return all(g.passed for g in self.required_gates)
