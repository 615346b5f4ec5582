"""The run state in git: one append-only ledger per plan on a branch of its own.

Layout of the state branch (default `plan-runner/state`)::

    <plan_id>/ledger.jsonl      one `runner.ledger` entry per line
    <plan_id>/files/<name>      kept with the state, e.g. agent transcripts

Writes use plumbing only, so the user's work tree and index are never touched:
the blobs, trees and the commit of a write are stored as loose objects by
GitPython's object database (gitdb), and the ref moves with `git update-ref`.
Reads of one write come from a single `git cat-file --batch`: a write costs two
or three git processes, not a dozen. Every write is a compare-and-swap: the
local ref moves with `update-ref <ref> <new> <expected>` and, with a remote, the
push carries `--force-with-lease=<ref>:<expected>`. The version token is the
state ref's commit sha. Reads go ref -> tree -> blob and never walk history, so
they cost the size of one plan's ledger whatever the age of the repository.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

from git.exc import GitCommandError
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb.base import IStream
from gitdb.db.loose import LooseObjectDB
from pydantic import ValidationError

from runner.errors import PlanRunnerError, StateConflict
from runner.gitwork import BOT_EMAIL, BOT_NAME, objects_dir, push_ref, ref_sha, run_git, stderr_of
from runner.ledger import Entry, dump_entry, parse_entry

LEDGER = "ledger.jsonl"
FILES = "files"
_TREE_MODE = 0o040000
_BLOB_MODE = 0o100644


def _check_name(kind: str, name: str) -> None:
    if (not name or name in (".", "..", ".git") or any(c in name for c in "/\\\0\n")
            or name != name.strip()):
        raise PlanRunnerError(
            what=f"{kind} {name!r} cannot be stored on the state branch",
            why=f"a {kind} becomes one folder or file name in git: no slashes, newlines, "
                "surrounding spaces, '.', '..' or '.git'",
            fix=f"use a plain name such as the plan file's stem (e.g. 'add-auth') for the {kind}",
        )


class GitStateStore:
    """`runner.ports.StateStore` on a git branch, with or without a remote."""

    def __init__(self, repo_path: Path, branch: str = "plan-runner/state", remote: str | None = "origin") -> None:
        self.repo = Path(repo_path)
        self.branch = branch
        self.ref = f"refs/heads/{branch}"
        try:
            configured = run_git(self.repo, "remote").decode().split()
        except GitCommandError as exc:
            raise PlanRunnerError(
                what=f"{self.repo} is not a git repository plan-runner can keep state in",
                why=stderr_of(exc),
                fix="run plan-runner inside a git clone (`git init` for a new project)",
            ) from None
        # "origin" is the default; a repository without it works locally (section 7).
        self.remote = remote if remote in configured else None
        self.tracking = f"refs/remotes/{self.remote}/{branch}" if self.remote else None
        self._odb: LooseObjectDB | None = None

    # --- reading ------------------------------------------------------------------------

    def read(self, plan_id: str) -> tuple[list[Entry], str | None]:
        _check_name("plan id", plan_id)
        version = self._sync()
        if version is None:
            return [], None
        data = self._blob(version, f"{plan_id}/{LEDGER}")
        return (self._parse(plan_id, data) if data else []), version

    def read_file(self, plan_id: str, name: str) -> bytes | None:
        _check_name("plan id", plan_id)
        _check_name("file name", name)
        version = ref_sha(self.repo, self.ref)
        return self._blob(version, f"{plan_id}/{FILES}/{name}") if version else None

    def plans(self) -> list[str]:
        version = self._sync()
        if version is None:
            return []
        (root,) = self._cat((f"{version}^{{tree}}", b"tree"))
        return sorted(name for name, (mode, _sha) in _tree(root).items() if mode == _TREE_MODE)

    def version(self) -> str | None:
        """The state ref's sha as last synced, without fetching."""
        return ref_sha(self.repo, self.ref)

    def _parse(self, plan_id: str, data: bytes) -> list[Entry]:
        entries = []
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entries.append(parse_entry(line))
            except ValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {}
                detail = f"{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg', exc)}"
                raise PlanRunnerError(
                    what=f"the ledger of plan {plan_id!r} is corrupt at line {number}",
                    why=f"{self.branch}:{plan_id}/{LEDGER} line {number} is not a ledger entry ({detail})",
                    fix=f"inspect it with `git show {self.branch}:{plan_id}/{LEDGER}`; correct or delete "
                        f"line {number} and commit that to the {self.branch} branch (push it if there is a "
                        "remote), then run again",
                ) from None
        return entries

    # --- writing ------------------------------------------------------------------------

    def append(self, plan_id: str, entries: Sequence[Entry], expected_version: str | None,
               files: dict[str, bytes] | None = None) -> str:
        _check_name("plan id", plan_id)
        for name in files or {}:
            _check_name("file name", name)
        current = ref_sha(self.repo, self.ref)
        if current != expected_version:
            raise self._conflict(expected_version, current)
        if self.tracking is not None:
            seen = ref_sha(self.repo, self.tracking)
            if seen is not None and seen != expected_version:
                # The remote was last seen elsewhere: writing on `expected_version` would fork it.
                raise self._conflict(expected_version, seen)
        new = self._commit(plan_id, entries, expected_version, files or {})
        zero = "0" * len(new)
        try:
            run_git(self.repo, "update-ref", "-m", f"plan-runner: {plan_id}", self.ref, new,
                    expected_version or zero)
        except GitCommandError as exc:
            raise self._conflict(expected_version, ref_sha(self.repo, self.ref), stderr_of(exc)) from None
        if self.remote is not None:
            try:
                push_ref(self.repo, self.remote, new, self.ref, expected_version if self._remote_had() else None,
                         what=f"the state branch {self.branch!r}")
            except PlanRunnerError:
                self._undo(new, expected_version)
                raise
            run_git(self.repo, "update-ref", self.tracking, new)
        return new

    def restore_version(self, expected: str | None) -> list[str]:
        """Put the state branch back at `expected` wherever an agent (same repository, same
        remote) may have moved it: the local ref, the tracking ref, the remote. Called after
        the agent exits and before plan-runner writes its verdict; returns what was moved."""
        found: list[str] = []
        refs = [self.ref] + ([self.tracking] if self.tracking else [])
        for ref in refs:
            current = ref_sha(self.repo, ref)
            if current == expected:
                continue
            found.append(f"{ref} was moved ({(expected or 'absent')[:12]} -> {(current or 'deleted')[:12]}); "
                         "the state branch is plan-runner's record, not the agent's: restored")
            if expected is None:
                run_git(self.repo, "update-ref", "-d", ref)
            else:
                run_git(self.repo, "update-ref", "-m", "plan-runner: undo a move of the state branch", ref, expected)
        if self.remote is not None:
            remote_sha = self._fetch()
            if remote_sha != expected and expected is not None:
                found.append(f"{self.branch} on {self.remote!r} was moved to {(remote_sha or 'deleted')[:12]}; restored")
                push_ref(self.repo, self.remote, expected, self.ref, remote_sha, what=f"the state branch {self.branch!r}")
            if expected is not None:
                run_git(self.repo, "update-ref", self.tracking, expected)
        return found

    def _remote_had(self) -> bool:
        return self.tracking is not None and ref_sha(self.repo, self.tracking) is not None

    def _conflict(self, expected: str | None, actual: str | None, detail: str = "") -> StateConflict:
        why = f"expected {expected or 'no state'}, found {actual or 'no state'}"
        return StateConflict(
            what=f"the state branch {self.branch!r} moved since it was read",
            why=why + (f" ({detail})" if detail else ""),
            fix="nothing to do: another job advanced the plan first; re-read the state and yield",
        )

    def _undo(self, new: str, expected: str | None) -> None:
        """After a lost push, move the local ref to the remote's (only if it is still ours)."""
        remote_sha = self._fetch()
        target = remote_sha or expected
        try:
            if target is None:
                run_git(self.repo, "update-ref", "-d", self.ref, new)
            else:
                run_git(self.repo, "update-ref", self.ref, target, new)
        except GitCommandError:
            pass  # another local writer moved it already; nothing of ours is left

    def _commit(self, plan_id: str, entries: Sequence[Entry], parent: str | None,
                files: dict[str, bytes]) -> str:
        if parent:
            root_data, plan_data, old, files_data = self._cat(
                (f"{parent}^{{tree}}", b"tree"), (f"{parent}:{plan_id}", b"tree"),
                (f"{parent}:{plan_id}/{LEDGER}", b"blob"), (f"{parent}:{plan_id}/{FILES}", b"tree"))
            if root_data is None:
                raise PlanRunnerError(
                    what=f"the state branch {self.branch!r} points at {parent[:12]}, which is not a readable commit",
                    why="the repository is missing objects (a shallow or partial clone, or a damaged object store)",
                    fix=f"fetch the branch in full (`git fetch origin {self.branch}`) or run `git fsck`")
        else:
            root_data = plan_data = old = files_data = None
        root, plan = _tree(root_data), _tree(plan_data)
        old = old or b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        lines = "".join(dump_entry(e) + "\n" for e in entries).encode()
        plan[LEDGER] = (_BLOB_MODE, self._store(b"blob", old + lines))
        if files:
            kept = _tree(files_data) if FILES in plan else {}
            for name, data in files.items():
                kept[name] = (_BLOB_MODE, self._store(b"blob", data))
            plan[FILES] = (_TREE_MODE, self._write_tree(kept))
        root[plan_id] = (_TREE_MODE, self._write_tree(plan))
        kinds = ", ".join(dict.fromkeys(getattr(e, "type", "?") for e in entries)) or "files"
        stamp = f"{BOT_NAME} <{BOT_EMAIL}> {int(time.time())} +0000"
        commit = f"tree {self._write_tree(root)}\n" + (f"parent {parent}\n" if parent else "")
        commit += f"author {stamp}\ncommitter {stamp}\n\nplan-runner: {plan_id}: {kinds}\n"
        return self._store(b"commit", commit.encode("utf-8", "surrogateescape"))

    # --- plumbing -----------------------------------------------------------------------

    def _sync(self) -> str | None:
        """Fetch the remote's state (if any) and make the local ref match it."""
        if self.remote is None:
            return ref_sha(self.repo, self.ref)
        remote_sha = self._fetch()
        if remote_sha is not None:
            run_git(self.repo, "update-ref", self.ref, remote_sha)
            return remote_sha
        # Absent on the remote: local-only state (if any) stays and is pushed by the next append.
        return ref_sha(self.repo, self.ref)

    def _fetch(self) -> str | None:
        assert self.remote is not None and self.tracking is not None
        # Negotiate only with the state branch: the work history is unrelated and may be huge.
        local = ref_sha(self.repo, self.ref)
        negotiation = [f"--negotiation-tip={self.ref}"] if local else []
        config = [] if local else ["-c", "fetch.negotiationAlgorithm=noop"]
        last: GitCommandError | None = None
        for _attempt in range(5):
            try:
                run_git(self.repo, *config, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                        "--no-auto-maintenance", *negotiation, self.remote, f"+{self.ref}:{self.tracking}")
                return ref_sha(self.repo, self.tracking)
            except GitCommandError as exc:
                err = stderr_of(exc)
                if "couldn't find remote ref" in err:
                    try:
                        run_git(self.repo, "update-ref", "-d", self.tracking)
                    except GitCommandError:
                        pass
                    return None
                if "lock" not in err:  # a concurrent fetch holding the ref lock is worth a retry
                    raise PlanRunnerError(
                        what=f"could not fetch the state branch {self.branch!r} from {self.remote!r}",
                        why=err or str(exc),
                        fix="check that the remote is reachable and the token may read the repository",
                    ) from None
                last = exc
        raise PlanRunnerError(what=f"could not fetch the state branch {self.branch!r}",
                              why=stderr_of(last) if last else "", fix="run again")

    def _blob(self, tree_ish: str, path: str) -> bytes | None:
        (data,) = self._cat((f"{tree_ish}:{path}", b"blob"))
        return data

    def _cat(self, *wanted: tuple[str, bytes]) -> list[bytes | None]:
        """The contents of several objects, each `(spec, type)` with a spec like `<rev>:<path>`,
        from one `git cat-file` process; None for each that is missing or of another type."""
        out = run_git(self.repo, "cat-file", "--batch", data="".join(f"{spec}\n" for spec, _ in wanted).encode())
        found: list[bytes | None] = []
        at = 0
        for _spec, kind in wanted:
            end = out.index(b"\n", at)
            parts = out[at:end].split(b" ")
            at = end + 1
            if len(parts) == 3 and parts[2].isdigit():  # "<sha> <type> <size>", else "<spec> missing"
                size = int(parts[2])
                found.append(out[at: at + size] if parts[1] == kind else None)
                at += size + 1
            else:
                found.append(None)
        return found

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


def _tree(data: bytes | None) -> dict[str, tuple[int, str]]:
    """A raw tree object as {name: (mode, sha)}."""
    if not data:
        return {}
    return {name: (mode, binsha.hex()) for binsha, mode, name in tree_entries_from_data(data)}
