"""The append-only ledger of one plan: the records the run state is folded from.

One JSON object per line (`ledger.jsonl` on the state branch). Every entry
carries a `type`; unknown fields are rejected so a corrupted ledger is noticed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter

from runner.actions import Blame, NextAction, Outcome, SessionKind
from runner.evidence import Hints, Record


class GateSummary(Record):
    name: str
    required: bool
    passed: bool
    duration_s: float = 0.0
    fingerprint: str = ""


class SessionStarted(Record):
    """Written before the agent runs, so a killed job leaves a trace."""

    type: Literal["started"] = "started"
    n: int
    kind: SessionKind
    checkpoint: str | None
    started_at: datetime
    base_sha: str
    job: str = ""  # e.g. the Actions run id, or "local:<pid>"
    resume_session_id: str | None = None


class SessionRecord(Record):
    """One finished (or reconciled) session: its verdict and the decision taken."""

    type: Literal["session"] = "session"
    n: int
    kind: SessionKind
    checkpoint: str | None
    stage: int | None = None
    started_at: datetime
    finished_at: datetime
    outcome: Outcome
    blame: Blame
    rule: int
    reasons: tuple[str, ...] = ()
    fingerprint: str | None = None
    zero_output: bool = False
    advanced: tuple[str, ...] = ()
    rejected_flips: tuple[str, ...] = ()
    agent_session_id: str | None = None
    backend: str = ""
    tokens: int = 0
    cost_usd: float | None = None
    base_sha: str = ""
    head_sha: str = ""
    work_commits: int = 0
    gates: tuple[GateSummary, ...] = ()
    hints: Hints = Field(default_factory=Hints)
    reconciled: bool = False  # classified after the job that ran it died
    resume_session_id: str | None = None  # the agent session this one resumed
    instructions: str | None = None  # a human's instruction this session was given
    # None only transiently, while the policy folds the record to decide it
    next_action: NextAction | None = None


class Advice(Record):
    type: Literal["advice"] = "advice"
    at: datetime
    answer: Literal["retry", "resume", "skip", "human"]
    reason: str
    model: str = ""
    valid: bool = True  # False: the advisor failed or answered outside the vocabulary
    checkpoint: str | None = None
    next_action: NextAction


class Reply(Record):
    """A human's instruction from a park issue (or the local CLI)."""

    type: Literal["reply"] = "reply"
    at: datetime
    command: Literal["resume", "retry", "skip", "stop"]
    text: str = ""
    user: str = ""
    source: str = ""  # e.g. the comment URL
    next_action: NextAction


class Dispatched(Record):
    """A workflow run was (about to be) dispatched for session `for_session`."""

    type: Literal["dispatch"] = "dispatch"
    at: datetime
    for_session: int
    key: str  # idempotency key: plan id + session number
    confirmed: bool = False  # False: intent recorded, the API call not yet confirmed


class Parked(Record):
    type: Literal["park"] = "park"
    at: datetime
    reason: str
    issue_url: str | None = None
    report_path: str | None = None


class Finished(Record):
    type: Literal["finish"] = "finish"
    at: datetime
    reason: str
    pull_request_url: str | None = None


Entry = Annotated[
    Union[SessionStarted, SessionRecord, Advice, Reply, Dispatched, Parked, Finished],
    Field(discriminator="type"),
]
_ENTRY = TypeAdapter(Entry)


def parse_entry(line: str) -> Entry:
    return _ENTRY.validate_json(line)


def dump_entry(entry: Entry) -> str:
    return entry.model_dump_json()
