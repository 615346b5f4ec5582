"""The layout of a plan's state: its ref, the names it accepts, and the tree of a state commit::

    ledger/000000.jsonl  the ledger: one `runner.core.ledger` entry per line, in segments of SEGMENT_ENTRIES
    ledger/000001.jsonl  entries (all full but the last, so a write rewrites the last one only and a
    ...                  read that trusts the snapshot loads the last one only); at most COMPACT_AFTER
                         segments: a write that makes more compacts the ledger (see `compact`)
    snapshot.json     the folded run state after the last entry, and the segments' tree it was folded from
    files/<name>      kept with the state, e.g. the last evidence
    <dir>/...         a directory kept with the state (runner.adapters.store.dirs)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from git.exc import GitCommandError

from runner.adapters.git.invoke import run_git
from runner.adapters.store.objects import BLOB_MODE, TREE_MODE, GitObjects, Tree
from runner.core.compaction import compact_lines, summarize
from runner.core.errors import PlanRunnerError
from runner.core.ledger import Ledger, SegmentedLedger, Summary, parse_entry

NAMESPACE = "refs/plan-runner/state"
TRACKING = "refs/plan-runner/remote-state"  # + /<remote>/<plan_id>
BACKUP = "refs/plan-runner/backup"  # + /<plan>/<UTC time>/{state,branch}: what `plan-runner reset` kept
LEDGER_DIR = "ledger"  # the ledger in segments: ledger/000000.jsonl, ledger/000001.jsonl, ...
SEGMENT_ENTRIES = 256  # entries per segment; every segment but the last is full
COMPACT_AFTER = 8  # segments: a write that leaves more compacts the ledger
KEEP_SEGMENTS = 2  # a compaction keeps the latest KEEP_SEGMENTS * SEGMENT_ENTRIES entries as they were
SEGMENT_NAME = re.compile(r"[0-9]{6}\.jsonl")
SNAPSHOT = "snapshot.json"
FILES = "files"
ZERO = "0" * 40


def check_name(kind: str, name: str) -> None:
    if (not name or name in (".", "..", ".git") or any(c in name for c in "/\\\0\n*?[:~^ ")
            or name != name.strip() or name.endswith(".lock") or ".." in name or name.startswith("-")):
        raise PlanRunnerError(
            what=f"{kind} {name!r} cannot be stored in the plan's state",
            why=f"a {kind} becomes one git ref or file name: no slashes, spaces, newlines, '..', "
                "glob characters, '.', '.git' or a '.lock' ending",
            fix=f"use a plain name such as the plan file's stem (e.g. 'add-auth') for the {kind}",
        )


def state_ref(plan_id: str) -> str:
    return f"{NAMESPACE}/{plan_id}"


def corrupt(plan_id: str, path: str) -> Callable[[int, str], PlanRunnerError]:
    """The error for a line of the ledger that is not an entry: `(line_number, detail) -> error`."""
    ref = state_ref(plan_id)

    def error(number: int, detail: str) -> PlanRunnerError:
        return PlanRunnerError(
            what=f"the ledger of plan {plan_id!r} is corrupt at line {number} of {path}",
            why=f"{ref}:{path} line {number} is not a ledger entry ({detail})",
            fix=f"inspect it with `git show {ref}:{path}`; correct or delete line {number} and commit "
                f"that onto {ref} (push it if there is a remote), then run again",
        )
    return error


# --- the ledger in segments ---------------------------------------------------------------------------------


def segments(objects: GitObjects, plan_id: str, entry: tuple[int, str]) -> list[tuple[str, str]]:
    """(name, blob sha) of every segment in order; a clear error for anything that is not one."""
    mode, sha = entry
    names = objects.tree(sha) if mode == TREE_MODE else None
    bad = ["(not a folder)"] if names is None else [
        n for n, (m, _) in names.items() if m != BLOB_MODE or not SEGMENT_NAME.fullmatch(n)]
    ordered = sorted(names or {})
    if not bad and ordered != [f"{i:06d}.jsonl" for i in range(len(ordered))]:
        bad = ["(numbers with a gap)"]
    if bad:
        ref = state_ref(plan_id)
        raise PlanRunnerError(
            what=f"the ledger of plan {plan_id!r} is corrupt: {LEDGER_DIR}/ holds {', '.join(bad[:3])}",
            why=f"{ref}:{LEDGER_DIR}/ must hold only the segments 000000.jsonl, 000001.jsonl, ... in sequence",
            fix=f"inspect it with `git ls-tree {ref}:{LEDGER_DIR}`; restore the missing or misnamed segment "
                f"and commit that onto {ref} (push it if there is a remote), then run again")
    return [(n, names[n][1]) for n in ordered]  # type: ignore[index]


def read_ledger(objects: GitObjects, plan_id: str, tree: Tree) -> Ledger:
    """The ledger of a state commit's tree, with its snapshot when the snapshot was folded from exactly it."""
    if LEDGER_DIR not in tree:
        return Ledger(b"", corrupt(plan_id, LEDGER_DIR))
    entry = tree[LEDGER_DIR]
    snapshot_sha = tree.get(SNAPSHOT, (0, None))[1]
    parts = segments(objects, plan_id, entry)
    def loader(sha: str) -> Callable[[], bytes]:
        return lambda: objects.get(sha, b"blob") or b""

    loaders = [loader(sha) for _, sha in parts]
    sizes = snapshot = None
    if snapshot_sha and parts:
        data = objects.get(snapshot_sha, b"blob")
        try:
            snap = json.loads(data or b"")
            last_raw = loaders[-1]()  # the only segment read: every other one is full
            loaders[-1] = lambda: last_raw
            last = last_raw.count(b"\n")
            count = (len(parts) - 1) * SEGMENT_ENTRIES + last
            if (isinstance(snap, dict) and snap.get("ledger") == entry[1] and snap.get("entries") == count
                    and snap.get("segment") == SEGMENT_ENTRIES):
                sizes = [SEGMENT_ENTRIES] * (len(parts) - 1) + [last]
                snapshot = json.dumps(snap["state"])
        except (ValueError, KeyError, TypeError):
            sizes = snapshot = None
    names = [name for name, _ in parts]
    ledger = SegmentedLedger(loaders, sizes, lambda i: corrupt(plan_id, f"{LEDGER_DIR}/{names[i]}"),
                             snapshot=snapshot)
    if snapshot is None:
        ledger.parse_all()  # no trusted fold to start from: every entry is read (and checked) now
    return ledger


def append_segments(objects: GitObjects, plan_id: str, plan: Tree, lines: list[bytes]) -> tuple[str, int]:
    """Append `lines` to the plan's ledger in segments (in place in `plan`); returns the segments' tree sha
    and the number of entries. Only the last segment is read and rewritten (and the ones the new lines
    open): git keeps every full segment as it is."""
    found: dict[str, tuple[int, str]] = {}
    if LEDGER_DIR in plan:
        ordered = segments(objects, plan_id, plan[LEDGER_DIR])
        found = {name: (BLOB_MODE, sha) for name, sha in ordered}
        raw = objects.get(ordered[-1][1], b"blob") or b"" if ordered else b""
        tail = [line + b"\n" for line in raw.split(b"\n") if line.strip()]
        first = max(0, len(ordered) - 1)
        before = _counted(objects, plan, plan[LEDGER_DIR][1], ordered) - len(tail)
    else:
        tail, first, before = [], 0, 0
    tail += lines
    for i in range(0, max(len(tail), 1), SEGMENT_ENTRIES):
        chunk = tail[i:i + SEGMENT_ENTRIES]
        found[f"{first + i // SEGMENT_ENTRIES:06d}.jsonl"] = (BLOB_MODE, objects.store(b"blob", b"".join(chunk)))
    sha = objects.write_tree(found)
    plan[LEDGER_DIR] = (TREE_MODE, sha)
    return sha, before + len(tail)


def compact(objects: GitObjects, plan_id: str, plan: Tree, count: int, *, previous: str | None,
            at: datetime) -> tuple[str, int] | None:
    """When the ledger of `count` entries is longer than COMPACT_AFTER segments: fold its oldest entries (all but
    the latest KEEP_SEGMENTS segments' worth, with any earlier summary) into one `Summary`
    (`runner.core.compaction`), in place in `plan`; returns the segments' tree sha and the number of entries
    (None: too short to compact). The kept entries stay byte for byte as they were. `previous`: the state commit this is written on
    (the compacted state commit has no parent: the ref's history stays as bounded as its tree)."""
    if count <= COMPACT_AFTER * SEGMENT_ENTRIES:
        return None
    ordered = segments(objects, plan_id, plan[LEDGER_DIR])
    raws = [objects.get(sha, b"blob") or b"" for _, sha in ordered]
    lines = [line + b"\n" for raw in raws for line in raw.split(b"\n") if line.strip()]
    names = [name for name, _ in ordered]
    ledger = SegmentedLedger([_given(raw) for raw in raws], None,
                             lambda i: corrupt(plan_id, f"{LEDGER_DIR}/{names[i]}"))
    kept = compact_lines(lines, lambda cut: ledger[:cut], longest=COMPACT_AFTER * SEGMENT_ENTRIES,
                         keep=KEEP_SEGMENTS * SEGMENT_ENTRIES, at=at, previous=previous or "")
    if kept is None:
        return None
    found: Tree = {}
    for i in range(0, len(kept), SEGMENT_ENTRIES):
        found[f"{i // SEGMENT_ENTRIES:06d}.jsonl"] = (BLOB_MODE, objects.store(b"blob", b"".join(kept[i:i + SEGMENT_ENTRIES])))
    sha = objects.write_tree(found)
    plan[LEDGER_DIR] = (TREE_MODE, sha)
    return sha, len(kept)


def _given(raw: bytes) -> Callable[[], bytes]:
    return lambda: raw


def compacted_from(objects: GitObjects, tree: Tree) -> str | None:
    """The state commit a compacted state commit (tree `tree`) was written on, as its summary names it (None:
    the ledger does not start with a summary)."""
    summary = _first_summary(objects, tree)
    return summary.get("previous") or None if summary is not None else None


def _first_summary(objects: GitObjects, tree: Tree) -> dict | None:
    if LEDGER_DIR not in tree:
        return None
    first = objects.tree(tree[LEDGER_DIR][1]).get(f"{0:06d}.jsonl")
    raw = objects.get(first[1], b"blob") if first else None
    try:
        entry = json.loads((raw or b"").split(b"\n", 1)[0] or b"null")
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and entry.get("type") == "summary" else None


def _all_lines(objects: GitObjects, tree: Tree) -> list[bytes]:
    return [line for _, sha in segments(objects, "?", tree[LEDGER_DIR])
            for line in (objects.get(sha, b"blob") or b"").split(b"\n") if line.strip()]


def _compacts(objects: GitObjects, new: Tree, old: Tree) -> bool:
    """The ledger in `new` is the one in `old` compacted (its oldest entries in `new`'s summary, exactly the one
    `summarize` makes of them, the rest kept as they were), with entries appended."""
    summary, was = _first_summary(objects, new), _first_summary(objects, old)
    if summary is None or summary == was:
        return False
    try:
        dropped = int(summary["entries"]) - (int(was["entries"]) if was is not None else 0)
    except (KeyError, TypeError, ValueError):
        return False
    now, before = _all_lines(objects, new), _all_lines(objects, old)
    k = dropped + (1 if was is not None else 0)  # the old ledger's lines the summary stands for
    if not (0 < k <= len(before) and now[1:1 + len(before) - k] == before[k:]):
        return False
    # ... and the summary is the one plan-runner writes for those lines: one that lies (no session run, nothing
    # spent, every budget fresh) while keeping the rest is the agent's forgery, whoever pushed it
    try:
        claimed = parse_entry(now[0].decode())
        if not isinstance(claimed, Summary):
            return False
        honest = summarize([parse_entry(line.decode()) for line in before[:k]], at=claimed.at, previous=claimed.previous)
    except ValueError:  # a line that is no entry (pydantic's ValidationError, UnicodeDecodeError are ValueErrors)
        return False
    return claimed == honest


def _counted(objects: GitObjects, plan: Tree, ledger_sha: str, ordered: list[tuple[str, str]]) -> int:
    """The entries in the segments: from the stored snapshot when it was written for them, else counted."""
    snap_entry = plan.get(SNAPSHOT)
    if snap_entry is not None:
        try:
            snap = json.loads(objects.get(snap_entry[1], b"blob") or b"")
            if snap.get("ledger") == ledger_sha and snap.get("segment") == SEGMENT_ENTRIES:
                return int(snap["entries"])
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    return sum((objects.get(sha, b"blob") or b"").count(b"\n") for _, sha in ordered)


def snapshot_blob(snapshot: str, ledger_sha: str, count: int) -> bytes:
    """`snapshot.json`: the folded state and the segments' tree (and entry count) it was folded from."""
    return json.dumps({"entries": count, "ledger": ledger_sha, "segment": SEGMENT_ENTRIES,
                       "state": json.loads(snapshot)}, separators=(",", ":"), sort_keys=True).encode()


def ledger_extends(objects: GitObjects, new: Tree, old: Tree) -> bool:
    """The ledger in tree `new` is the one in `old` with entries appended (compares segment shas, reads two),
    or compacted with entries appended (reads both whole: only a write that compacts does that)."""
    if LEDGER_DIR not in new or LEDGER_DIR not in old:
        return False
    try:
        if _compacts(objects, new, old):
            return True
        now, was = dict(segments(objects, "?", new[LEDGER_DIR])), segments(objects, "?", old[LEDGER_DIR])
    except PlanRunnerError:
        return False
    if not was:
        return True
    *full, (last, last_sha) = was
    if any(now.get(name) != sha for name, sha in full) or last not in now:
        return False
    return (objects.get(now[last], b"blob") or b"").startswith(objects.get(last_sha, b"blob") or b"")


def ledger_text(repo: Path | str, rev: str) -> str:
    """The whole ledger at `rev` (a plan's state commit) as one text; '' when there is none.
    For tools and tests that read it with git, outside a store."""
    try:
        listing = run_git(repo, "ls-tree", "-z", rev, "--", LEDGER_DIR + "/").decode()
    except GitCommandError:
        return ""
    names = sorted(item.split("\t", 1)[1] for item in listing.split("\0") if "\t" in item)
    return "".join(run_git(repo, "cat-file", "blob", f"{rev}:{name}").decode("utf-8", "replace") for name in names)
