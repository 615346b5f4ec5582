"""Reading one repository: refs (from their files where plain), objects through the long-lived reader, files at a
commit, ancestry, the remotes configured. Objects never change, so what is read at a full sha is remembered."""

from __future__ import annotations

import re
from pathlib import Path

from git import Repo
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError
from git.objects.fun import tree_entries_from_data
from git.refs import SymbolicReference

from runner.adapters.git.invoke import CatFile, git_text, run_git
from runner.core.errors import PlanRunnerError


# Branch-like refs are read from the ref files by GitPython (loose, then packed-refs) instead of a
# `git rev-parse` process each: a session asks for them a dozen times. Anything else (a sha to
# verify, `main`, a tag to peel), an odd name, or a reftable repository goes to git itself.
_PLAIN_REF = re.compile(r"HEAD|refs/(?:heads|remotes|plan-runner)(?:/[A-Za-z0-9_][A-Za-z0-9._+-]*)+")
_repos: dict[str, Repo | None] = {}


def _key(repo: Path | str) -> str:
    return str(Path(repo).resolve())


def _ref_reader(repo: Path | str) -> Repo | None:
    key = _key(repo)
    if key not in _repos:
        try:
            opened = Repo(key)
        except (InvalidGitRepositoryError, NoSuchPathError):
            return None  # not cached: it may become a repository; git will say what is wrong
        handle = None if (Path(opened.common_dir) / "reftable").is_dir() else opened
        _repos[key] = handle
    return _repos[key]


def _read_ref(repo: Path | str, ref: str) -> str | None | bool:
    """The sha of a plain ref read from its file; None when absent; False when git must be asked."""
    if not _PLAIN_REF.fullmatch(ref) or ref.endswith(".lock") or "/." in ref or ".." in ref:
        return False
    handle = _ref_reader(repo)
    if handle is None:
        return False
    try:
        return SymbolicReference.dereference_recursive(handle, ref)
    except ValueError:  # absent, or HEAD on an unborn branch
        return None
    except (OSError, TypeError):
        return False


def objects_dir(repo: Path | str) -> Path:
    """The object store of `repo` (shared by all its worktrees)."""
    handle = _ref_reader(repo)
    if handle is not None:
        return Path(handle.common_dir) / "objects"
    return Path(repo) / git_text(repo, "rev-parse", "--git-path", "objects")


_objects: dict[str, CatFile] = {}


def cat_file(repo: Path | str) -> CatFile:
    """The repository's one long-lived reader, for objects named from a full sha (`<sha>`, `<sha>:<path>`,
    `<sha>^{tree}`): objects never change, so it answers for the whole process (the state store reads
    through it too)."""
    key = _key(repo)
    cat = _objects.get(key)
    if cat is None or not cat.alive():
        cat = _objects[key] = CatFile(key)
    return cat


def close_cat_file(repo: Path | str) -> None:
    cat = _objects.pop(_key(repo), None)
    if cat is not None:
        cat.close()


def _object_at(repo: Path | str, spec: str) -> tuple[str, bytes, bytes] | None:
    return cat_file(repo).get_with_sha(spec)


# Objects never change: a sha once verified as a commit, and a file read at a full sha, are
# remembered for the rest of the process (a session asks for the same few several times).
_FULL_SHA = re.compile(r"[0-9a-f]{40}")
_known_commits: set[tuple[str, str]] = set()
_files_at: dict[tuple[str, str, str], str | None] = {}
_FILES_AT_MAX, _FILE_AT_MAX_CHARS = 64, 1 << 20


def ref_sha(repo: Path | str, ref: str) -> str | None:
    """The commit a ref points at, or None when it does not exist."""
    fast = _read_ref(repo, ref)
    if fast is not False:
        return fast  # type: ignore[return-value]
    full = _FULL_SHA.fullmatch(ref) is not None
    if full and (_key(repo), ref) in _known_commits:
        return ref
    if full:
        got = _object_at(repo, f"{ref}^{{commit}}")
        if got is None:
            return None
        if got[0] == ref:
            _known_commits.add((_key(repo), ref))
        return got[0]
    try:
        sha = git_text(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}") or None
    except GitCommandError:
        return None
    if full and sha == ref:
        _known_commits.add((_key(repo), ref))
    return sha


def head_sha(repo: Path | str) -> str:
    """The commit HEAD points at (an error when there is none)."""
    return _resolve(Path(repo), "HEAD")


def _resolve(repo: Path, rev: str) -> str:
    sha = ref_sha(repo, rev)
    if sha is None:
        raise PlanRunnerError(
            what=f"git revision {rev!r} does not exist in {repo}",
            why="the branch or commit was deleted, never fetched, or the name is misspelt",
            fix=f"check `git -C {repo} rev-parse {rev}`; fetch the branch if it lives on the remote",
        )
    return sha


_ancestry: dict[tuple[str, str, str], bool] = {}


def _is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """Whether `older` is an ancestor of `newer` (or the same commit). Between two full shas the answer
    never changes: it is remembered for the rest of the process."""
    key = (_key(repo), older, newer)
    if key in _ancestry:
        return _ancestry[key]
    try:
        run_git(repo, "merge-base", "--is-ancestor", older, newer)
        answer = True
    except GitCommandError as exc:
        if exc.status != 1:  # not a "no" (an object is missing, say): ask again next time
            return False
        answer = False
    if _FULL_SHA.fullmatch(older) and _FULL_SHA.fullmatch(newer):
        _ancestry[key] = answer
    return answer


is_ancestor = _is_ancestor


def git_dir(repo: Path | str) -> Path:
    """The repository's git directory (absolute)."""
    handle = _ref_reader(repo)
    if handle is not None:
        return Path(handle.git_dir)
    return Path(git_text(repo, "rev-parse", "--absolute-git-dir"))


def read_file_at(repo: Path, rev: str, path: str) -> str | None:
    """The text of `path` at `rev`; None when the file does not exist there."""
    if _FULL_SHA.fullmatch(rev) is None:
        fast = _read_ref(repo, rev)  # HEAD or a full ref name, read from its file: then read at its sha
        if not isinstance(fast, str):
            return _read_file_at(repo, rev, path)
        rev = fast
    key = (_key(repo), rev, path)
    if key not in _files_at:
        text = _read_file_at(repo, rev, path)
        if text is not None and len(text) > _FILE_AT_MAX_CHARS:
            return text
        if len(_files_at) >= _FILES_AT_MAX:
            _files_at.clear()
        _files_at[key] = text
    return _files_at[key]


def _read_file_at(repo: Path, rev: str, path: str) -> str | None:
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


def is_symlink_at(repo: Path, rev: str, path: str) -> bool:
    """True when `path` at `rev` is a symbolic link (mode 120000), whose blob is a link target, not content."""
    sha = _resolve(repo, rev)
    parent, _, name = path.rpartition("/")
    if name and not path.startswith("/") and "//" not in path and "\n" not in path:
        got = _object_at(repo, f"{sha}:{parent}" if parent else f"{sha}^{{tree}}")  # the folder's tree: no process
        if got is None or got[1] != b"tree":
            return False  # no such folder at that commit
        try:
            entries = tree_entries_from_data(got[2])
        except ValueError:  # a tree GitPython refuses to read: git itself answers below
            entries = None
        if entries is not None:
            return any(entry == name and mode == 0o120000 for _sha, mode, entry in entries)
    out = run_git(repo, "ls-tree", "-z", sha, "--", path)
    return out.startswith(b"120000 ")


def tree_hash(repo: Path, rev: str = "HEAD") -> str:
    got = _object_at(repo, f"{_resolve(repo, rev)}^{{tree}}")
    if got is None:  # pragma: no cover - a commit always has its tree
        raise PlanRunnerError(what=f"the tree of {rev!r} cannot be read in {repo}", why="its object is missing",
                              fix=f"run `git -C {repo} fsck`, then run again")
    return got[0]


def current_branch(repo: Path) -> str | None:
    """The branch checked out (its name under refs/heads/), None when HEAD is detached. Read from the HEAD
    file when it is a plain one; git itself is asked otherwise."""
    handle = _ref_reader(repo)
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


_remotes: dict[str, list[str]] = {}


def remotes(repo: Path | str) -> list[str]:
    """The remotes configured in `repo` (asked once per process: plan-runner adds none). Raises
    GitCommandError when `repo` is not a repository."""
    key = _key(repo)
    if key not in _remotes:
        _remotes[key] = run_git(repo, "remote").decode().split()
    return list(_remotes[key])
