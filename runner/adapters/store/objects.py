"""git objects for the state store, written without git: blobs, trees and commits stored as loose objects by
GitPython's object database (gitdb), read back through the repository's one shared `git cat-file --batch`.
The user's work tree and index are never touched."""

from __future__ import annotations

import hashlib
import time
from io import BytesIO
from pathlib import Path

from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb.base import IStream
from gitdb.db.loose import LooseObjectDB

from runner.adapters.git.invoke import BOT_EMAIL, BOT_NAME, CatFile
from runner.adapters.git.objects import Repository, objects_dir
from runner.core.errors import PlanRunnerError

TREE_MODE = 0o040000
BLOB_MODE = 0o100644
CHUNK = 1 << 20

Tree = dict[str, tuple[int, str]]  # name -> (mode, sha)


class GitObjects:
    """Reads and writes the objects of one repository."""

    def __init__(self, repo: Path | Repository) -> None:
        self.git = repo if isinstance(repo, Repository) else Repository(repo)  # its reader: this store's own
        self.repo = self.git.path
        self._odb: LooseObjectDB | None = None

    def _db(self) -> LooseObjectDB:
        if self._odb is None:
            self._odb = LooseObjectDB(str(objects_dir(self.git)))
        return self._odb

    def cat(self) -> CatFile:
        return self.git.cat_file()

    def close(self) -> None:
        self.git.close()

    def get(self, spec: str | None, kind: bytes) -> bytes | None:
        """The object's content if it exists and is of `kind`, else None."""
        if not spec:
            return None
        got = self.cat().get(spec)
        if got is None or got[0] != kind:
            return None
        return got[1]

    def has(self, sha: str) -> bool:
        return self._db().has_object(bytes.fromhex(sha)) or self.cat().get(sha) is not None

    def store(self, kind: bytes, data: bytes) -> str:
        return self._db().store(IStream(kind, len(data), BytesIO(data))).hexsha.decode()

    def store_file(self, path: Path) -> str:
        """A file as a blob, streamed (hashed first: a blob git has already is not written again)."""
        size = path.stat().st_size
        digest = hashlib.sha1(b"blob %d\0" % size)
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(CHUNK), b""):
                digest.update(chunk)
        sha = digest.hexdigest()
        if not self.has(sha):
            with path.open("rb") as fh:
                self._db().store(IStream(b"blob", size, fh))
        return sha

    def tree(self, sha: str | None) -> Tree:
        return parse_tree(self.get(sha, b"tree"))

    def write_tree(self, entries: Tree) -> str:
        # git's order: by name, a tree's name compared as if it ended with "/"
        ordered = sorted(entries.items(), key=lambda item: item[0].encode("utf-8", "surrogateescape")
                         + (b"/" if item[1][0] == TREE_MODE else b""))
        buf = BytesIO()
        tree_to_stream([(bytes.fromhex(sha), mode, name) for name, (mode, sha) in ordered], buf.write)
        return self.store(b"tree", buf.getvalue())

    def commit_tree(self, tree: str, parent: str | None, message: str) -> str:
        stamp = f"{BOT_NAME} <{BOT_EMAIL}> {int(time.time())} +0000"
        commit = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "")
        commit += f"author {stamp}\ncommitter {stamp}\n\n{message}\n"
        return self.store(b"commit", commit.encode("utf-8", "surrogateescape"))

    def tree_of(self, commit: str | None, plan_id: str, ref: str) -> Tree:
        """The root tree of a state commit ({} for None); a clear error when the commit cannot be read."""
        data = self.get(commit, b"commit") if commit else None
        if data is None:
            if commit is None:
                return {}
            raise missing_commit(plan_id, commit, ref)
        return self.tree(data[5:45].decode())


def missing_commit(plan_id: str, commit: str, ref: str) -> PlanRunnerError:
    return PlanRunnerError(
        what=f"the state of plan {plan_id!r} points at {commit[:12]}, which is not a readable commit",
        why="the repository is missing objects (a shallow or partial clone, or a damaged object store)",
        fix=f"fetch it in full (`git fetch origin '+{ref}:{ref}'`) or run `git fsck`")


def parse_tree(data: bytes | None) -> Tree:
    """A raw tree object as {name: (mode, sha)}."""
    if not data:
        return {}
    return {name: (mode, binsha.hex()) for binsha, mode, name in tree_entries_from_data(data)}


def blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
