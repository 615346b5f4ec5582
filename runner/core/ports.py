"""The protocols the local driver and the GitHub driver both implement, each whole: everything the drivers use.

The session loop talks only to these, so the whole loop runs offline. `StateStore` is everything the drivers
ask of a plan's state: the git store (`runner.adapters.store.state.GitStateStore`) and the in-memory one
(`runner.adapters.store.memory.MemoryStateStore`) implement all of it and pass the same contract tests
(tests/integration/test_store_contract.py). `Dispatcher` and `Parker` (publishing: park reports, the finished
plan, the watch view) are implemented by the GitHub driver and the local loop's, checked by one contract
(tests/integration/test_publish_contract.py); no driver probes them for a member.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from runner.core.errors import StateConflict
from runner.core.ledger import Entry, EntrySequence

# (sha or None to delete, ref, expected remote sha or None for absent): a ref update pushed with the state
RefUpdate = tuple[str | None, str, str | None]


@dataclass(frozen=True)
class AppendOptions:
    """How `StateStore.append` writes, beyond the entries and files.

    `snapshot`: the folded state after these entries (`policy.snapshot_json`), stored so the next read need not
    fold the whole ledger. `dirs`: directories kept with the state (the agent's transcripts), each replacing the
    one of the same name; `redact`: byte strings cleared from them before they are stored. `also_push`: other ref
    updates that land atomically with the state on the remote (the work branch). `push=False`: written locally
    only; the next pushed append (or `push_pending`) carries it to the remote.
    """

    snapshot: str | None = None
    dirs: Mapping[str, Path] = field(default_factory=dict)
    redact: tuple[bytes, ...] = ()
    also_push: tuple[RefUpdate, ...] = ()
    push: bool = True


class StateStore(Protocol):
    """The append-only ledger per plan, with compare-and-swap writes; plans never conflict with each other."""

    def read(self, plan_id: str) -> tuple[EntrySequence, str | None]:
        """The plan's ledger and a version token (None if the plan has no state). The ledger carries the stored
        snapshot only when it was folded from exactly these entries."""

    def append(self, plan_id: str, entries: Sequence[Entry], expected_version: str | None,
               files: Mapping[str, bytes] | None = None, options: AppendOptions = AppendOptions()) -> str:
        """Append entries (and write `files`, e.g. the last evidence, under the plan's state) only if the state
        is still at `expected_version`; returns the new version. Raises `StateConflict` when another writer won."""

    def local_version(self, plan_id: str) -> str | None:
        """The version this repository holds now, asking no remote: what a `read` in another process of this
        clone would have left (for two sessions of one plan started at once in one clone)."""

    def read_file(self, plan_id: str, name: str) -> bytes | None:
        """A file kept with the plan's state, or None."""

    def read_dir(self, plan_id: str, name: str, dest: Path) -> None:
        """Write the directory `name` kept with the plan's state into `dest` (created; nothing when absent)."""

    def plans(self) -> list[str]:
        """Ids of every plan that has state."""

    def fetch_also(self, plan_id: str, refspecs: Sequence[str], negotiate: Sequence[str] = ()) -> None:
        """Carry `refspecs` in the same fetch as the plan's state (a store without a remote ignores it)."""

    def fetched_with(self, plan_id: str) -> bool:
        """Whether the plan's last read also fetched the refspecs given to `fetch_also`."""

    def restore_own(self, plan_id: str, expected: str | None, *, remote: bool = True) -> list[str]:
        """Put the plan's state back at `expected` wherever something else moved it; what was moved, in words."""

    def push_pending(self, plan_id: str) -> bool:
        """Push what was written with `push=False`, if anything; True when something was pushed."""

    def defer_pushes(self) -> None:
        """From now on appends are written locally and pushed together by `flush`."""

    def flush(self) -> dict[str, StateConflict]:
        """Push every plan appended to since `defer_pushes`; the plans left out, each with its conflict."""

    def close(self) -> None:
        """Release what the store holds open."""


@runtime_checkable
class Dispatcher(Protocol):
    def dispatch_next(self, plan_path: str, key: str, ref: str | None = None) -> int | None:
        """Start the next session for the plan (locally: nothing, the loop goes on), on `ref` (the branch its
        sessions run on; None: the running job's). Returns the id of the run GitHub started, when it said (None
        locally, or when GitHub answered without run details)."""

    @property
    def dispatched_runs(self) -> Sequence[tuple[str, int, str]]:
        """(ledger key, run id, run URL) of each run a dispatch started, as far as the service said; locally none."""


@runtime_checkable
class Parker(Protocol):
    @property
    def local(self) -> bool:
        """A human answers a park with `plan-runner reply` (locally), not with a comment on the park issue."""

    def open_park(self, plan_id: str, title: str, body: str) -> str | None:
        """Publish a park report (an issue on GitHub, a file locally); returns its URL or path."""

    def open_finish(self, plan_id: str, head: str, base: str, title: str, body: str) -> str | None:
        """Publish the finished plan (a pull request on GitHub, a report file locally)."""

    def update_watch(self, plan_id: str, head: str, base: str, title: str, body: str, state: str | None) -> str | None:
        """Bring the plan's watch view up to date (its pull request on GitHub, as `state`: draft, ready, closed;
        None closes only a run's before a reset). Its URL, or None (locally there is none)."""

    def publish_check(self, check: Any, head_sha: str) -> str | None:
        """The session's verdict on the commit it judged (a check run on GitHub, which a branch rule can require):
        its URL, or None where there is no such thing (locally)."""

    def follow_run(self, run_key: Callable[[], str], reset_note: Callable[[str], str]) -> None:
        """Which run of the plan this job is in (`run_key`), and what heads the watch view of a run before a
        reset (`reset_note(head sha)`); locally nothing follows."""
