"""The run state in git: one state ref per plan, each with its own append-only ledger.

Every plan's state lives on a ref of its own, `refs/plan-runner/state/<plan_id>`,
outside `refs/heads/`, so no work branch can collide with it (plan ids have no
slash, so `a/b` against `a/b/c` cannot happen inside the namespace either). The
tree of a plan's state commit::

    ledger/000000.jsonl  the ledger: one `runner.core.ledger` entry per line, in segments of SEGMENT_ENTRIES
    ledger/000001.jsonl  entries (all full but the last, so a write rewrites the last one only and a
    ...                  read that trusts the snapshot loads the last one only); `ledger.jsonl`, the
                         whole ledger in one blob as before segments, is read and split on the next write
    snapshot.json     the folded run state after the last entry, and the ledger blob it was folded from
    files/<name>      kept with the state, e.g. the last evidence
    <dir>/...         a directory kept with the state (the agent's transcripts): a git tree, so
                      a file that did not change since the last session is not stored again

Writes use plumbing only, so the user's work tree and index are never touched:
blobs, trees and commits are stored as loose objects by GitPython's object
database (gitdb) and the ref moves with `git update-ref`. Every write is a
compare-and-swap on the plan's ref alone: locally `update-ref <ref> <new>
<expected>`, on the remote a push with `--force-with-lease=<ref>:<expected>`
(atomic with any other ref the caller pushes with it). A conflict therefore
always means another job advanced *this* plan; plans never conflict with each
other. Reads go ref -> tree -> blob through one long-lived `git cat-file --batch`
and never walk history.

`plans()` (status, tick) fetches every plan's ref with one glob refspec; the
reads that follow in the same process need no fetch of their own.

A repository that still has the pre-0.x state branch `plan-runner/state` (one
folder per plan) is migrated on first use: each folder becomes that plan's
ref, the old branch is kept as `refs/plan-runner/legacy-state`, and on a remote
this happens in one atomic push, so nothing is lost and two jobs migrating at
once cannot both win.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import zlib
from collections.abc import Callable, Sequence
from io import BytesIO
from pathlib import Path

from git.exc import GitCommandError
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb.base import IStream
from gitdb.db.loose import LooseObjectDB
from runner.core.errors import PlanRunnerError, StateConflict
from runner.adapters.git.work import (
    BOT_EMAIL, BOT_NAME, CatFile, cat_file, close_cat_file, objects_dir, push_leased, ref_sha, remotes, run_git,
    stderr_of,
)
from runner.core.ledger import Entry, Ledger, SegmentedLedger, dump_entry

NAMESPACE = "refs/plan-runner/state"
TRACKING = "refs/plan-runner/remote-state"  # + /<remote>/<plan_id>
LEGACY_BRANCH = "plan-runner/state"
LEGACY_REF = f"refs/heads/{LEGACY_BRANCH}"
LEGACY_KEPT = "refs/plan-runner/legacy-state"
LEDGER = "ledger.jsonl"  # the ledger in one blob: the format before segments, still read (migrated on write)
LEDGER_DIR = "ledger"  # the ledger in segments: ledger/000000.jsonl, ledger/000001.jsonl, ...
SEGMENT_ENTRIES = 256  # entries per segment; every segment but the last is full
_SEGMENT_NAME = re.compile(r"[0-9]{6}\.jsonl")
SNAPSHOT = "snapshot.json"
FILES = "files"
DIR_LIMIT = 16 * 2**20  # bytes kept per directory (transcripts) per plan, in total
BLOCKED_FROM = 2**20  # a kept file bigger than this is stored as blocks (see `_blocks`)
BLOCK_AVG, BLOCK_MAX = 512 * 2**10, 4 * 2**20
BLOCKS_SUFFIX = ".plan-runner-blocks"
_TREE_MODE = 0o040000
_BLOB_MODE = 0o100644
_ZERO = "0" * 40
_CHUNK = 1 << 20


def _check_name(kind: str, name: str) -> None:
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




class GitStateStore:
    """`runner.core.ports.StateStore` on one git ref per plan, with or without a remote."""

    def __init__(self, repo_path: Path, remote: str | None = "origin") -> None:
        self.repo = Path(repo_path)
        try:
            configured = remotes(self.repo)
        except GitCommandError as exc:
            raise PlanRunnerError(
                what=f"{self.repo} is not a git repository plan-runner can keep state in",
                why=stderr_of(exc),
                fix="run plan-runner inside a git clone (`git init` for a new project)",
            ) from None
        # "origin" is the default; a repository without it works locally (section 7).
        self.remote = remote if remote in configured else None
        self._odb: LooseObjectDB | None = None
        self._deferred: dict[str, str | None] | None = None  # plan -> remote lease, while pushes are deferred
        self._known: dict[str, str | None] = {}  # plan -> its remote state as this process last fetched or pushed it
        self._fresh: set[str] = set()  # plans whose tracking ref was fetched by this process and not lost since
        self._extra: dict[str, tuple[list[str], list[str]]] = {}  # plan -> (refspecs, negotiation tips) fetched with it
        self.fetched_with: set[str] = set()  # plans whose last fetch carried their extra refspecs
        self._migrated = False
        self._legacy_fetched = False
        # restored files: size, mtime, sha (blob, or tree of blocks), the block shas (None for a blob)
        self._dirs: dict[tuple[str, str], dict[str, tuple]] = {}
        self._stored_shas: dict[tuple[str, str], dict[str, tuple[str, frozenset[str] | None]]] = {}
        self.network_ops = 0  # fetches and pushes this store made (benchmarks count them)

    # --- names ------------------------------------------------------------------------------

    def ref(self, plan_id: str) -> str:
        return state_ref(plan_id)

    def tracking(self, plan_id: str) -> str | None:
        return f"{TRACKING}/{self.remote}/{plan_id}" if self.remote else None

    # --- reading ------------------------------------------------------------------------

    def read(self, plan_id: str) -> tuple[Ledger, str | None]:
        _check_name("plan id", plan_id)
        version = self._sync(plan_id)
        if version is None:
            return Ledger(b"", self._corrupt(plan_id)), None
        tree = self._tree_of(version, plan_id)
        snapshot_sha = tree.get(SNAPSHOT, (0, None))[1]
        if LEDGER_DIR in tree:
            return self._read_segments(plan_id, tree[LEDGER_DIR], snapshot_sha), version
        ledger_sha = tree.get(LEDGER, (0, None))[1]
        raw = self._object(ledger_sha, b"blob") if ledger_sha else b""
        snapshot = None
        if snapshot_sha:
            snapshot = _valid_snapshot(self._object(snapshot_sha, b"blob"), ledger_sha, raw)
        ledger = Ledger(raw or b"", self._corrupt(plan_id), snapshot=snapshot)
        if snapshot is None:
            ledger.parse_all()  # no trusted fold to start from: every entry is read (and checked) now
        return ledger, version

    def _segments(self, plan_id: str, entry: tuple[int, str]) -> list[tuple[str, str]]:
        """(name, blob sha) of every segment in order; a clear error for anything that is not one."""
        mode, sha = entry
        names = _tree(self._object(sha, b"tree")) if mode == _TREE_MODE else None
        bad = ["(not a folder)"] if names is None else [
            n for n, (m, _) in names.items() if m != _BLOB_MODE or not _SEGMENT_NAME.fullmatch(n)]
        ordered = sorted(names or {})
        if not bad and ordered != [f"{i:06d}.jsonl" for i in range(len(ordered))]:
            bad = ["(numbers with a gap)"]
        if bad:
            ref = self.ref(plan_id)
            raise PlanRunnerError(
                what=f"the ledger of plan {plan_id!r} is corrupt: {LEDGER_DIR}/ holds {', '.join(bad[:3])}",
                why=f"{ref}:{LEDGER_DIR}/ must hold only the segments 000000.jsonl, 000001.jsonl, ... in sequence",
                fix=f"inspect it with `git ls-tree {ref}:{LEDGER_DIR}`; restore the missing or misnamed segment "
                    f"and commit that onto {ref} (push it if there is a remote), then run again")
        return [(n, names[n][1]) for n in ordered]  # type: ignore[index]

    def _read_segments(self, plan_id: str, entry: tuple[int, str], snapshot_sha: str | None) -> Ledger:
        segments = self._segments(plan_id, entry)
        loaders = [lambda sha=sha: self._object(sha, b"blob") or b"" for _, sha in segments]
        sizes = snapshot = None
        if snapshot_sha and segments:
            data = self._object(snapshot_sha, b"blob")
            try:
                snap = json.loads(data or b"")
                last_raw = loaders[-1]()  # the only segment read: every other one is full
                loaders[-1] = lambda: last_raw
                last = last_raw.count(b"\n")
                count = (len(segments) - 1) * SEGMENT_ENTRIES + last
                if (isinstance(snap, dict) and snap.get("ledger") == entry[1] and snap.get("entries") == count
                        and snap.get("segment") == SEGMENT_ENTRIES):
                    sizes = [SEGMENT_ENTRIES] * (len(segments) - 1) + [last]
                    snapshot = json.dumps(snap["state"])
            except (ValueError, KeyError, TypeError):
                sizes = snapshot = None
        names = [name for name, _ in segments]
        ledger = SegmentedLedger(loaders, sizes, lambda i: self._corrupt(plan_id, f"{LEDGER_DIR}/{names[i]}"),
                                 snapshot=snapshot)
        if snapshot is None:
            ledger.parse_all()  # no trusted fold to start from: every entry is read (and checked) now
        return ledger

    def read_file(self, plan_id: str, name: str) -> bytes | None:
        _check_name("plan id", plan_id)
        _check_name("file name", name)
        version = ref_sha(self.repo, self.ref(plan_id))
        if version is None:
            return None
        files = self._tree_of(version, plan_id).get(FILES)
        if files is None:
            return None
        entry = _tree(self._object(files[1], b"tree")).get(name)
        return self._object(entry[1], b"blob") if entry else None

    def read_dir(self, plan_id: str, name: str, dest: Path) -> None:
        """Write the directory `name` kept with the plan's state into `dest` (created; existing files stay)."""
        _check_name("plan id", plan_id)
        _check_name("directory name", name)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, tuple] = {}
        version = ref_sha(self.repo, self.ref(plan_id))
        top = self._tree_of(version, plan_id).get(name) if version else None
        if top is not None and top[0] == _TREE_MODE:
            self._checkout_tree(top[1], dest, "", manifest)
        elif version is not None:
            legacy = self.read_file(plan_id, f"{name}.tar.gz")  # migrated state: the old tarball
            if legacy:
                _untar(legacy, dest)
        self._dirs[(plan_id, name)] = manifest

    def plans(self) -> list[str]:
        """Every plan with state, after one fetch of all of them (a glob refspec)."""
        if self.remote is not None:
            self._fetch_all()
        names = self._listed()
        if not names:  # nothing in the namespace yet: a legacy state branch may hold the plans
            self._migrate_if_needed()
            names = self._listed()
        return names

    def _listed(self) -> list[str]:
        names = set(self._refs_under(f"{NAMESPACE}/"))  # with a remote: also local state not pushed yet
        if self.remote is not None:
            names |= set(self._refs_under(f"{TRACKING}/{self.remote}/"))
        return sorted(names)

    def version(self, plan_id: str) -> str | None:
        """The plan's state ref as last synced, without fetching."""
        return ref_sha(self.repo, self.ref(plan_id))

    def fetch_also(self, plan_id: str, refspecs: Sequence[str], negotiate: Sequence[str] = ()) -> None:
        """Carry `refspecs` (the work and base branches) in the same fetch as the plan's state, with
        `negotiate` as extra negotiation tips; `fetched_with` then names the plan."""
        self._extra[plan_id] = (list(refspecs), list(negotiate))

    def remote_seen(self, plan_id: str) -> str | None:
        """The plan's state on the remote as last fetched or pushed by this process (None: absent or no remote)."""
        tracking = self.tracking(plan_id)
        return ref_sha(self.repo, tracking) if tracking else None

    def _corrupt(self, plan_id: str, path: str = LEDGER) -> Callable[[int, str], PlanRunnerError]:
        ref = self.ref(plan_id)

        def error(number: int, detail: str) -> PlanRunnerError:
            return PlanRunnerError(
                what=f"the ledger of plan {plan_id!r} is corrupt at line {number}"
                     + (f" of {path}" if path != LEDGER else ""),
                why=f"{ref}:{path} line {number} is not a ledger entry ({detail})",
                fix=f"inspect it with `git show {ref}:{path}`; correct or delete line {number} and commit "
                    f"that onto {ref} (push it if there is a remote), then run again",
            )
        return error

    # --- writing ------------------------------------------------------------------------

    def append(self, plan_id: str, entries: Sequence[Entry], expected_version: str | None,
               files: dict[str, bytes] | None = None, *, snapshot: str | None = None,
               dirs: dict[str, Path] | None = None, redact: Sequence[bytes] = (),
               also_push: Sequence[tuple[str | None, str, str | None]] = (), push: bool = True) -> str:
        """Append `entries` if the plan's ref is still at `expected_version`; returns the new version.

        `snapshot` is the folded state after these entries (stored so the next read need not fold
        the whole ledger); `dirs` are directories kept as trees (only files changed since `read_dir`
        are read, cleared of the `redact` byte strings and stored; `DIR_LIMIT` bounds each in total); `also_push` are other
        `(sha or None to delete, ref, expected remote sha)` updates pushed atomically with the state.

        `push=False` writes the local ref only (a session's `started` entry when the remote already holds the
        intent that dispatched it): the next pushed append carries it to the remote with its own entries, the
        lease still on the remote's version as last seen.
        """
        _check_name("plan id", plan_id)
        for name in list(files or {}) + list(dirs or {}):
            _check_name("file name", name)
        ref, tracking = self.ref(plan_id), self.tracking(plan_id)
        current = ref_sha(self.repo, ref)
        if current != expected_version:
            raise self._conflict(plan_id, expected_version, current)
        seen = ref_sha(self.repo, tracking) if tracking is not None else None
        if seen is not None and seen != expected_version and not (
                expected_version and self._extends(expected_version, seen)):
            # The remote was last seen elsewhere: writing on `expected_version` would fork it.
            raise self._conflict(plan_id, expected_version, seen)
        new = self._commit(plan_id, entries, expected_version, files or {}, snapshot, dirs or {}, redact)
        try:
            run_git(self.repo, "update-ref", "-m", f"plan-runner: {plan_id}", ref, new, expected_version or _ZERO)
        except GitCommandError as exc:
            raise self._conflict(plan_id, expected_version, ref_sha(self.repo, ref), stderr_of(exc)) from None
        if self.remote is not None and push:
            if self._deferred is not None and not also_push:
                self._deferred.setdefault(plan_id, seen)  # pushed by `flush`, with every other plan's
            else:
                self._push(plan_id, new, seen, also_push)
        self._after_write(plan_id, dirs or {}, new)
        return new

    def _push(self, plan_id: str, new: str, seen: str | None,
              also_push: Sequence[tuple[str | None, str, str | None]] = ()) -> None:
        """One atomic push of the plan's local state `new` (with any entries written locally only before it),
        leased on the remote's version as last seen."""
        assert self.remote is not None
        ref, tracking = self.ref(plan_id), self.tracking(plan_id)
        updates = [(new, ref, seen), *also_push]
        try:
            push_atomic(self.repo, self.remote, updates, what=f"the state of plan {plan_id!r}")
            self.network_ops += 1
        except PlanRunnerError:
            self.network_ops += 1
            self._undo(plan_id, new, seen)
            raise
        run_git(self.repo, "update-ref", tracking, new)  # type: ignore[arg-type]
        self._known[plan_id] = new

    def defer_pushes(self) -> None:
        """From now on appends are written locally and pushed by `flush`, all plans in one atomic push (a tick)."""
        self._deferred = {}

    def flush(self) -> dict[str, StateConflict]:
        """Push every plan appended to since `defer_pushes` in one `git push --atomic`, each ref with its own
        lease. git rejects the whole push when one lease is lost: then one glob fetch tells which plans moved on
        the remote, their local refs take the remote's state, and the rest is pushed again without them.
        Returns the plans left out, each with its conflict (another job advanced that plan first)."""
        pending, self._deferred = dict(self._deferred or {}), None
        failed: dict[str, StateConflict] = {}
        while pending and self.remote is not None:
            news = {plan_id: ref_sha(self.repo, self.ref(plan_id)) for plan_id in pending}
            updates = [(news[p], self.ref(p), lease) for p, lease in pending.items() if news[p] != lease]
            try:
                if updates:
                    push_atomic(self.repo, self.remote, updates,
                                what=f"the state of {len(updates)} plan(s)" if len(updates) > 1 else
                                f"the state of plan {updates[0][1].rsplit('/', 1)[1]!r}")
                    self.network_ops += 1
            except StateConflict as exc:
                self.network_ops += 1
                self._fetch_all()
                lost = [p for p, lease in pending.items() if ref_sha(self.repo, self.tracking(p)) != lease]  # type: ignore[arg-type]
                if not lost:
                    raise
                for plan_id in lost:
                    failed[plan_id] = self._conflict(plan_id, pending.pop(plan_id),
                                                     ref_sha(self.repo, self.tracking(plan_id)), str(exc.why))  # type: ignore[arg-type]
                    remote_sha = ref_sha(self.repo, self.tracking(plan_id))  # type: ignore[arg-type]
                    if remote_sha is None:
                        run_git(self.repo, "update-ref", "-d", self.ref(plan_id))
                    else:
                        run_git(self.repo, "update-ref", self.ref(plan_id), remote_sha)
                continue
            for plan_id, new in news.items():
                run_git(self.repo, "update-ref", self.tracking(plan_id), new)  # type: ignore[arg-type]
                self._known[plan_id] = new
            break
        return failed

    def push_pending(self, plan_id: str) -> bool:
        """Push what was written locally only (a `started` entry) if the local state is ahead of the remote's
        as last seen; True when something was pushed. For a cancelled job, after the agent's work is safe."""
        _check_name("plan id", plan_id)
        if self.remote is None:
            return False
        local, seen = ref_sha(self.repo, self.ref(plan_id)), self.remote_seen(plan_id)
        if local is None or local == seen or (seen is not None and not self._extends(local, seen)):
            return False
        self._push(plan_id, local, seen)
        return True

    def _extends(self, new: str, old: str, depth: int = 8) -> bool:
        """`new` is `old` with plan-runner's appends on top (at most `depth` of them): a local write not pushed yet."""
        for _ in range(depth):
            if new == old:
                return True
            if not self._appends(new, None):
                return False
            data = self._object(new, b"commit")
            new = data.split(b"\nparent ", 1)[1][:40].decode()  # type: ignore[union-attr]
        return new == old

    def restore_own(self, plan_id: str, expected: str | None, *, remote: bool = True) -> list[str]:
        """Put this plan's state ref back at `expected` wherever the agent (it shares the repository and
        its remote) may have moved it: the local ref, the tracking ref, the remote; returns what was moved.
        Only this plan's ref is read and written: other plans' jobs write theirs meanwhile. On the remote,
        a commit that appends to `expected` (a tick or reply job wrote to this plan) is not the agent's:
        it is left alone, and this session's own write then yields to it. `remote=False` (an isolated agent,
        which has no credentials for the remote) skips the fetch the remote check costs."""
        found: list[str] = []
        # What the remote held when this process last fetched or pushed it (remembered here, where the agent
        # cannot reach): `expected` may carry entries written locally only (`append(push=False)`).
        on_remote = self._known.get(plan_id, expected)
        if self.remote is not None and remote:
            remote_sha = self._fetch(plan_id)
            if remote_sha != on_remote and not (remote_sha and on_remote and self._appends(remote_sha, on_remote)):
                found.append(f"{self.ref(plan_id)} on {self.remote!r} was moved to {(remote_sha or 'deleted')[:12]}; "
                             "restored")
                push_atomic(self.repo, self.remote, [(on_remote, self.ref(plan_id), remote_sha)],
                            what=f"the state of plan {plan_id!r}")
                self.network_ops += 1
                if on_remote is None:
                    run_git(self.repo, "update-ref", "-d", self.tracking(plan_id))  # type: ignore[arg-type]
                else:
                    run_git(self.repo, "update-ref", self.tracking(plan_id), on_remote)  # type: ignore[arg-type]
                self._known[plan_id] = on_remote
            elif remote_sha != on_remote:
                return found  # another job's write: this session's write will conflict and yield
        for ref, want in [(self.ref(plan_id), expected)] + ([(self.tracking(plan_id), on_remote)] if self.remote else []):
            current = ref_sha(self.repo, ref)  # type: ignore[arg-type]
            if current == want:
                continue
            found.append(f"{ref} was moved ({(expected or 'absent')[:12]} -> {(current or 'deleted')[:12]}); "
                         "the plan's state ref is plan-runner's record, not the agent's: restored")
            if want is None:
                run_git(self.repo, "update-ref", "-d", ref)  # type: ignore[arg-type]
            else:
                run_git(self.repo, "update-ref", "-m", "plan-runner: undo a move of the state ref", ref, want)  # type: ignore[arg-type]
        return found

    def _appends(self, new: str, old: str | None) -> bool:
        """`new` is a plan-runner write on top of `old` (None: its only parent): its parent, with the old
        ledger as its prefix."""
        data = self._object(new, b"commit")
        if data is None:
            return False
        header = data.split(b"\n\n", 1)[0] + b"\n"
        if old is None:
            parents = [line[7:] for line in header.split(b"\n") if line.startswith(b"parent ")]
            if len(parents) != 1:
                return False
            old = parents[0].decode()
        if f"\nparent {old}\n".encode() not in header:
            return False
        return self._ledger_extends(self._tree_of(new, "?"), self._tree_of(old, "?"))

    def _ledger_extends(self, new: dict[str, tuple[int, str]], old: dict[str, tuple[int, str]]) -> bool:
        """The ledger in tree `new` is the one in `old` with entries appended."""
        if LEDGER_DIR in new and LEDGER_DIR in old:  # the common case: compare segment shas, read two at most
            try:
                now, was = dict(self._segments("?", new[LEDGER_DIR])), self._segments("?", old[LEDGER_DIR])
            except PlanRunnerError:
                return False
            if not was:
                return True
            *full, (last, last_sha) = was
            if any(now.get(name) != sha for name, sha in full) or last not in now:
                return False
            return (self._object(now[last], b"blob") or b"").startswith(self._object(last_sha, b"blob") or b"")
        return self._ledger_bytes(new).startswith(self._ledger_bytes(old)) if (
            LEDGER in old or LEDGER_DIR in old) and (LEDGER in new or LEDGER_DIR in new) else False

    def _ledger_bytes(self, tree: dict[str, tuple[int, str]]) -> bytes:
        """The whole ledger as one text, whichever the format (a migration, compared once)."""
        if LEDGER_DIR in tree:
            try:
                parts = [self._object(sha, b"blob") or b"" for _, sha in self._segments("?", tree[LEDGER_DIR])]
            except PlanRunnerError:
                return b"\0"
            return b"".join(parts)
        raw = self._object(tree[LEDGER][1], b"blob") or b""
        return raw if not raw or raw.endswith(b"\n") else raw + b"\n"

    def _conflict(self, plan_id: str, expected: str | None, actual: str | None, detail: str = "") -> StateConflict:
        self._fresh.discard(plan_id)
        why = f"expected {expected or 'no state'}, found {actual or 'no state'}"
        return StateConflict(
            what=f"the state of plan {plan_id!r} moved since it was read",
            why=why + (f" ({detail})" if detail else ""),
            fix="nothing to do: another job advanced this plan first; re-read the state and yield",
        )

    def _undo(self, plan_id: str, new: str, expected: str | None) -> None:
        """After a lost push, move the local ref to the remote's (only if it is still ours)."""
        self._fresh.discard(plan_id)
        remote_sha = self._fetch(plan_id)
        target = remote_sha or expected
        try:
            if target is None:
                run_git(self.repo, "update-ref", "-d", self.ref(plan_id), new)
            else:
                run_git(self.repo, "update-ref", self.ref(plan_id), target, new)
        except GitCommandError:
            pass  # another local writer moved it already; nothing of ours is left

    def _after_write(self, plan_id: str, dirs: dict[str, Path], new: str) -> None:
        for name, path in dirs.items():  # what is on disk now is what the state holds
            self._dirs[(plan_id, name)] = _scan(Path(path), self._stored_shas.get((plan_id, name), {}))

    def _commit(self, plan_id: str, entries: Sequence[Entry], parent: str | None, files: dict[str, bytes],
                snapshot: str | None, dirs: dict[str, Path], redact: Sequence[bytes]) -> str:
        if parent:
            commit = self._object(parent, b"commit")
            if commit is None:
                raise PlanRunnerError(
                    what=f"the state of plan {plan_id!r} points at {parent[:12]}, which is not a readable commit",
                    why="the repository is missing objects (a shallow or partial clone, or a damaged object store)",
                    fix=f"fetch it in full (`git fetch origin '+{self.ref(plan_id)}:{self.ref(plan_id)}'`) "
                        "or run `git fsck`")
            plan = _tree(self._object(commit[5:45].decode(), b"tree"))
        else:
            plan = {}
        lines = [(dump_entry(e) + "\n").encode() for e in entries]
        ledger_sha, count = self._append_segments(plan_id, plan, lines)
        if snapshot is not None:
            body = json.dumps({"entries": count, "ledger": ledger_sha, "segment": SEGMENT_ENTRIES,
                               "state": json.loads(snapshot)}, separators=(",", ":"), sort_keys=True)
            plan[SNAPSHOT] = (_BLOB_MODE, self._store(b"blob", body.encode()))
        else:
            plan.pop(SNAPSHOT, None)  # a snapshot of an older ledger would only be rejected on read
        if files:
            kept = _tree(self._object(plan[FILES][1], b"tree")) if FILES in plan else {}
            for name, data in files.items():
                kept[name] = (_BLOB_MODE, self._store(b"blob", data))
            plan[FILES] = (_TREE_MODE, self._write_tree(kept))
        for name, path in dirs.items():
            old_tree = plan.get(name)
            tree_sha, shas = self._store_dir(plan_id, name, Path(path), redact,
                                             old_tree[1] if old_tree and old_tree[0] == _TREE_MODE else None)
            self._stored_shas[(plan_id, name)] = shas
            plan[name] = (_TREE_MODE, tree_sha)
            if FILES in plan:  # the migrated tarball of the same directory is superseded
                kept = _tree(self._object(plan[FILES][1], b"tree"))
                if kept.pop(f"{name}.tar.gz", None) is not None:
                    plan[FILES] = (_TREE_MODE, self._write_tree(kept))
        kinds = ", ".join(dict.fromkeys(getattr(e, "type", "?") for e in entries)) or "files"
        return self._commit_tree(self._write_tree(plan), parent, f"plan-runner: {plan_id}: {kinds}")

    def _append_segments(self, plan_id: str, plan: dict[str, tuple[int, str]], lines: list[bytes]) -> tuple[str, int]:
        """Append `lines` to the plan's ledger in segments (in place in `plan`); returns the segments' tree sha
        and the number of entries. Only the last segment is read and rewritten (and the ones the new lines
        open): git keeps every full segment as it is. A ledger in the old single blob is split into segments
        here, every line kept as it was."""
        old_blob = plan.pop(LEDGER, None)
        segments: dict[str, tuple[int, str]] = {}
        if old_blob is not None:  # migrate: the whole old ledger, once
            raw = self._object(old_blob[1], b"blob") or b""
            tail = [line + b"\n" for line in raw.split(b"\n") if line.strip()]
            first, before = 0, 0
        elif LEDGER_DIR in plan:
            ordered = self._segments(plan_id, plan[LEDGER_DIR])
            segments = {name: (_BLOB_MODE, sha) for name, sha in ordered}
            raw = self._object(ordered[-1][1], b"blob") or b"" if ordered else b""
            tail = [line + b"\n" for line in raw.split(b"\n") if line.strip()]
            first = max(0, len(ordered) - 1)
            before = self._counted(plan, plan[LEDGER_DIR][1], ordered) - len(tail)
        else:
            tail, first, before = [], 0, 0
        tail += lines
        for i in range(0, max(len(tail), 1), SEGMENT_ENTRIES):
            chunk = tail[i:i + SEGMENT_ENTRIES]
            segments[f"{first + i // SEGMENT_ENTRIES:06d}.jsonl"] = (_BLOB_MODE, self._store(b"blob", b"".join(chunk)))
        sha = self._write_tree(segments)
        plan[LEDGER_DIR] = (_TREE_MODE, sha)
        return sha, before + len(tail)

    def _counted(self, plan: dict[str, tuple[int, str]], ledger_sha: str, ordered: list[tuple[str, str]]) -> int:
        """The entries in the segments: from the stored snapshot when it was written for them, else counted."""
        snap_entry = plan.get(SNAPSHOT)
        if snap_entry is not None:
            try:
                snap = json.loads(self._object(snap_entry[1], b"blob") or b"")
                if snap.get("ledger") == ledger_sha and snap.get("segment") == SEGMENT_ENTRIES:
                    return int(snap["entries"])
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
        return sum((self._object(sha, b"blob") or b"").count(b"\n") for _, sha in ordered)

    def _commit_tree(self, tree: str, parent: str | None, message: str) -> str:
        stamp = f"{BOT_NAME} <{BOT_EMAIL}> {int(time.time())} +0000"
        commit = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "")
        commit += f"author {stamp}\ncommitter {stamp}\n\n{message}\n"
        return self._store(b"commit", commit.encode("utf-8", "surrogateescape"))

    # --- directories as trees ------------------------------------------------------------

    def _store_dir(self, plan_id: str, name: str, root: Path, redact: Sequence[bytes],
                   old_tree: str | None) -> tuple[str, dict[str, tuple[str, frozenset[str] | None]]]:
        """The tree of `root` (bounded to DIR_LIMIT), storing only what changed since `read_dir`: a file whose
        size and mtime are as restored is not even read; a big file is stored as blocks of whole lines cut where
        its content says (so the blocks of an appended log stay the same), and only its new blocks are redacted
        and stored."""
        bound_dir(root)
        restored = self._dirs.get((plan_id, name), {})
        shas: dict[str, tuple[str, frozenset[str] | None]] = {}
        nested: dict = {}
        for rel, path in _walk(root):
            st = path.stat()
            was = restored.get(rel)
            if was is not None and was[0] == st.st_size and was[1] == st.st_mtime_ns:
                sha, blocks = was[2], was[3]  # unchanged since it was restored: neither read nor stored again
            elif st.st_size > BLOCKED_FROM:
                sha, blocks = self._store_blocks(path, redact, was[3] if was is not None and was[3] else frozenset())
            else:
                if redact:
                    redact_file(path, redact)
                sha, blocks = self._store_file(path), None
            shas[rel] = (sha, blocks)
            node = nested
            *folders, leaf = rel.split("/")
            for folder in folders:
                node = node.setdefault(folder, {})
            node[leaf + BLOCKS_SUFFIX if blocks is not None else leaf] = (
                (_TREE_MODE, sha) if blocks is not None else (_BLOB_MODE, sha))
        return self._write_nested(nested), shas

    def _write_nested(self, node: dict) -> str:
        entries = {}
        for key, value in node.items():
            entries[key] = (_TREE_MODE, self._write_nested(value)) if isinstance(value, dict) else value
        return self._write_tree(entries)

    def _store_blocks(self, path: Path, redact: Sequence[bytes], known: frozenset[str]) -> tuple[str, frozenset[str]]:
        """`path` as a tree of blocks `000000`, `000001`, ...: a block restored from the state as it was is
        reused as is; any other block is redacted, and stored unless git has it already."""
        entries: dict[str, tuple[int, str]] = {}
        for number, raw in enumerate(_blocks(path)):
            sha = _blob_sha(raw)
            if sha not in known:
                data = _replace_all(raw, redact) if redact else raw
                sha = _blob_sha(data)
                if not self._has(sha):
                    self._store(b"blob", data)
            entries[f"{number:06d}"] = (_BLOB_MODE, sha)
        blocks = frozenset(sha for _, sha in entries.values())
        return self._write_tree(entries), blocks

    def _store_file(self, path: Path) -> str:
        size = path.stat().st_size
        digest = hashlib.sha1(b"blob %d\0" % size)
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(chunk)
        sha = digest.hexdigest()
        if self._odb is None:
            self._odb = LooseObjectDB(str(objects_dir(self.repo)))
        if not self._has(sha):
            with path.open("rb") as fh:
                self._odb.store(IStream(b"blob", size, fh))
        return sha

    def _has(self, sha: str) -> bool:
        assert self._odb is not None
        return self._odb.has_object(bytes.fromhex(sha)) or _exists(self._cat(), sha)

    def _checkout_tree(self, tree_sha: str, dest: Path, prefix: str, manifest: dict) -> None:
        for entry_name, (mode, sha) in _tree(self._object(tree_sha, b"tree")).items():
            rel = f"{prefix}{entry_name}"
            if mode == _TREE_MODE and entry_name.endswith(BLOCKS_SUFFIX):  # a big file, stored as blocks
                rel = rel[: -len(BLOCKS_SUFFIX)]
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                blocks = _tree(self._object(sha, b"tree"))
                with target.open("wb") as out:
                    for number in sorted(blocks):
                        out.write(self._object(blocks[number][1], b"blob") or b"")
                st = target.stat()
                manifest[rel] = (st.st_size, st.st_mtime_ns, sha, frozenset(b for _, b in blocks.values()))
            elif mode == _TREE_MODE:
                (dest / rel).mkdir(parents=True, exist_ok=True)
                self._checkout_tree(sha, dest, rel + "/", manifest)
            elif mode == _BLOB_MODE:
                data = self._object(sha, b"blob") or b""
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                st = target.stat()
                manifest[rel] = (st.st_size, st.st_mtime_ns, sha, None)

    # --- migration from the single state branch ----------------------------------------------

    def _migrate_if_needed(self) -> None:
        """Split a legacy `plan-runner/state` branch into one ref per plan (once per process)."""
        if self._migrated:
            return
        self._migrated = True
        legacy = ref_sha(self.repo, LEGACY_REF)
        remote_legacy = None
        if self.remote is not None and self._fetch_legacy():
            legacy = remote_legacy = ref_sha(self.repo, f"{TRACKING}/{self.remote}-legacy")
        if legacy is None or not self._looks_like_state(legacy):
            return
        root = _tree(self._object(self._object(legacy, b"commit")[5:45].decode(), b"tree"))  # type: ignore[index]
        updates = []
        for plan_id, (mode, tree) in sorted(root.items()):
            if mode != _TREE_MODE:
                continue
            ref = self.ref(plan_id)
            known = ref_sha(self.repo, self.tracking(plan_id) if self.remote else ref)  # type: ignore[arg-type]
            if known is not None:
                continue  # this plan has its own ref already: newer than the legacy branch
            commit = self._commit_tree(tree, None, f"plan-runner: {plan_id}: migrated from {LEGACY_BRANCH} "
                                                   f"at {legacy}")
            updates.append((commit, ref, None))
        if self.remote is not None:
            push = list(updates)
            if remote_legacy is not None:  # moved aside on the remote in the same atomic push
                push += [(legacy, LEGACY_KEPT, None), (None, LEGACY_REF, legacy)]
            if push:
                try:
                    push_atomic(self.repo, self.remote, push, what=f"the migration of {LEGACY_BRANCH}")
                    self.network_ops += 1
                except StateConflict:
                    self.network_ops += 1
                    self._fetch_all()  # another job migrated (or wrote) first: take what it pushed
                    return
            for commit, ref, _ in updates:
                run_git(self.repo, "update-ref", f"{TRACKING}/{self.remote}/{ref.rsplit('/', 1)[1]}", commit)
        verb = "update" if self.remote is not None else "create"
        stdin = "".join(f"{verb} {ref} {commit}\n" for commit, ref, _ in updates)
        stdin += f"update {LEGACY_KEPT} {legacy}\n"
        local = ref_sha(self.repo, LEGACY_REF)
        if local is not None and self._looks_like_state(local):
            if local != legacy:
                stdin += f"update {LEGACY_KEPT}-local {local}\n"
            stdin += f"delete {LEGACY_REF} {local}\n"
        try:
            run_git(self.repo, "update-ref", "-m", f"plan-runner: migrate {LEGACY_BRANCH}", "--stdin",
                    data=stdin.encode())
        except GitCommandError:
            pass  # another process here migrated at the same moment: its refs are the same plans

    def _looks_like_state(self, commit: str) -> bool:
        """A legacy state branch holds only folders with a ledger; a work branch of a plan named
        'state' (also `plan-runner/state`) holds the project's files."""
        data = self._object(commit, b"commit")
        if data is None:
            return False
        root = _tree(self._object(data[5:45].decode(), b"tree"))
        if not root or any(mode != _TREE_MODE for mode, _ in root.values()):
            return False
        return any(LEDGER in _tree(self._object(sha, b"tree")) for _, sha in root.values())

    # --- plumbing -----------------------------------------------------------------------

    def _sync(self, plan_id: str) -> str | None:
        """Fetch the plan's ref from the remote (unless this process fetched it already) and make
        the local ref match it; migrate a legacy state branch on first use."""
        ref = self.ref(plan_id)
        if self.remote is None:
            if not self._migrated and ref_sha(self.repo, ref) is None:
                self._migrate_if_needed()
            return ref_sha(self.repo, ref)
        if plan_id in self._fresh:  # the glob fetch of `plans()` brought it: one read uses it
            self._fresh.discard(plan_id)
            remote_sha = ref_sha(self.repo, self.tracking(plan_id))  # type: ignore[arg-type]
        else:
            remote_sha = self._fetch(plan_id)
            if remote_sha is None and not self._migrated:
                self._migrate_if_needed()
                remote_sha = ref_sha(self.repo, self.tracking(plan_id))  # type: ignore[arg-type]
        self._known[plan_id] = remote_sha
        if remote_sha is not None:
            local = ref_sha(self.repo, ref)
            if local != remote_sha:
                if local is not None and self._extends(local, remote_sha):
                    return local  # plan-runner's own entries written here and not pushed yet (a `started`): kept
                run_git(self.repo, "update-ref", ref, remote_sha)
            return remote_sha
        # Absent on the remote: local-only state (if any) stays and is pushed by the next append.
        return ref_sha(self.repo, ref)

    def _git_fetch(self, *refspecs: str, negotiate: list[str], prune: bool = False) -> str:
        """One fetch; returns '' or the error text when a named ref is missing on the remote."""
        assert self.remote is not None
        tips = [f"--negotiation-tip={t}" for t in negotiate if ref_sha(self.repo, t)]
        config = [] if tips else ["-c", "fetch.negotiationAlgorithm=noop"]
        last: GitCommandError | None = None
        for _attempt in range(5):
            self.network_ops += 1
            try:
                run_git(self.repo, *config, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                        "--no-auto-maintenance", *(["--prune"] if prune else []), *tips, self.remote, *refspecs)
                return ""
            except GitCommandError as exc:
                err = stderr_of(exc)
                if "couldn't find remote ref" in err:
                    return err
                if "lock" not in err:  # a concurrent fetch holding a ref lock is worth a retry
                    raise PlanRunnerError(
                        what=f"could not fetch plan-runner's state from {self.remote!r}",
                        why=err or str(exc),
                        fix="check that the remote is reachable and the token may read the repository",
                    ) from None
                last = exc
        raise PlanRunnerError(what="could not fetch plan-runner's state", why=stderr_of(last) if last else "",
                              fix="run again")

    def _legacy_spec(self) -> str:
        # A glob, so a remote without the legacy branch is no error; it also matches work branches of plans
        # whose id starts with "state" (harmless: mapped under a private prefix, never read).
        return f"+{LEGACY_REF}*:{TRACKING}/{self.remote}-legacy*"

    def _fetch(self, plan_id: str) -> str | None:
        """One fetch for the plan's ref (and the legacy state branch, for the first-use migration).
        Glob refspecs with --prune: a ref absent on the remote is no error, and its tracking ref goes."""
        tracking = self.tracking(plan_id)
        assert tracking is not None
        extra, tips = self._extra.get(plan_id, ([], []))
        # Negotiate only with the plan's state (and the branches fetched with it): the rest may be huge.
        self._git_fetch(f"+{self.ref(plan_id)}*:{tracking}*", self._legacy_spec(), *extra,
                        negotiate=[tracking, self.ref(plan_id), *tips], prune=True)
        self._legacy_fetched = True
        if extra:
            self.fetched_with.add(plan_id)
        return ref_sha(self.repo, tracking)

    def _fetch_all(self) -> None:
        prefix = f"{TRACKING}/{self.remote}"
        tips = [f"{prefix}/{name}" for name in self._refs_under(prefix + "/")]
        self._git_fetch(f"+{NAMESPACE}/*:{prefix}/*", self._legacy_spec(), negotiate=tips, prune=True)
        self._legacy_fetched = True
        self._fresh = set(self._refs_under(prefix + "/"))

    def _fetch_legacy(self) -> bool:
        """Whether the remote still has the legacy state branch (fetched to a private ref), fetched with
        the plan's state when that happened already in this process."""
        target = f"{TRACKING}/{self.remote}-legacy"
        if not self._legacy_fetched:
            self._git_fetch(self._legacy_spec(), negotiate=[target], prune=True)
            self._legacy_fetched = True
        return ref_sha(self.repo, target) is not None

    def _refs_under(self, prefix: str) -> list[str]:
        out = run_git(self.repo, "for-each-ref", "--format=%(refname)", prefix).decode().split()
        return [name[len(prefix):] for name in out if "/" not in name[len(prefix):]]

    def _cat(self) -> CatFile:
        return cat_file(self.repo)

    def close(self) -> None:
        close_cat_file(self.repo)

    def _object(self, spec: str | None, kind: bytes) -> bytes | None:
        if not spec:
            return None
        got = self._cat().get(spec)
        if got is None or got[0] != kind:
            return None
        return got[1]

    def _tree_of(self, commit: str | None, plan_id: str) -> dict[str, tuple[int, str]]:
        data = self._object(commit, b"commit") if commit else None
        if data is None:
            if commit is None:
                return {}
            raise PlanRunnerError(
                what=f"the state of plan {plan_id!r} points at {commit[:12]}, which is not a readable commit",
                why="the repository is missing objects (a shallow or partial clone, or a damaged object store)",
                fix=f"fetch it in full (`git fetch origin '+{self.ref(plan_id)}:{self.ref(plan_id)}'`) "
                    "or run `git fsck`")
        return _tree(self._object(data[5:45].decode(), b"tree"))

    def _store(self, kind: bytes, data: bytes) -> str:
        if self._odb is None:
            self._odb = LooseObjectDB(str(objects_dir(self.repo)))
        return self._odb.store(IStream(kind, len(data), BytesIO(data))).hexsha.decode()

    def _write_tree(self, entries: dict[str, tuple[int, str]]) -> str:
        # git's order: by name, a tree's name compared as if it ended with "/"
        ordered = sorted(entries.items(), key=lambda item: item[0].encode("utf-8", "surrogateescape")
                         + (b"/" if item[1][0] == _TREE_MODE else b""))
        buf = BytesIO()
        tree_to_stream([(bytes.fromhex(sha), mode, name) for name, (mode, sha) in ordered], buf.write)
        return self._store(b"tree", buf.getvalue())


def _exists(cat: CatFile, sha: str) -> bool:
    return cat.get(sha) is not None


def _valid_snapshot(data: bytes | None, ledger_sha: str | None, raw: bytes | None) -> str | None:
    """The stored folded state, only if it was folded from exactly this ledger."""
    if not data or not ledger_sha:
        return None
    try:
        snap = json.loads(data)
        if (not isinstance(snap, dict) or snap.get("ledger") != ledger_sha
                or snap.get("entries") != (raw or b"").count(b"\n")):
            return None
        return json.dumps(snap["state"])
    except (ValueError, KeyError, TypeError):
        return None


def _tree(data: bytes | None) -> dict[str, tuple[int, str]]:
    """A raw tree object as {name: (mode, sha)}."""
    if not data:
        return {}
    return {name: (mode, binsha.hex()) for binsha, mode, name in tree_entries_from_data(data)}


def _walk(root: Path):
    """(relative posix path, path) of every regular file under `root`, in a stable order."""
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            yield path.relative_to(root).as_posix(), path


def _scan(root: Path, shas: dict[str, tuple[str, frozenset[str] | None]]) -> dict[str, tuple]:
    manifest = {}
    for rel, path in _walk(root):
        if rel in shas:
            st = path.stat()
            manifest[rel] = (st.st_size, st.st_mtime_ns, *shas[rel])
    return manifest


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _blocks(path: Path):
    """The file in blocks of whole lines, cut after a line whose checksum says so, with a chance proportional
    to its length (blocks of BLOCK_AVG bytes on average, at most BLOCK_MAX): where a cut falls depends on that
    line alone, not on where the block began, so an appended file, or one whose head was cut, keeps the same
    blocks. Secrets never straddle two blocks (they hold no newline)."""
    block: list[bytes] = []
    size = 0
    scale = 2**32 / BLOCK_AVG
    with path.open("rb") as fh:
        for line in fh:
            block.append(line)
            size += len(line)
            if size >= BLOCK_MAX or zlib.crc32(line) < len(line) * scale:
                yield b"".join(block)
                block, size = [], 0
    if block:
        yield b"".join(block)


def bound_dir(root: Path, limit: int = DIR_LIMIT) -> None:
    """Keep at most `limit` bytes under `root`: the least recently written files go first; a single
    file still over the limit (a log appended across sessions) keeps its newest lines."""
    files = [(path.stat().st_mtime_ns, path.stat().st_size, path) for _, path in _walk(root)]
    total = sum(size for _, size, _ in files)
    if total <= limit:
        return
    files.sort(key=lambda f: f[0])
    for _mtime, size, path in files[:-1]:
        if total <= limit:
            return
        path.unlink()
        total -= size
    if total > limit and files:
        _keep_tail(files[-1][2], limit)


def _keep_tail(path: Path, limit: int) -> None:
    """Cut the head of `path` so at most `limit` bytes stay, at a line boundary; streamed."""
    size = path.stat().st_size
    tmp = path.with_name(path.name + ".plan-runner-tail")
    with path.open("rb") as src, tmp.open("wb") as dst:
        src.seek(size - limit)
        first = src.read(_CHUNK)
        cut = first.find(b"\n")
        dst.write(first[cut + 1:] if cut >= 0 else first)
        for chunk in iter(lambda: src.read(_CHUNK), b""):
            dst.write(chunk)
    os.replace(tmp, path)


def redact_file(path: Path, forms: Sequence[bytes]) -> None:
    """Replace every form with `***` in the file, streamed in chunks (a form that straddles two chunks
    is still found: a chunk is only written up to where no form can begin and end beyond it)."""
    forms = sorted({f for f in forms if f}, key=len, reverse=True)
    if not forms:
        return
    tmp = path.with_name(path.name + ".plan-runner-redact")
    changed = False
    with path.open("rb") as src, tmp.open("wb") as dst:
        carry = b""
        while True:
            chunk = src.read(_CHUNK)
            buf = carry + chunk
            end = len(buf) if not chunk else _safe_end(buf, forms)
            head = buf[:end]
            clean = _replace_all(head, forms)
            changed |= clean != head
            dst.write(clean)
            carry = buf[end:]
            if not chunk:
                break
    if changed:
        os.replace(tmp, path)
    else:
        tmp.unlink()


def _safe_end(buf: bytes, forms: Sequence[bytes]) -> int:
    """Where `buf` can be cut: no form can start before it and end after it (given more data may follow)."""
    end = max(0, len(buf) - (max(len(f) for f in forms) - 1))
    moved = True
    while moved:
        moved = False
        for form in forms:
            i = buf.find(form, max(0, end - len(form) + 1))
            while i != -1 and i < end:
                if i + len(form) > end:
                    end, moved = i + len(form), True
                i = buf.find(form, i + 1)
    return end


def _replace_all(data: bytes, forms: Sequence[bytes]) -> bytes:
    for form in forms:
        data = data.replace(form, b"***")
    return data


def _untar(data: bytes, dest: Path) -> None:
    import tarfile

    with tarfile.open(fileobj=BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")


def push_atomic(repo: Path | str, remote: str, updates: Sequence[tuple[str | None, str, str | None]], *,
                what: str) -> None:
    """One `git push --atomic`: every `(sha or None to delete, ref, expected remote sha or None for
    absent)` lands, each compare-and-swapped with its own lease, or none does."""
    push_leased(repo, remote, updates, what=what, atomic=True)



def ledger_text(repo: Path | str, rev: str) -> str:
    """The whole ledger at `rev` (a plan's state commit) as one text, in either format; '' when there is none.
    For tools and tests that read it with git, outside a store."""
    try:
        listing = run_git(repo, "ls-tree", "-z", rev, "--", LEDGER, LEDGER_DIR + "/").decode()
    except GitCommandError:
        return ""
    names = sorted(item.split("\t", 1)[1] for item in listing.split("\0") if "\t" in item)
    return "".join(run_git(repo, "cat-file", "blob", f"{rev}:{name}").decode("utf-8", "replace") for name in names)
