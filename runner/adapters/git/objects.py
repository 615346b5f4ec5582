"""Reading one repository: refs (from their files where plain), objects through the long-lived reader, files at a
commit, ancestry, the remotes configured.

What is read is remembered by the `Repository` it was read through, never by this module: its owner (a session, the
state store) builds it once and passes it to these functions in place of a path, and what it remembers goes with it.
Given a path, a function reads through a `Repository` of its own for that one call."""

from __future__ import annotations

import os
import re
from pathlib import Path

from git import Repo
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError
from git.objects.fun import tree_entries_from_data
from git.refs import SymbolicReference

from runner.adapters.git.invoke import CatFile, git_text, run_git
from runner.core.errors import PlanRunnerError

# Objects never change: a sha once verified as a commit, a file read at a full sha, whether one commit is an ancestor
# of another, what differs between two, are remembered for as long as their `Repository` lives (a session asks for
# the same few several times).
_FULL_SHA = re.compile(r"[0-9a-f]{40}")
_FILES_AT_MAX, _FILE_AT_MAX_CHARS = 64, 1 << 20
# Branch-like refs are read from the ref files by GitPython (loose, then packed-refs) instead of a
# `git rev-parse` process each: a session asks for them a dozen times. Anything else (a sha to
# verify, `main`, a tag to peel), an odd name, or a reftable repository goes to git itself.
_PLAIN_REF = re.compile(r"HEAD|refs/(?:heads|remotes|plan-runner)(?:/[A-Za-z0-9_][A-Za-z0-9._+-]*)+")


class Repository:
    """One repository (one work tree of it: HEAD is its own) as one owner reads it, and what it remembered of it: a
    path wherever git takes one (`os.fspath` gives the path it was built with).

    Built once by its owner, who closes it when done (its object reader is a process); refs are read from their
    files each time, so only what never changes (objects) and what plan-runner never changes (the remotes
    configured) is remembered."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.key = str(self.path.resolve())
        self._reader: Repo | None = None
        self._reader_known = False  # whether `_reader` was looked for (None is an answer: git is asked then)
        self._cat: CatFile | None = None
        self.known_commits: set[str] = set()
        self.files_at: dict[tuple[str, str], str | None] = {}
        self.ancestry: dict[tuple[str, str], bool] = {}
        self.diffs: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self.remotes: list[str] | None = None

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"Repository({str(self.path)!r})"

    def ref_reader(self) -> Repo | None:
        """GitPython's view of the repository, for reading ref files; None where git itself must be asked (not a
        repository yet, a reftable repository)."""
        if not self._reader_known:
            try:
                opened = Repo(self.key)
            except (InvalidGitRepositoryError, NoSuchPathError):
                return None  # not remembered: it may become a repository; git will say what is wrong
            self._reader = None if (Path(opened.common_dir) / "reftable").is_dir() else opened
            self._reader_known = True
        return self._reader

    def cat_file(self) -> CatFile:
        """The repository's one long-lived reader, for objects named from a full sha (`<sha>`, `<sha>:<path>`,
        `<sha>^{tree}`): started on first use, again if it stopped."""
        if self._cat is None or not self._cat.alive():
            self._cat = CatFile(self.key)
        return self._cat

    def close(self) -> None:
        """The reader's process stopped (a later read starts another); what was remembered is kept."""
        cat, self._cat = self._cat, None
        if cat is not None:
            cat.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def at(repo: str | os.PathLike[str]) -> Repository:
    """`repo` itself when it is a `Repository`; otherwise one for this call alone (its reader stops with it)."""
    return repo if isinstance(repo, Repository) else Repository(repo)


def _read_ref(repo: Repository, ref: str) -> str | None | bool:
    """The sha of a plain ref read from its file; None when absent; False when git must be asked."""
    if not _PLAIN_REF.fullmatch(ref) or ref.endswith(".lock") or "/." in ref or ".." in ref:
        return False
    handle = repo.ref_reader()
    if handle is None:
        return False
    try:
        return SymbolicReference.dereference_recursive(handle, ref)
    except ValueError:  # absent, or HEAD on an unborn branch
        return None
    except (OSError, TypeError):
        return False


def objects_dir(repo: str | os.PathLike[str]) -> Path:
    """The object store of `repo` (shared by all its worktrees)."""
    handle = at(repo).ref_reader()
    if handle is not None:
        return Path(handle.common_dir) / "objects"
    return Path(repo) / git_text(repo, "rev-parse", "--git-path", "objects")


def _object_at(repo: Repository, spec: str) -> tuple[str, bytes, bytes] | None:
    return repo.cat_file().get_with_sha(spec)


def ref_sha(repo: str | os.PathLike[str], ref: str) -> str | None:
    """The commit a ref points at, or None when it does not exist."""
    r = at(repo)
    fast = _read_ref(r, ref)
    if fast is not False:
        return fast  # type: ignore[return-value]
    full = _FULL_SHA.fullmatch(ref) is not None
    if full and ref in r.known_commits:
        return ref
    if full:
        got = _object_at(r, f"{ref}^{{commit}}")
        if got is None:
            return None
        if got[0] == ref:
            r.known_commits.add(ref)
        return got[0]
    try:
        sha = git_text(r, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}") or None
    except GitCommandError:
        return None
    return sha


def head_sha(repo: str | os.PathLike[str]) -> str:
    """The commit HEAD points at (an error when there is none)."""
    return _resolve(repo, "HEAD")


def _resolve(repo: str | os.PathLike[str], rev: str) -> str:
    sha = ref_sha(repo, rev)
    if sha is None:
        raise PlanRunnerError(
            what=f"git revision {rev!r} does not exist in {repo}",
            why="the branch or commit was deleted, never fetched, or the name is misspelt",
            fix=f"check `git -C {repo} rev-parse {rev}`; fetch the branch if it lives on the remote",
        )
    return sha


def _is_ancestor(repo: str | os.PathLike[str], older: str, newer: str) -> bool:
    """Whether `older` is an ancestor of `newer` (or the same commit). Between two full shas the answer
    never changes: the `Repository` remembers it."""
    r = at(repo)
    key = (older, newer)
    if key in r.ancestry:
        return r.ancestry[key]
    try:
        run_git(r, "merge-base", "--is-ancestor", older, newer)
        answer = True
    except GitCommandError as exc:
        if exc.status != 1:  # not a "no" (an object is missing, say): ask again next time
            return False
        answer = False
    if _FULL_SHA.fullmatch(older) and _FULL_SHA.fullmatch(newer):
        r.ancestry[key] = answer
    return answer


is_ancestor = _is_ancestor


def git_dir(repo: str | os.PathLike[str]) -> Path:
    """The repository's git directory (absolute)."""
    handle = at(repo).ref_reader()
    if handle is not None:
        return Path(handle.git_dir)
    return Path(git_text(repo, "rev-parse", "--absolute-git-dir"))


def read_file_at(repo: str | os.PathLike[str], rev: str, path: str) -> str | None:
    """The text of `path` at `rev`; None when the file does not exist there."""
    r = at(repo)
    if _FULL_SHA.fullmatch(rev) is None:
        fast = _read_ref(r, rev)  # HEAD or a full ref name, read from its file: then read at its sha
        if not isinstance(fast, str):
            return _read_file_at(r, rev, path)
        rev = fast
    key = (rev, path)
    if key not in r.files_at:
        text = _read_file_at(r, rev, path)
        if text is not None and len(text) > _FILE_AT_MAX_CHARS:
            return text
        if len(r.files_at) >= _FILES_AT_MAX:
            r.files_at.clear()
        r.files_at[key] = text
    return r.files_at[key]


def _read_file_at(repo: Repository, rev: str, path: str) -> str | None:
    if _FULL_SHA.fullmatch(rev) is not None and "\n" not in path:  # the long-lived reader: no process
        got = _object_at(repo, f"{rev}:{path}")
        if got is None:
            _resolve(repo, rev)
            return None
        return got[2].decode("utf-8", "replace") if got[1] == b"blob" else None
    # One process in the common case; only a miss pays for telling "no such file" from "no such revision".
    out = run_git(repo, "cat-file", "--batch", data=f"{rev}:{path}\n".encode())
    header, _, rest = out.partition(b"\n")
    if header.endswith(b" missing") or header.endswith(b" ambiguous"):
        _resolve(repo, rev)
        return None
    _oid, kind, size = header.decode().rsplit(" ", 2)
    if kind != "blob":
        return None
    return rest[: int(size)].decode("utf-8", "replace")


def is_symlink_at(repo: str | os.PathLike[str], rev: str, path: str) -> bool:
    """True when `path` at `rev` is a symbolic link (mode 120000), whose blob is a link target, not content."""
    r = at(repo)
    sha = _resolve(r, rev)
    parent, _, name = path.rpartition("/")
    if name and not path.startswith("/") and "//" not in path and "\n" not in path:
        got = _object_at(r, f"{sha}:{parent}" if parent else f"{sha}^{{tree}}")  # the folder's tree: no process
        if got is None or got[1] != b"tree":
            return False  # no such folder at that commit
        try:
            entries = tree_entries_from_data(got[2])
        except ValueError:  # a tree GitPython refuses to read: git itself answers below
            entries = None
        if entries is not None:
            return any(entry == name and mode == 0o120000 for _sha, mode, entry in entries)
    out = run_git(r, "ls-tree", "-z", sha, "--", path)
    return out.startswith(b"120000 ")


def tree_hash(repo: str | os.PathLike[str], rev: str = "HEAD") -> str:
    r = at(repo)
    got = _object_at(r, f"{_resolve(r, rev)}^{{tree}}")
    if got is None:  # pragma: no cover - a commit always has its tree
        raise PlanRunnerError(what=f"the tree of {rev!r} cannot be read in {repo}", why="its object is missing",
                              fix=f"run `git -C {repo} fsck`, then run again")
    return got[0]


def current_branch(repo: str | os.PathLike[str]) -> str | None:
    """The branch checked out (its name under refs/heads/), None when HEAD is detached. Read from the HEAD
    file when it is a plain one; git itself is asked otherwise."""
    handle = at(repo).ref_reader()
    if handle is not None:
        head = Path(handle.git_dir) / "HEAD"
        try:
            text = head.read_text(encoding="utf-8") if not head.is_symlink() else ""
        except (OSError, UnicodeDecodeError):
            text = ""
        if text.startswith("ref: refs/heads/") and text.endswith("\n") and text.count("\n") == 1:
            return text[len("ref: refs/heads/"):-1] or None
        if _FULL_SHA.fullmatch(text.strip()):
            return None  # detached
    try:
        name = git_text(repo, "symbolic-ref", "--quiet", "HEAD")
    except GitCommandError:
        return None
    return name.removeprefix("refs/heads/") if name.startswith("refs/heads/") else None


def remotes(repo: str | os.PathLike[str]) -> list[str]:
    """The remotes configured in `repo` (asked once per `Repository`: plan-runner adds none). Raises
    GitCommandError when `repo` is not a repository."""
    r = at(repo)
    if r.remotes is None:
        r.remotes = run_git(r, "remote").decode().split()
    return list(r.remotes)
