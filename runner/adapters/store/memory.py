"""`runner.core.ports.StateStore` in memory: the same contract as the git store (tests/integration/test_store_contract.py),
no repository, no remote. For tests and tools that need a plan's state without git.

Each plan's state is a chain of immutable versions (the ledger's lines, the files, the directories, the snapshot
folded from exactly that ledger); a version token names one. Writes are compare-and-swap on the
plan's current token alone, so plans never conflict with each other, as on the git store. A write that leaves the
ledger longer than the git store's limit compacts it by the same rule (`runner.core.compaction.compact_lines`, with
`runner.adapters.store.layout`'s thresholds, read at each write): the summary names the version it was written on.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from runner.adapters.store import layout
from runner.adapters.store.dirs import bound_dir, redact_file, walk
from runner.adapters.store.layout import check_name
from runner.core.compaction import compact_lines, written_at
from runner.core.errors import PlanRunnerError, StateConflict
from runner.core.ledger import Entry, Ledger, dump_entry
from runner.core.ports import AppendOptions


@dataclass(frozen=True)
class _Version:
    token: str
    ledger: bytes
    files: Mapping[str, bytes] = field(default_factory=dict)
    dirs: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)
    snapshot: str | None = None  # folded from exactly this version's ledger: every append replaces it (or drops it)


class MemoryStateStore:
    """The state of every plan, held by this object (thread-safe)."""

    def __init__(self) -> None:
        self._plans: dict[str, _Version] = {}
        self._lock = threading.Lock()
        self._deferred = False

    def local_version(self, plan_id: str) -> str | None:
        check_name("plan id", plan_id)
        version = self._plans.get(plan_id)
        return None if version is None else version.token

    def read(self, plan_id: str) -> tuple[Ledger, str | None]:
        check_name("plan id", plan_id)
        version = self._plans.get(plan_id)
        if version is None:
            return Ledger(b"", self._corrupt(plan_id)), None
        ledger = Ledger(version.ledger, self._corrupt(plan_id), snapshot=version.snapshot)
        if version.snapshot is None:
            ledger.parse_all()
        return ledger, version.token

    def append(self, plan_id: str, entries: Sequence[Entry], expected_version: str | None,
               files: Mapping[str, bytes] | None = None, options: AppendOptions = AppendOptions()) -> str:
        check_name("plan id", plan_id)
        for name in list(files or {}) + list(options.dirs):
            check_name("file name", name)
        lines = b"".join((dump_entry(e) + "\n").encode() for e in entries)
        dirs = {name: _read_dir(Path(path), options.redact) for name, path in options.dirs.items()}
        with self._lock:
            current = self._plans.get(plan_id)
            token = current.token if current else None
            if token != expected_version:
                raise StateConflict(
                    what=f"the state of plan {plan_id!r} moved since it was read",
                    why=f"expected {expected_version or 'no state'}, found {token or 'no state'}",
                    fix="nothing to do: another job advanced this plan first; re-read the state and yield")
            ledger = self._compacted((current.ledger if current else b"") + lines, plan_id, token,
                                     written_at(entries, datetime.now(timezone.utc)))
            new_token = hashlib.sha1((token or "").encode() + b"\0" + ledger).hexdigest()
            self._plans[plan_id] = _Version(
                token=new_token, ledger=ledger,
                files={**(current.files if current else {}), **(files or {})},
                dirs={**(current.dirs if current else {}), **dirs},
                snapshot=options.snapshot)
            return new_token

    def _compacted(self, ledger: bytes, plan_id: str, token: str | None, at: datetime) -> bytes:
        """`ledger` compacted by the git store's rule and thresholds when it grew past them, else as it is."""
        lines = [line + b"\n" for line in ledger.split(b"\n") if line.strip()]
        kept = compact_lines(lines, lambda cut: list(Ledger(b"".join(lines[:cut]), self._corrupt(plan_id))),
                             longest=layout.COMPACT_AFTER * layout.SEGMENT_ENTRIES,
                             keep=layout.KEEP_SEGMENTS * layout.SEGMENT_ENTRIES, at=at, previous=token or "")
        return ledger if kept is None else b"".join(kept)

    def read_file(self, plan_id: str, name: str) -> bytes | None:
        check_name("plan id", plan_id)
        check_name("file name", name)
        version = self._plans.get(plan_id)
        return version.files.get(name) if version else None

    def read_dir(self, plan_id: str, name: str, dest: Path) -> None:
        check_name("plan id", plan_id)
        check_name("directory name", name)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        version = self._plans.get(plan_id)
        for rel, data in (version.dirs.get(name, {}) if version else {}).items():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def plans(self) -> list[str]:
        return sorted(self._plans)

    # --- the remote's part of the port: there is no remote --------------------------------------------------

    def fetch_also(self, plan_id: str, refspecs: Sequence[str], negotiate: Sequence[str] = ()) -> None:
        """Nothing to fetch: the branches are not carried (`fetched_with` stays False)."""

    def fetched_with(self, plan_id: str) -> bool:
        return False

    def restore_own(self, plan_id: str, expected: str | None, *, remote: bool = True) -> list[str]:
        """Only this store writes its state (nothing shares it with the agent): nothing can have moved it."""
        return []

    def push_pending(self, plan_id: str) -> bool:
        return False

    def defer_pushes(self) -> None:
        self._deferred = True

    def flush(self) -> dict[str, StateConflict]:
        self._deferred = False
        return {}

    def close(self) -> None:
        pass

    def _corrupt(self, plan_id: str):
        def error(number: int, detail: str) -> PlanRunnerError:
            return PlanRunnerError(what=f"the ledger of plan {plan_id!r} is corrupt at line {number}",
                                   why=f"line {number} is not a ledger entry ({detail})",
                                   fix="this store is in memory: report it as a bug of the writer")
        return error


def _read_dir(root: Path, redact: Sequence[bytes]) -> dict[str, bytes]:
    """The files under `root` as stored (bounded and redacted in place, as the git store does)."""
    if not root.is_dir():
        return {}
    if redact:  # whole, before the bound's cut at a line end could split a secret holding a newline
        for _rel, path in walk(root):
            redact_file(path, redact)
    bound_dir(root)
    return {rel: path.read_bytes() for rel, path in walk(root)}
