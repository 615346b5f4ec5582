"""Work trees: plan-runner's own linked work tree of a plan (added, attached, released, removed), the user's work
trees that hold a branch, and plan-runner's own commits in a tree (the agent's leftovers, its corrections), made
from objects."""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from git.exc import GitCommandError

from runner.adapters.git.invoke import _NO_SIGN, REVERT_TRAILER, WIP_TRAILER, _fail, git_text, run_git, stderr_of
from runner.adapters.git.objects import _resolve, current_branch, objects_dir, ref_sha, tree_hash
from runner.core.errors import PlanRunnerError

_LIST_TRIES = 5
_held = threading.local()  # the lock files this thread holds (`_worktrees_locked` is re-entrant per thread)


def worktrees_on(repo: str | os.PathLike[str], branch: str, *, own: Path | None = None) -> list[Path]:
    """The work trees of `repo` (the user's main one and any linked one) with `branch` checked out, but
    `own` (plan-runner's own work tree of the plan); a work tree whose folder is gone does not count.

    Read under the lock of plan-runner's `worktree add`, `remove` and `prune`: `git worktree list` fails outright
    ("failed to read .git/worktrees/<name>/commondir") on a registration another session's `add` has made and
    not yet finished (CI24: twenty plans at once in one repository). An `add` git runs for someone else is not
    under that lock: the same failure a moment later is read again, a few times."""
    with _worktrees_locked(repo):
        for attempt in range(_LIST_TRIES):
            try:
                out = run_git(repo, "worktree", "list", "--porcelain", "-z").decode("utf-8", "surrogateescape")
                break
            except GitCommandError as exc:
                if attempt == _LIST_TRIES - 1 or "/worktrees/" not in stderr_of(exc):
                    raise _fail(f"could not list the work trees of {repo}", exc,
                                f"if no git command is running in this repository, `git -C {repo} worktree prune` "
                                "removes a registration a stopped `git worktree add` left half made; then run "
                                "again") from None
                time.sleep(0.05 * (attempt + 1))
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


def _refuse_checked_out(repo: str | os.PathLike[str], branch: str, own: Path | None) -> None:
    holders = worktrees_on(repo, branch, own=own)
    if holders:
        raise PlanRunnerError(
            what=f"the work branch {branch!r} is checked out in {holders[0]}",
            why="plan-runner moves its work branch as a ref only; moving it under a checked-out work tree would "
                "leave your files and index disagreeing with the branch",
            fix=f"switch that work tree to another branch (`git -C {holders[0]} switch -`, or `git switch main`), "
                "then run again; to look at the work meanwhile: `git log " + branch + "` or `git worktree add "
                "/tmp/look " + branch + " --detach`")


@contextmanager
def _worktrees_locked(repo: str | os.PathLike[str]):
    """Held around every `git worktree add`, `remove` and `prune` of plan-runner's: a prune in one session would
    otherwise take the registration another session's `worktree add` has just made and not yet finished
    (.git/worktrees/<name> without its gitdir), and that session fail (twenty plans at once in one repository)."""
    path = objects_dir(repo).parent / "plan-runner-worktrees.lock"
    key = os.path.realpath(path)
    held = _held.__dict__.setdefault("paths", set())
    if key in held:  # this thread holds it already (an add that first reads the list): flock is per open file
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            fcntl.flock(fh, fcntl.LOCK_UN)


def attach_tree(repo: str | os.PathLike[str], tree: Path, branch: str) -> Path:
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


def remove_tree(repo: str | os.PathLike[str], tree: Path) -> None:
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


def is_dirty(repo: str | os.PathLike[str]) -> bool:
    """True when there are staged, unstaged or untracked (not ignored) changes."""
    return bool(run_git(repo, "status", "--porcelain", "-z", "--untracked-files=all").strip())


def commit_leftovers(repo: str | os.PathLike[str], message_prefix: str = "plan-runner: WIP") -> str | None:
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


def has_checkout(tree: str | os.PathLike[str]) -> bool:
    """False for a work tree added with `--no-checkout` that no git command gave an index since (plan-runner's
    own work tree of a plan): its files are not on disk, so a command that reads the work tree would see every
    file deleted."""
    return Path(tree, git_text(tree, "rev-parse", "--path-format=absolute", "--git-path", "index")).exists()


def _tree_with(repo: str | os.PathLike[str], start: str, changes: dict[str, str | None], env: dict[str, str]) -> str:
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


def commit_files(repo: str | os.PathLike[str], changes: dict[str, str | None], message: str) -> str:
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
