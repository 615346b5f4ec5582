"""The append-only ledger of one plan: the records the run state is folded from.

One JSON object per line (`ledger/NNNNNN.jsonl` segments on the plan's state ref). Every entry
carries a `type`; unknown fields are rejected so a corrupted ledger is noticed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol, Union, overload, runtime_checkable

from pydantic import Field, TypeAdapter, ValidationError

from runner.core.actions import Blame, NextAction, Outcome, SessionKind
from runner.core.evidence import Hints, Record


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
    ref: str = ""  # on GitHub, the branch the session's workflow ran on: the plan's next runs are dispatched there


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
    cost_lower_bound: bool = False  # the session ended before the backend's final account: at least cost_usd
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
    decided_by: str | None = None  # the name of the policy rule that chose next_action (None: before rule names)


class Advice(Record):
    type: Literal["advice"] = "advice"
    at: datetime
    answer: Literal["retry", "resume", "skip", "human"]
    reason: str
    model: str = ""
    valid: bool = True  # False: the advisor failed or answered outside the vocabulary
    checkpoint: str | None = None
    next_action: NextAction
    applied: bool = True  # False: the answer was not applied (a skip the plan does not let the advisor take alone)


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
    # With confirmed=True: GitHub's answer to the dispatch (`return_run_details`), the run it started. A workflow_run
    # `completed` event for that run that did not succeed names the plan whose session it was (mode reconcile).
    run_id: int | None = None


class Parked(Record):
    type: Literal["park"] = "park"
    at: datetime
    reason: str
    issue_url: str | None = None
    report_path: str | None = None


class Note(Record):
    """A maintainer's note from the plan's watch pull request (`/plan-runner note ...` or a review comment): it
    reaches the next session's prompt, attributed; no park, no budget changes (docs/github-actions.md)."""

    type: Literal["note"] = "note"
    at: datetime
    text: str
    user: str
    source: str = ""  # the comment's URL: a job that runs twice records it once


class Place(Record):
    """The issue a plan talks in on GitHub: the one it was started from (`/plan-runner start`, the start label),
    or the one plan-runner opened for it when it had none. Each session job's progress comment goes there
    (docs/github-actions.md, "Watching a session while it runs"); the latest entry wins."""

    type: Literal["place"] = "place"
    at: datetime
    issue: int
    url: str
    user: str = ""  # who started the plan there ("" for an issue plan-runner opened)


class Finished(Record):
    type: Literal["finish"] = "finish"
    at: datetime
    reason: str
    pull_request_url: str | None = None


class Summary(Record):
    """What compaction kept of the ledger's oldest entries (`runner.core.compaction`): the first entry of a
    compacted ledger, standing for every entry before the ones kept. `state` is the run state folded from them
    (`policy.RunState`, as JSON; `fold` continues from it, so a compacted ledger folds to the state the full one
    did); the rest is what `status`, `logs` and the session tables show of the sessions it stands for."""

    type: Literal["summary"] = "summary"
    at: datetime  # when the compaction was written
    entries: int  # ledger entries it stands for (over every compaction so far)
    previous: str = ""  # the state commit the compaction was written on (its history is not kept)
    began: datetime | None = None  # the time of the ledger's very first entry (the plan's run, `watch.run_key`)
    fold: int  # `policy.FOLD_VERSION` of `state`
    state: dict[str, Any]
    sessions: int = 0  # session records it stands for
    first_session: int | None = None
    last_session: int | None = None
    first_at: datetime | None = None  # when the first of them started
    last_at: datetime | None = None  # when the last of them finished
    outcomes: dict[str, int] = Field(default_factory=dict)  # outcome -> sessions
    credited: tuple[str, ...] = ()  # checkpoints credited (Advanced), in order (bounded: the latest)
    credited_count: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = False  # some session reported its cost
    cost_lower_bound: bool = False  # some session ended before its backend's final account
    seconds: float = 0.0  # sessions' time, summed
    left_out: int = 0  # bytes of texts in `state` and ids in `credited` cut to keep the summary under ENTRY_LIMIT


Entry = Annotated[
    Union[SessionStarted, SessionRecord, Advice, Reply, Note, Place, Dispatched, Parked, Finished, Summary],
    Field(discriminator="type"),
]


@cache
def _entry_adapter() -> TypeAdapter[Entry]:
    """Built on the first parse (about 30 ms: every record's schema): a session that trusts the state's
    snapshot parses no entry at all."""
    return TypeAdapter(Entry)


def parse_entry(line: str) -> Entry:
    return _entry_adapter().validate_json(line)


def dump_entry(entry: Entry) -> str:
    return entry.model_dump_json()


@runtime_checkable
class StoredLedger(Protocol):
    """A ledger as a store hands it over (`ports.StateStore.read`): its entries, fetched and parsed when asked
    for, and `snapshot`, the folded state the store vouches was folded from exactly these entries (None: none)."""

    snapshot: str | None

    def __len__(self) -> int: ...

    def __getitem__(self, index): ...

    def __iter__(self) -> Iterator[Entry]: ...

    def parse_all(self) -> None:
        """Parse (and so check) every entry now."""


class EntrySequence(Sequence):
    """A sequence of entries that fetches each one only when asked for (`_entry(i)`, 0 <= i < len):
    indexing from the end and slices are handled here, once. A `StoredLedger`, with no snapshot unless set."""

    snapshot: str | None = None

    def parse_all(self) -> None:
        for _ in self:
            pass

    def _entry(self, index: int) -> Entry:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> list[Entry]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._entry(index)


class Ledger(EntrySequence):
    """A plan's ledger as read from the state: the raw lines, parsed (and checked) only when asked for.

    With a trusted `snapshot` (the folded state stored with the ledger it was folded from) a
    session reads no entry at all unless it looks back (a few from the end); without one,
    `parse_all` checks every line. `error(line_number, detail)` makes the corrupt-line error.
    """

    def __init__(self, raw: bytes, error: Callable[[int, str], Exception], snapshot: str | None = None) -> None:
        self._lines = [line for line in raw.split(b"\n") if line.strip()]
        self._raw = raw
        self._parsed: dict[int, Entry] = {}
        self._error = error
        self.snapshot = snapshot

    def __len__(self) -> int:
        return len(self._lines)

    def _entry(self, index: int) -> Entry:
        entry = self._parsed.get(index)
        if entry is None:
            entry = self._parsed[index] = self._parse(index)
        return entry

    def __iter__(self) -> Iterator[Entry]:
        return (self[i] for i in range(len(self)))

    def __reversed__(self) -> Iterator[Entry]:
        return (self[i] for i in range(len(self) - 1, -1, -1))

    def __add__(self, other) -> list[Entry]:
        return list(self) + list(other)

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, tuple, Ledger)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ledger({len(self)} entries)"

    def _parse(self, index: int) -> Entry:
        line = self._lines[index].decode("utf-8", "replace")
        try:
            return parse_entry(line)
        except ValidationError as exc:
            first: Mapping[str, Any] = exc.errors()[0] if exc.errors() else {}
            detail = f"{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg', exc)}"
            raise self._error(self._line_number(index), detail) from None

    def _line_number(self, index: int) -> int:
        """The 1-based line in the file (blank lines count, as an editor shows them)."""
        seen = -1
        for number, line in enumerate(self._raw.split(b"\n"), start=1):
            if line.strip():
                seen += 1
                if seen == index:
                    return number
        return index + 1


class SegmentedLedger(Ledger):
    """The ledger kept in segments (files of at most a fixed number of entries): a segment is loaded, split
    and parsed only when an entry in it is asked for, so a session that trusts the stored snapshot and looks
    back a few entries holds the last segment, not the whole past.

    `loaders[i]()` gives segment i's bytes; `sizes` the entries of each (None: every segment is loaded to
    count them); `error_for(i)` makes the corrupt-line error of segment i, `(line_number, detail)`.
    """

    def __init__(self, loaders: Sequence[Callable[[], bytes]], sizes: Sequence[int] | None,
                 error_for: Callable[[int], Callable[[int, str], Exception]], snapshot: str | None = None) -> None:
        self._loaders = list(loaders)
        self._segments: dict[int, tuple[list[bytes], bytes]] = {}
        self._error_for = error_for
        self._parsed: dict[int, Entry] = {}
        self.snapshot = snapshot
        if sizes is None:
            sizes = [len(self._segment(i)[0]) for i in range(len(self._loaders))]
        self._starts = [0]
        for size in sizes:
            self._starts.append(self._starts[-1] + size)

    def _segment(self, i: int) -> tuple[list[bytes], bytes]:
        if i not in self._segments:
            raw = self._loaders[i]()
            self._segments[i] = ([line for line in raw.split(b"\n") if line.strip()], raw)
        return self._segments[i]

    def __len__(self) -> int:
        return self._starts[-1]

    def _parse(self, index: int) -> Entry:
        lo, hi = 0, len(self._starts) - 1  # the segment whose range holds `index` (binary search)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._starts[mid] <= index:
                lo = mid
            else:
                hi = mid
        seg = lo
        lines, raw = self._segment(seg)
        local = index - self._starts[seg]
        if local >= len(lines):
            raise self._error_for(seg)(local + 1, "the segment holds fewer entries than the snapshot counted")
        try:
            return parse_entry(lines[local].decode("utf-8", "replace"))
        except ValidationError as exc:
            first: Mapping[str, Any] = exc.errors()[0] if exc.errors() else {}
            detail = f"{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg', exc)}"
            raise self._error_for(seg)(_line_number(raw, local), detail) from None


def _line_number(raw: bytes, index: int) -> int:
    seen = -1
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if line.strip():
            seen += 1
            if seen == index:
                return number
    return index + 1
