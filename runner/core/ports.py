"""The small protocols the local driver and the GitHub driver both implement.

The session loop talks only to these, so the whole loop runs offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from runner.core.ledger import Entry


class StateStore(Protocol):
    """The append-only ledger per plan, with compare-and-swap writes."""

    def read(self, plan_id: str) -> tuple[list[Entry], str | None]:
        """The plan's ledger and a version token (the state ref's sha; None if absent)."""

    def append(self, plan_id: str, entries: Sequence[Entry], expected_version: str | None,
               files: dict[str, bytes] | None = None) -> str:
        """Append entries (and write extra files, e.g. transcripts, under the plan's folder)
        only if the state is still at `expected_version`; returns the new version.
        Raises `runner.core.errors.StateConflict` when another writer won."""

    def read_file(self, plan_id: str, name: str) -> bytes | None:
        """A file kept with the plan's state (e.g. a transcript), or None."""

    def plans(self) -> list[str]:
        """Ids of every plan that has state."""


class Dispatcher(Protocol):
    def dispatch_next(self, plan_path: str, key: str) -> None:
        """Start the next session for the plan (locally: nothing, the loop goes on)."""


class Parker(Protocol):
    def open_park(self, plan_id: str, title: str, body: str) -> str | None:
        """Publish a park report (an issue on GitHub, a file locally); returns its URL or path."""

    def open_finish(self, plan_id: str, head: str, base: str, title: str, body: str) -> str | None:
        """Publish the finished plan (a pull request on GitHub, a report file locally)."""
