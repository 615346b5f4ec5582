"""Work-branch operations and the git evidence of one session.

Every function here is bounded by the session: it looks at `base..head`, a tree,
or one ref, never at the whole history, so the cost does not grow with the age
of the repository (the benchmark measures it at 100,000 commits).

plan-runner's own commits (WIP leftovers, reverts) are made under a fixed
identity with signing and hooks off: an unattended job must not hang on a GPG
prompt or be blocked by a pre-commit hook while saving the agent's work.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from git import Git, Repo
from git.exc import GitCommandError, GitCommandNotFound, InvalidGitRepositoryError, NoSuchPathError
from git.objects.fun import tree_entries_from_data
from git.refs import SymbolicReference

from runner.core.errors import PlanRunnerError, StateConflict
from runner.core.evidence import CommitInfo

WIP_TRAILER = "Plan-Runner-WIP"
REVERT_TRAILER = "Plan-Runner"
BOT_NAME = "plan-runner"
BOT_EMAIL = "plan-runner@users.noreply.github.com"

# Identity and non-interactivity for commands that create objects or talk to a remote.
BOT_ENV = {
    "GIT_AUTHOR_NAME": BOT_NAME,
    "GIT_AUTHOR_EMAIL": BOT_EMAIL,
    "GIT_COMMITTER_NAME": BOT_NAME,
    "GIT_COMMITTER_EMAIL": BOT_EMAIL,
    "GIT_TERMINAL_PROMPT": "0",
}
_NO_SIGN = ("-c", "commit.gpgsign=false")
# plan-runner's own git never runs code or follows indirections someone else could have planted:
# no hooks, no fsmonitor, no replace objects, no pager (docs/security.md, "The mechanism"). Nor does it start
# a background `gc --auto` (a repository of many loose objects): a detached gc still running when the agent starts would
# rewrite .git (info/refs, packs) during the agent's run, read by the guard as the agent's tampering.
_JUDGE_CONFIG = (("core.hooksPath", os.devnull), ("core.fsmonitor", "false"), ("core.untrackedCache", "false"),
                 ("protocol.ext.allow", "never"), ("gc.auto", "0"), ("maintenance.auto", "false"))


def judge_git_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that sanitise one git command, appended after any `GIT_CONFIG_*` entries already in
    this process's environment or in `base` (the push credentials live there and must survive)."""
    merged = {**os.environ, **(base or {})}
    try:
        n = int(merged.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        n = 0
    env = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_PAGER": "cat", "GIT_CONFIG_COUNT": str(n + len(_JUDGE_CONFIG))}
    for i, (key, value) in enumerate(_JUDGE_CONFIG, n):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


def run_git(repo: Path | str, *args: str, data: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """Run one git command in `repo`; stdout as bytes, untouched (no newline stripped).

    Raises GitCommandError on a non-zero exit (its `stderr` says why).
    """
    g = Git(str(repo))
    kwargs: dict[str, Any] = dict(stdout_as_string=False, strip_newline_in_stdout=False,
                                  env={**BOT_ENV, **(env or {}), **judge_git_env(env)})
    try:
        if data is None:
            return g.execute(["git", *args], **kwargs)
        # GitPython feeds stdin from a real file only.
        with tempfile.TemporaryFile() as stdin:
            stdin.write(data)
            stdin.seek(0)
            return g.execute(["git", *args], istream=stdin, **kwargs)
    except GitCommandNotFound as exc:
        raise PlanRunnerError(
            what="git is not installed or not on PATH",
            why=str(exc),
            fix="install git (2.31 or newer) and make sure `git --version` works in this job",
        ) from None


def git_text(repo: Path | str, *args: str) -> str:
    return run_git(repo, *args).decode("utf-8", "replace").strip()


def remote_refs(repo: Path | str, remote: str, pattern: str) -> list[tuple[str, str]] | None:
    """(sha, ref) of the refs on `remote` matching `pattern` (`git ls-remote`); None when the remote cannot be
    asked (unreachable, no credentials)."""
    try:
        out = run_git(repo, "ls-remote", remote, pattern).decode()
    except GitCommandError:
        return None
    return [(sha, ref) for sha, _, ref in (line.partition("\t") for line in out.splitlines()) if ref]


def stderr_of(exc: GitCommandError) -> str:
    err = exc.stderr
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    return (err or "").strip().removeprefix("stderr:").strip().strip("'").strip()


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


class CatFile:
    """One long-lived `git cat-file --batch`: every object read of a repository without a process each."""

    def __init__(self, repo: Path | str) -> None:
        self.proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={**os.environ, **BOT_ENV, **judge_git_env()})
        self._finalizer = weakref.finalize(self, _close, self.proc)
        self._lock = threading.Lock()  # one question and its answer at a time, whichever thread asks
        _open_cats.add(self)

    def get(self, spec: str) -> tuple[bytes, bytes] | None:
        """(type, content) of `spec`, or None when it does not name an object."""
        got = self.get_with_sha(spec)
        return None if got is None else (got[1], got[2])

    def get_with_sha(self, spec: str) -> tuple[str, bytes, bytes] | None:
        """(sha, type, content) of `spec`, or None when it does not name an object. A newline would end the
        query early and start another: such a spec is refused (git names no object with one)."""
        if "\n" in spec or "\r" in spec:
            return None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(spec.encode("utf-8", "surrogateescape") + b"\n")
            self.proc.stdin.flush()
            header = self.proc.stdout.readline()
            if not header:
                raise PlanRunnerError(what="git cat-file stopped answering", why=f"reading {spec!r}",
                                      fix="run again; if it repeats, run `git fsck` on the repository")
            parts = header.split()
            if len(parts) != 3 or not parts[2].isdigit():
                return None  # "<spec> missing" or "ambiguous"
            data = self.proc.stdout.read(int(parts[2]) + 1)[:-1]
        return parts[0].decode(), parts[1], data

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self._finalizer()


def _close(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


_open_cats: weakref.WeakSet = weakref.WeakSet()
atexit.register(lambda: [c.close() for c in list(_open_cats)])
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


def _fail(what: str, exc: GitCommandError, fix: str) -> PlanRunnerError:
    return PlanRunnerError(what=what, why=stderr_of(exc) or str(exc), fix=fix)


def _resolve(repo: Path, rev: str) -> str:
    sha = ref_sha(repo, rev)
    if sha is None:
        raise PlanRunnerError(
            what=f"git revision {rev!r} does not exist in {repo}",
            why="the branch or commit was deleted, never fetched, or the name is misspelt",
            fix=f"check `git -C {repo} rev-parse {rev}`; fetch the branch if it lives on the remote",
        )
    return sha


# --- the work branch -------------------------------------------------------------------------


def fetch_branch(repo: Path, remote: str, branch: str) -> str | None:
    """Fetch one branch of the remote into its tracking ref; None when the remote lacks it."""
    tracking = f"refs/remotes/{remote}/{branch}"
    try:
        run_git(repo, "fetch", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance",
                remote, f"+refs/heads/{branch}:{tracking}")
    except GitCommandError as exc:
        if "couldn't find remote ref" in stderr_of(exc):
            return None
        raise _fail(f"could not fetch {branch!r} from remote {remote!r}", exc,
                    f"check that the remote is reachable: `git -C {repo} fetch {remote}`") from None
    return ref_sha(repo, tracking)


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


ZERO = "0" * 40


def worktrees_on(repo: Path, branch: str, *, own: Path | None = None) -> list[Path]:
    """The work trees of `repo` (the user's main one and any linked one) with `branch` checked out, but
    `own` (plan-runner's own work tree of the plan); a work tree whose folder is gone does not count."""
    out = run_git(repo, "worktree", "list", "--porcelain", "-z").decode("utf-8", "surrogateescape")
    found, path, prunable = [], None, False
    for field in out.split("\0") + [""]:
        if field.startswith("worktree "):
            path, prunable = Path(field[len("worktree "):]), False
        elif field.startswith("prunable"):
            prunable = True
        elif field == f"branch refs/heads/{branch}" and path is not None:
            if not prunable and (own is None or path.resolve() != own.resolve()):
                found.append(path)
    return found


def _refuse_checked_out(repo: Path, branch: str, own: Path | None) -> None:
    holders = worktrees_on(repo, branch, own=own)
    if holders:
        raise PlanRunnerError(
            what=f"the work branch {branch!r} is checked out in {holders[0]}",
            why="plan-runner moves its work branch as a ref only; moving it under a checked-out work tree would "
                "leave your files and index disagreeing with the branch",
            fix=f"switch that work tree to another branch (`git -C {holders[0]} switch -`, or `git switch main`), "
                "then run again; to look at the work meanwhile: `git log " + branch + "` or `git worktree add "
                "/tmp/look " + branch + " --detach`")


def move_branch(repo: Path, branch: str, new: str, expected: str | None, *, own: Path | None = None) -> None:
    """Create `branch` at `new` (`expected` None) or move it forward from `expected` to `new`: a compare-and-
    swap on the ref alone (never a checkout, never a rewrite), refused while one of the user's work trees has
    the branch checked out (it would move under their files). A lost swap is a StateConflict."""
    if new == expected:
        return
    if expected is not None and not _is_ancestor(repo, expected, new):
        raise PlanRunnerError(
            what=f"refusing to move the work branch {branch!r} from {expected[:12]} to {new[:12]}",
            why="plan-runner moves a branch only forward (fast-forward): every commit it holds stays reachable",
            fix=f"inspect `git -C {repo} log {branch}...{new}`; merge by hand if both are wanted, then run again")
    _refuse_checked_out(repo, branch, own)
    try:
        run_git(repo, "update-ref", "-m", f"plan-runner: {branch}", f"refs/heads/{branch}", new, expected or ZERO)
    except GitCommandError as exc:
        raise StateConflict(what=f"the work branch {branch!r} moved while plan-runner was moving it",
                            why=stderr_of(exc) or "compare-and-swap lost",
                            fix="nothing to do: re-read and yield to whoever moved it") from None


def fast_forward(repo: Path, branch: str, head: str, *, own: Path | None = None) -> None:
    """Move the work branch forward to `head` (a ref move, compare-and-swap on its current value). plan-runner's
    own work tree of the plan (`own`) holds no files, so having the branch checked out there costs nothing."""
    current = _resolve(repo, f"refs/heads/{branch}")
    move_branch(repo, branch, head, current, own=own)


# --- plan-runner's own work tree --------------------------------------------------------------


@contextmanager
def _worktrees_locked(repo: Path):
    """Held around every `git worktree add`, `remove` and `prune` of plan-runner's: a prune in one session would
    otherwise take the registration another session's `worktree add` has just made and not yet finished
    (.git/worktrees/<name> without its gitdir), and that session fail (twenty plans at once in one repository)."""
    path = objects_dir(repo).parent / "plan-runner-worktrees.lock"
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def attach_tree(repo: Path, tree: Path, branch: str) -> Path:
    """plan-runner's own linked work tree of one plan (under .git/plan-runner/<plan>/, with its own HEAD), with
    `branch` checked out: the judge commits there (commit_files, from objects), never in the user's work tree,
    and git itself then refuses to check the branch out elsewhere while a session runs.

    It is added with `--no-checkout` and stays without files and index: the judge reads commits, never this
    tree's files (the gates run on a fresh checkout of their own), so nothing here costs in the size of the
    tree. A tree from an older plan-runner (with its files) is made again without them."""
    if (not (tree / ".git").is_file() or ref_sha(tree, "HEAD") is None
            or any(name != ".git" for name in os.listdir(tree)) or has_checkout(tree)):
        import shutil

        shutil.rmtree(tree, ignore_errors=True)
        with _worktrees_locked(repo):
            run_git(repo, "worktree", "prune")
            tree.parent.mkdir(parents=True, exist_ok=True)
            _refuse_checked_out(repo, branch, tree)
            try:
                run_git(repo, "worktree", "add", "--quiet", "--no-checkout", str(tree), branch)
            except GitCommandError as exc:
                raise _fail(f"could not make plan-runner's own work tree for {branch!r} at {tree}", exc,
                            f"run `git -C {repo} worktree prune`, then run again") from None
        return tree
    try:
        if current_branch(tree) != branch:
            _refuse_checked_out(repo, branch, tree)
            run_git(tree, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
    except GitCommandError as exc:
        raise _fail(f"could not check out {branch!r} in plan-runner's own work tree {tree}", exc,
                    f"remove it (`git -C {repo} worktree remove --force {tree}`), then run again") from None
    return tree


def release_tree(tree: Path) -> None:
    """Detach plan-runner's own work tree from the work branch (between sessions the user may check the branch
    out); best effort: a tree left attached is detached by the next session or `plan-runner clean`."""
    if (tree / ".git").is_file():
        try:
            sha = ref_sha(tree, "HEAD")
            if sha is not None:
                run_git(tree, "update-ref", "--no-deref", "-m", "plan-runner: release", "HEAD", sha)
        except GitCommandError:
            pass


def remove_tree(repo: Path, tree: Path) -> None:
    """plan-runner's own work tree gone, folder and registration."""
    import shutil

    with _worktrees_locked(repo):
        if (tree / ".git").is_file():
            try:
                run_git(repo, "worktree", "remove", "--force", "--force", str(tree))
            except GitCommandError:
                pass
        shutil.rmtree(tree, ignore_errors=True)
        try:
            run_git(repo, "worktree", "prune")
        except GitCommandError:
            pass


def branch_refspecs(remote: str, *branches: str) -> list[str]:
    """Fetch refspecs bringing each branch into its tracking ref, for a fetch that carries other refs too
    (the plan's state): a glob, so a branch the remote lacks is no error (with --prune its stale tracking
    ref goes). It may also bring branches whose names extend the given one: harmless tracking refs."""
    return [f"+refs/heads/{b}*:refs/remotes/{remote}/{b}*" for b in dict.fromkeys(branches)]


def ensure_work_branch(repo: Path, branch: str, base: str, remote: str | None, *, fetched: bool = False,
                       tree: Path | None = None) -> str:
    """The work branch, created from `base` on first use, as a ref (never a checkout in `repo`'s work tree);
    returns its head sha. `tree`: plan-runner's own work tree of the plan, attached to the branch then.

    With a remote, the remote's copy of the branch wins when it is ahead (another job
    pushed); a local branch with commits the remote lacks is kept. Diverged copies are
    an error: plan-runner never discards commits to reconcile them. `fetched`: the caller
    fetched both branches into their tracking refs already (`branch_refspecs`, in the same
    fetch as the plan's state): no network operation here.
    """
    local = ref_sha(repo, f"refs/heads/{branch}")
    if remote and fetched:
        remote_head = ref_sha(repo, f"refs/remotes/{remote}/{branch}")
    else:
        remote_head = fetch_branch(repo, remote, branch) if remote else None
    if local is None:
        target = remote_head
        if target is None:
            if remote and fetched:
                remote_base = ref_sha(repo, f"refs/remotes/{remote}/{base}")
            else:
                remote_base = fetch_branch(repo, remote, base) if remote else None
            target = remote_base or _resolve(repo, base)
    elif remote_head is None or remote_head == local or _is_ancestor(repo, remote_head, local):
        target = local
    elif _is_ancestor(repo, local, remote_head):
        target = remote_head
    else:
        raise PlanRunnerError(
            what=f"the work branch {branch!r} differs locally and on {remote!r}",
            why=f"local {local[:12]} and remote {remote_head[:12]} each have commits the other lacks",
            fix=f"merge or rebase one onto the other by hand (`git -C {repo} log {branch}...{remote}/{branch}`), "
                "push, then run plan-runner again",
        )
    move_branch(repo, branch, target, local, own=tree)
    if tree is not None:
        attach_tree(repo, tree, branch)
    return target


def push_branch(repo: Path, branch: str, remote: str, expected_remote_sha: str | None) -> str:
    """Push the work branch if the remote's copy is still `expected_remote_sha` (None: absent).

    Returns the pushed sha. Raises StateConflict when another job moved the branch.
    """
    head = _resolve(repo, f"refs/heads/{branch}")
    ref = f"refs/heads/{branch}"
    if expected_remote_sha and expected_remote_sha != head and not _is_ancestor(repo, expected_remote_sha, head):
        # The remote only moves forward (docs/security.md, "The mechanism"): every commit it holds stays reachable.
        raise PlanRunnerError(
            what=f"refusing to push the work branch {branch!r}: it would drop commits from {remote!r}",
            why=f"the remote's {expected_remote_sha[:12]} is not in the history of {head[:12]}; plan-runner never "
                "force-pushes a rewritten history",
            fix=f"inspect `git -C {repo} log {head}...{expected_remote_sha}`; merge the remote's commits into the "
                "work branch by hand, push, then run again")
    push_ref(repo, remote, head, ref, expected_remote_sha, what=f"the work branch {branch!r}")
    return head


_CONFLICT_REASON = re.compile(r"stale info|fetch first|non-fast-forward|already exists|cannot lock|"
                              r"expected|failed to update|old value|lock", re.IGNORECASE)


def push_ref(repo: Path | str, remote: str, sha: str, ref: str, expected: str | None, *, what: str) -> None:
    """Compare-and-swap push of `sha` to `ref` on the remote: the remote must still be at `expected`."""
    push_leased(repo, remote, [(sha, ref, expected)], what=what)


def push_leased(repo: Path | str, remote: str, updates: Sequence[tuple[str | None, str, str | None]], *,
                what: str, atomic: bool = False) -> None:
    """Push every `(sha or None to delete, ref, expected remote sha or None for absent)`, each with its own
    lease; `atomic`: all land or none does. A lost lease is a StateConflict, anything else a clear error."""
    args = ["push", "--porcelain", "--no-verify", *(["--atomic"] if atomic else [])]
    specs = []
    for sha, ref, expected in updates:
        args.append(f"--force-with-lease={ref}:{expected or ''}")
        specs.append(f"{sha}:{ref}" if sha else f":{ref}")
    try:
        run_git(repo, *args, remote, *specs)
        return
    except GitCommandError as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else str(exc.stdout or "")
        err = stderr_of(exc)
    rejected = [line for line in out.splitlines() if line.startswith("!")]
    # A lease lost on the client is "[rejected] (stale info)"; lost on the server (another push landed between
    # the check and the ref transaction) it is "[remote rejected]" with "cannot lock ref ... expected" on stderr.
    if any("[rejected]" in line or _CONFLICT_REASON.search(line) for line in rejected) or (
            rejected and re.search(r"cannot lock ref|is at [0-9a-f]+ but expected|atomic transaction failed", err)):
        raise StateConflict(
            what=f"{what} moved on {remote!r} since it was read",
            why="another job pushed first; compare-and-swap lost (" + "; ".join(rejected) + ")",
            fix="nothing to do: re-read the state and yield to the job that won",
        )
    raise PlanRunnerError(
        what=f"could not push {what} to {remote!r}",
        why=err or out or "git push failed",
        fix="check the remote URL, the token's `contents: write` permission and any branch protection rule",
    )


# --- leftovers and plan-runner's own commits -------------------------------------------------


def is_dirty(repo: Path) -> bool:
    """True when there are staged, unstaged or untracked (not ignored) changes."""
    return bool(run_git(repo, "status", "--porcelain", "-z", "--untracked-files=all").strip())


def commit_leftovers(repo: Path, message_prefix: str = "plan-runner: WIP") -> str | None:
    """Commit whatever the agent left uncommitted as one WIP commit; None when clean.

    `git add --all` honours .gitignore, so ignored files (caches, secrets in .env)
    are never added. Hooks are skipped: a failing hook must not lose the work.
    """
    status = run_git(repo, "status", "--porcelain", "-z", "--untracked-files=all")
    paths = [p for p in status.split(b"\0") if p.strip()]
    if not paths:
        return None
    message = (f"{message_prefix}: {len(paths)} uncommitted change(s) left by the agent\n\n"
               "Saved by plan-runner so no work is lost; this commit does not count as progress.\n\n"
               f"{WIP_TRAILER}: true\n")
    try:
        run_git(repo, "add", "--all")
        run_git(repo, *_NO_SIGN, "commit", "--quiet", "--no-verify", "--allow-empty", "-F", "-",
                data=message.encode())
    except GitCommandError as exc:
        raise _fail("could not save the agent's uncommitted changes as a WIP commit", exc,
                    f"the changes are still in the work tree of {repo}; commit them by hand") from None
    return _resolve(repo, "HEAD")


def _check_path(path: str) -> None:
    """A path plan-runner may commit: relative, inside the tree, never in .git (checked on the name: nothing on
    disk is followed, since commit_files writes objects, not files)."""
    parts = path.split("/")
    if (not path or path.startswith("/") or "\0" in path
            or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts)):
        raise PlanRunnerError(
            what=f"refusing to write {path!r}: it is outside the repository's work tree",
            why="plan-runner only writes files inside the repository it works on",
            fix="use a path relative to the repository root",
        )


def has_checkout(tree: Path) -> bool:
    """False for a work tree added with `--no-checkout` that no git command gave an index since (plan-runner's
    own work tree of a plan): its files are not on disk, so a command that reads the work tree would see every
    file deleted."""
    return Path(tree, git_text(tree, "rev-parse", "--path-format=absolute", "--git-path", "index")).exists()


def _tree_with(repo: Path, start: str, changes: dict[str, str | None], env: dict[str, str]) -> str:
    """The tree of `start` with `changes` applied (a path to its new text, or None to remove it), built in the
    private index `env` names: no work tree is touched."""
    run_git(repo, "read-tree", start, env=env)
    entries = []  # `--index-info -z`: "mode sha\tpath\0"; mode 0 removes the path
    for path, text in sorted(changes.items()):
        if text is None:
            entries.append(b"0 " + b"0" * 40 + b"\t" + os.fsencode(path) + b"\0")
        else:
            blob = run_git(repo, "hash-object", "-w", "--stdin", data=text.encode("utf-8")).strip()
            entries.append(b"100644 " + blob + b"\t" + os.fsencode(path) + b"\0")
    run_git(repo, "update-index", "--add", "--replace", "-z", "--index-info", data=b"".join(entries), env=env)
    return run_git(repo, "write-tree", env=env).decode().strip()


def commit_files(repo: Path, changes: dict[str, str | None], message: str) -> str:
    """Commit `changes` (path -> new text; None deletes) on HEAD, and nothing else.

    For plan-runner's own corrections (reverting tampering or a rejected flip); the commit carries the
    `Plan-Runner: revert` trailer. Returns the new head, or the unchanged head when the files already had
    that content. The commit is made from objects (a private index read from HEAD, the changed entries
    replaced, `commit-tree`, HEAD moved by compare-and-swap): no file of the work tree is read or written for
    it, so a link the agent left there is never followed, and a work tree without a checkout works alike. A
    work tree with a checkout then follows for those paths only (`read-tree -m -u`: other uncommitted changes
    stay)."""
    for path in changes:
        _check_path(path)
    head = _resolve(repo, "HEAD")
    with tempfile.TemporaryDirectory(prefix="plan-runner-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        try:
            tree = _tree_with(repo, head, changes, env)
            if tree == tree_hash(repo, head):
                return head
            full = f"{message.rstrip()}\n\n{REVERT_TRAILER}: revert\n"
            new = run_git(repo, *_NO_SIGN, "commit-tree", tree, "-p", head, "-F", "-",
                          data=full.encode()).decode().strip()
            run_git(repo, "update-ref", "-m", "plan-runner: revert", "HEAD", new, head)
        except GitCommandError as exc:
            raise _fail("plan-runner could not commit its correction to the work branch", exc,
                        f"inspect `git -C {repo} log -1`; nothing was moved") from None
    if has_checkout(repo):
        try:  # the index and the files of these paths follow, from `head` to `new` (a checkout's own rules)
            run_git(repo, "read-tree", "-m", "-u", head, new)
        except GitCommandError as exc:
            raise _fail("plan-runner committed its correction but could not update the work tree", exc,
                        f"the commit is {new[:12]}; `git -C {repo} checkout -- .` brings the files in line") from None
    return new


# --- evidence --------------------------------------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """`**/` any folders (none included), `*` and `?` within one path component, a trailing `/` a folder."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    if pattern.endswith("/"):
        out.append(".*")
    return re.compile("".join(out), re.DOTALL)


def _matches(path: str, patterns: Iterable[str]) -> bool:
    for p in patterns:
        if any(c in p for c in "*?"):
            if _glob_regex(p).fullmatch(path):
                return True
        elif path == p or (p.endswith("/") and path.startswith(p)):
            return True
    return False


def _trailers(body: str) -> dict[str, str]:
    """Trailers of the message's last paragraph (`Key: value` lines), keys lower-cased."""
    paragraphs = [p for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]
    if len(paragraphs) < 2:  # a subject line alone has no trailers
        return {}
    found: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip().lower()] = value.strip().lower()
    return found


def collect_commits(repo: Path, base_sha: str, head: str, bookkeeping_paths: set[str]) -> tuple[CommitInfo, ...]:
    """The commits in `base_sha..head` along the first parent, oldest first.

    A merge counts with the files it changes relative to its first parent. A commit
    touching nothing but bookkeeping paths (plan, handoff; "dir/" is a prefix), an
    empty commit, or plan-runner's own revert does not count as work.
    """
    if base_sha == head:
        return ()
    try:
        raw = run_git(repo, "log", "--first-parent", "--diff-merges=first-parent", "--no-renames",
                      "--name-only", "-z", "--format=%x1e%H%x1f%an <%ae>%x1f%B%x1f", f"{base_sha}..{head}")
    except GitCommandError as exc:
        raise _fail(f"could not list the commits {base_sha[:12]}..{head}", exc,
                    "make sure both commits exist locally (fetch the work branch)") from None
    commits = []
    for chunk in raw.decode("utf-8", "replace").split("\x1e")[1:]:
        sha, author, body, rest = chunk.split("\x1f", 3)
        files = tuple(dict.fromkeys(p.strip("\n") for p in rest.split("\0") if p.strip("\n")))
        trailers = _trailers(body)
        wip = trailers.get(WIP_TRAILER.lower()) == "true"
        revert = trailers.get(REVERT_TRAILER.lower()) == "revert"
        counts = bool(files) and not revert and not all(_matches(f, bookkeeping_paths) for f in files)
        summary = body.strip().splitlines()[0] if body.strip() else ""
        commits.append(CommitInfo(sha=sha.strip(), summary=summary, author=author, files=files,
                                  counts_as_work=counts, wip=wip))
    return tuple(reversed(commits))


def paths_adding(repo: Path | str, old: str, new: str, needles: Iterable[str]) -> list[str]:
    """The files whose lines added from tree `old` to tree `new` contain any of `needles` (secret values).

    The diff is streamed and read in bounded pieces, so memory stays flat however large the
    change; the needles never appear on a command line (where `ps` would show them)."""
    wanted = sorted({n.encode() for n in needles if n}, key=len, reverse=True)
    if not wanted:
        return []
    keep = max(len(n) for n in wanted) - 1  # a needle may straddle two pieces of one long line
    proc = Git(str(repo)).execute(
        ["git", "-c", "core.quotePath=false", "diff", "--no-color", "--no-ext-diff", "--no-renames", "--text",
         "--unified=0", old, new, "--"], as_process=True, env={**BOT_ENV})
    found: list[str] = []
    current, in_header, adding, continuing, carry = "", False, False, False, b""
    popen = proc.proc
    assert popen is not None and popen.stdout is not None  # as_process: a running git with its output on a pipe
    stream = popen.stdout
    try:
        for piece in iter(lambda: stream.readline(1 << 20), b""):
            if not continuing:
                carry = b""
                if piece.startswith(b"diff --git "):
                    in_header, adding = True, False
                elif in_header and piece.startswith(b"+++ "):
                    current = piece[4:].rstrip(b"\n").rstrip(b"\t").decode("utf-8", "replace").removeprefix("b/")
                elif piece.startswith(b"@@"):
                    in_header, adding = False, False
                elif not in_header:
                    adding = piece.startswith(b"+")
            if in_header and current and current not in found and any(n in current.encode() for n in wanted):
                found.append(current)  # the secret is the file's name
            if adding and current not in found:
                text = carry + piece
                if any(n in text for n in wanted):
                    found.append(current)
                carry = text[-keep:] if keep else b""
            continuing = not piece.endswith(b"\n")
    finally:
        stream.close()
        code = popen.wait()
    if code != 0:
        raise PlanRunnerError(what=f"could not compare {old[:12]} with {new[:12]} to look for secrets",
                              why=f"git diff exited with code {code}",
                              fix=f"check the repository with `git -C {repo} fsck`, then run again")
    return found


def commits_carrying(repo: Path | str, old: str, new: str, needles: Iterable[str]) -> list[str]:
    """The commits between `old` and `new` whose object itself (message, author and committer names and
    emails, any extra header) holds one of `needles`, and "a file name" when a changed path holds one:
    they are pushed as they are, not only the files' lines.
    Read from `git log --format=raw` (the commit as stored); the needles never reach a command line."""
    wanted = sorted({n.encode() for n in needles if n}, key=len, reverse=True)
    if not wanted:
        return []
    raw = Git(str(repo)).execute(["git", "log", "--no-color", "--format=raw", "-z", f"{old}..{new}", "--"],
                                 env={**BOT_ENV}, stdout_as_string=False)
    found = []
    for chunk in raw.split(b"\0"):
        if chunk.startswith(b"commit ") and any(n in chunk for n in wanted):
            found.append(f"commit {chunk[7:47].decode('ascii', 'replace')[:12]} (its message or author/committer)")
    names = Git(str(repo)).execute(["git", "diff", "--no-renames", "--name-only", "-z", old, new, "--"],
                                   env={**BOT_ENV}, stdout_as_string=False)
    if any(n in name for name in names.split(b"\0") for n in wanted):
        found.append("a file name")
    return found


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


def protected_paths_changed(repo: Path, base_sha: str, head: str, paths: list[str]) -> list[str]:
    """Which of `paths` (a trailing "/" makes a prefix) differ between base and head.

    A tree-to-tree diff: a file changed and changed back within the session is untouched.
    """
    if not paths:
        return []
    try:
        raw = run_git(repo, "diff", "--name-only", "--no-renames", "-z", base_sha, head, "--")
    except GitCommandError as exc:
        raise _fail(f"could not diff {base_sha[:12]}..{head}", exc,
                    "make sure both commits exist locally (fetch the work branch)") from None
    changed = [p for p in raw.decode("utf-8", "replace").split("\0") if p]
    return [p for p in paths if any(_at_or_above(c, [p]) for c in changed)]


_diffs: dict[tuple[str, str, str], list[tuple[str, str]]] = {}


def _diff_status(repo: Path, base_sha: str, head: str) -> list[tuple[str, str]]:
    """(status letter, path) for every file that differs between two commits, renames as delete + add.
    Between two full shas it never changes: the last one is remembered (a session asks twice)."""
    key = (_key(repo), base_sha, head)
    if key in _diffs:
        return list(_diffs[key])
    found = _diff_status_of(repo, base_sha, head)
    if _FULL_SHA.fullmatch(base_sha) and _FULL_SHA.fullmatch(head):
        _diffs.clear()
        _diffs[key] = list(found)
    return found


def _diff_status_of(repo: Path, base_sha: str, head: str) -> list[tuple[str, str]]:
    try:
        raw = run_git(repo, "diff", "--name-status", "--no-renames", "-z", base_sha, head, "--")
    except GitCommandError as exc:
        raise _fail(f"could not diff {base_sha[:12]}..{head}", exc,
                    "make sure both commits exist locally (fetch the work branch)") from None
    fields = raw.decode("utf-8", "surrogateescape").split("\0")
    return [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2) if fields[i]]


def display_path(path: str) -> str:
    """A path git gave as bytes that are not UTF-8 (read with surrogateescape, so it can be restored) in a
    form every record can hold: each such byte as `\\xNN`. Plain paths are unchanged."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _at_or_above(path: str, patterns: Iterable[str]) -> bool:
    """`path` (a file, a symlink or a submodule: what a diff lists) matches a pattern or sits at or above what
    it protects: `.github` or `.github/workflows` committed as a symlink changes `.github/workflows/` (protection
    by resolved path, not by the string)."""
    if _matches(path, patterns):
        return True
    for p in patterns:
        literal = re.split(r"[*?\[]", p)[0]  # a glob protects what lies under its literal folder
        if (literal if literal.endswith("/") or literal != p else literal + "/").startswith(path + "/"):
            return True
    return False


def files_changed(repo: Path, base_sha: str, head: str, patterns: list[str]) -> list[str]:
    """The files (not the patterns) matching `patterns` ("dir/" is a prefix) that differ between base and head,
    and any entry at or above a protected path (`_at_or_above`); shallower first, so a revert removes a symlinked
    folder before it writes the files that were under it."""
    if not patterns:
        return []
    found = [path for _status, path in _diff_status(repo, base_sha, head) if _at_or_above(path, patterns)]
    return sorted(dict.fromkeys(found), key=lambda p: (p.count("/"), p))


def deleted_files(repo: Path, base_sha: str, head: str) -> list[str]:
    return [path for status, path in _diff_status(repo, base_sha, head) if status == "D"]


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


__all__ = [
    "attach_tree", "collect_commits", "commit_files", "commit_leftovers", "commits_carrying", "current_branch",
    "deleted_files", "display_path", "ensure_work_branch", "fetch_branch", "files_changed", "head_sha",
    "is_dirty", "move_branch", "objects_dir", "paths_adding", "protected_paths_changed", "push_branch",
    "push_ref", "read_file_at", "ref_sha", "release_tree", "remotes", "remove_tree", "run_git", "has_checkout",
    "tree_hash", "worktrees_on"
]


def commit_on_branch(repo: Path, branch: str, changes: dict[str, str | None], message: str, *,
                     own: Path | None = None, merge: str | None = None) -> str | None:
    """Commit `changes` (path -> new text; None deletes) on top of `branch` and move it forward (compare-and-
    swap), from objects only: no work tree is read or written. Returns the new head, None when nothing changed.
    `merge`: a commit merged in too (its tree merged by `git merge-tree`), when it conflicts in no other path
    than those `changes` decides; otherwise a plain commit."""
    for path in changes:
        _check_path(path)
    head = _resolve(repo, f"refs/heads/{branch}")
    start, parents = head, ["-p", head]
    if merge is not None and not _is_ancestor(repo, merge, head):
        got = subprocess.run(["git", "merge-tree", "--write-tree", "--name-only", "--no-messages", head, merge],
                             cwd=repo, capture_output=True, text=True, check=False)
        lines = got.stdout.splitlines() if got.returncode in (0, 1) else []
        if lines and not set(lines[1:]) - set(changes):
            start, parents = lines[0].strip(), ["-p", head, "-p", merge]
    with tempfile.TemporaryDirectory(prefix="plan-runner-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        try:
            tree = _tree_with(repo, start, changes, env)
            if tree == tree_hash(repo, head) and len(parents) == 2:
                return None
            new = run_git(repo, *_NO_SIGN, "commit-tree", tree, *parents, "-F", "-",
                          data=f"{message.rstrip()}\n\n{REVERT_TRAILER}: finish\n".encode()).decode().strip()
        except GitCommandError as exc:
            raise _fail(f"plan-runner could not commit to the work branch {branch!r}", exc,
                        f"inspect `git -C {repo} log -1 {branch}`; nothing was moved") from None
    move_branch(repo, branch, new, head, own=own)
    return new
