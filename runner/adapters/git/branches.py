"""The work branch: created, fetched, moved forward by compare-and-swap (never rewritten), committed to from
objects, and pushed with a lease."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from git.exc import GitCommandError

from runner.adapters.git.invoke import _NO_SIGN, AUTH_REFUSED, REVERT_TRAILER, ZERO, _fail, run_git, stderr_of
from runner.adapters.git.objects import _is_ancestor, _resolve, ref_sha, tree_hash
from runner.adapters.git.trees import _check_path, _refuse_checked_out, _tree_with, attach_tree
from runner.core.errors import PlanRunnerError, StateConflict


def fetch_branch(repo: str | os.PathLike[str], remote: str, branch: str) -> str | None:
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


def move_branch(repo: str | os.PathLike[str], branch: str, new: str, expected: str | None, *, own: Path | None = None) -> None:
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


def fast_forward(repo: str | os.PathLike[str], branch: str, head: str, *, own: Path | None = None) -> None:
    """Move the work branch forward to `head` (a ref move, compare-and-swap on its current value). plan-runner's
    own work tree of the plan (`own`) holds no files, so having the branch checked out there costs nothing."""
    current = _resolve(repo, f"refs/heads/{branch}")
    move_branch(repo, branch, head, current, own=own)


def branch_refspecs(remote: str, *branches: str) -> list[str]:
    """Fetch refspecs bringing each branch into its tracking ref, for a fetch that carries other refs too
    (the plan's state): a glob, so a branch the remote lacks is no error (with --prune its stale tracking
    ref goes). It may also bring branches whose names extend the given one: harmless tracking refs."""
    return [f"+refs/heads/{b}*:refs/remotes/{remote}/{b}*" for b in dict.fromkeys(branches)]


def ensure_work_branch(repo: str | os.PathLike[str], branch: str, base: str, remote: str | None, *, fetched: bool = False,
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


def push_branch(repo: str | os.PathLike[str], branch: str, remote: str, expected_remote_sha: str | None) -> str:
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


def push_ref(repo: str | os.PathLike[str], remote: str, sha: str, ref: str, expected: str | None, *, what: str) -> None:
    """Compare-and-swap push of `sha` to `ref` on the remote: the remote must still be at `expected`."""
    push_leased(repo, remote, [(sha, ref, expected)], what=what)


PUSH_TOKEN_FIX = ("give the action a token that can push: `app-id` and `app-private-key` (plan-runner mints an "
                  "installation token and a new one before a push when it nears its hour), or a `push-token` that "
                  "does not expire within the job, or the job's token with `contents: write`; then run the workflow "
                  "again (docs/github-actions.md, \"A push token from a GitHub App\")")


class PushRefused(PlanRunnerError):
    """The remote refused every token plan-runner had for a push (401/403): nothing of it was pushed."""


def push_leased(repo: str | os.PathLike[str], remote: str, updates: Sequence[tuple[str | None, str, str | None]], *,
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
    if AUTH_REFUSED.search(err):
        raise PushRefused(
            what=f"the remote {remote!r} refused plan-runner's token: {what} was not pushed",
            why=f"the token is expired, revoked or may not write here ({err.splitlines()[-1] if err else 'refused'})",
            fix="the commits are kept in this checkout's local refs, nothing was pushed; " + PUSH_TOKEN_FIX,
        )
    raise PlanRunnerError(
        what=f"could not push {what} to {remote!r}",
        why=err or out or "git push failed",
        fix="check the remote URL, the token's `contents: write` permission and any branch protection rule",
    )


def remote_refs(repo: str | os.PathLike[str], remote: str, pattern: str) -> list[tuple[str, str]] | None:
    """(sha, ref) of the refs on `remote` matching `pattern` (`git ls-remote`); None when the remote cannot be
    asked (unreachable, no credentials)."""
    try:
        out = run_git(repo, "ls-remote", remote, pattern).decode()
    except GitCommandError:
        return None
    return [(sha, ref) for sha, _, ref in (line.partition("\t") for line in out.splitlines()) if ref]


def commit_on_branch(repo: str | os.PathLike[str], branch: str, changes: dict[str, str | None], message: str, *,
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
