"""Start over and clean up locally: `plan-runner reset PLAN` and `plan-runner clean [PLAN]`.

`reset` forgets a plan's progress (its state ref and work branch, kept under a backup ref first);
`clean` frees disk only (agent areas, plan-runner's own work trees, finished demo folders) and never touches
a ref. `remove_area` is the one removal of a plan's agent area, for anyone who needs it.
"""

from __future__ import annotations

import os
import pwd
import re
import tempfile
from pathlib import Path

from runner.adapters import clock as wallclock
from runner.adapters.git import work as gitwork
from runner.adapters.sandbox import agent_clone, fsafe
from runner.adapters.sandbox.identity import USER_PREFIX
from runner.adapters.store.layout import BACKUP, NAMESPACE
from runner.core.errors import PlanRunnerError

DEMO_PREFIX = "plan-runner-demo-"


def remove_area(repo: Path, plan_id: str) -> Path | None:
    """The plan's agent area (its clone, homes and the gates' checkout) removed, never by following a link (its
    files are plan-runner's user's: a room runs as its uid). An area an older version's pooled agent user wrote
    may hold that user's files: without root they stay, and the error says how to remove them. Returns the folder
    removed, None when there was none."""
    root = agent_clone.area_for(repo, plan_id).root
    if not os.path.lexists(root):
        return None
    try:
        fsafe.remove(root, below=root.parent)
    except OSError as exc:
        problem: str | None = f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc)
    else:
        problem = None
    if os.path.lexists(root):
        foreign = _foreign_owner(root)
        why = (f"some of its files belong to {foreign}, the pooled agent user an older plan-runner ran the agent as"
               if foreign and foreign.startswith(USER_PREFIX) else
               f"some of its files belong to {foreign}" if foreign else
               f"removing it failed: {problem or 'files were left'}")
        raise PlanRunnerError(what=f"could not remove the agent area {root}", why=why,
                              fix=f"remove it as root: `sudo rm -rf {root}`" if foreign else
                              f"look at what is left in {root}, then run the command again")
    return root


def _foreign_owner(root: Path) -> str | None:
    """The name (or uid) of the first user other than this one who owns something in `root`; links not followed."""
    me = os.geteuid()
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            try:
                uid = os.lstat(os.path.join(folder, name)).st_uid
            except OSError:
                continue
            if uid != me:
                try:
                    return pwd.getpwuid(uid).pw_name
                except KeyError:
                    return f"uid {uid}"
    return None


_POOL_NAME = re.compile(re.escape(USER_PREFIX) + r"(-u[0-9]+)?(-[0-9]+)?")


def old_pool_users() -> list[str]:
    """The pooled agent users a plan-runner older than the room made (`useradd --system`, home /nonexistent):
    nothing makes them now."""
    return sorted(u.pw_name for u in pwd.getpwall()
                  if _POOL_NAME.fullmatch(u.pw_name) and u.pw_dir == "/nonexistent" and u.pw_uid != 0)


def remove_old_pool_users() -> list[str]:
    """What to do about the old pooled users, in words: they are system users (other tools may list them), so
    plan-runner names them and the command rather than deleting accounts itself."""
    names = old_pool_users()
    if not names:
        return []
    return [f"pooled agent users an older plan-runner made remain ({', '.join(names)}); nothing uses them now: "
            f"remove them with `sudo userdel NAME` for each"]


def clean_plan(repo: Path, plan_id: str, scratch: Path) -> list[str]:
    """Disk of one plan: its agent area and plan-runner's own work tree. Its state and work branch stay."""
    done = []
    area = remove_area(repo, plan_id)
    if area is not None:
        done.append(f"removed the agent area {area}")
    from runner.drivers.session.context import judge_tree_at

    tree = judge_tree_at(scratch, plan_id)
    if os.path.lexists(tree):
        gitwork.remove_tree(repo, tree)
        done.append(f"removed plan-runner's work tree {tree}")
    return done


def demo_folders() -> list[Path]:
    """Demo repositories `plan-runner demo` left in the temp folder (plan-runner's user's own)."""
    base = Path(tempfile.gettempdir())
    return sorted(p for p in base.glob(f"{DEMO_PREFIX}*")
                  if p.is_dir() and not p.is_symlink() and p.stat().st_uid == os.geteuid())


def demo_in_use(folder: Path) -> bool:
    """A demo still running holds its plan's run lock (runner.drivers.session.lock)."""
    import fcntl

    for lock in (folder / "repo" / ".git" / "plan-runner").glob("*/run.lock"):
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


def clean_demo(folder: Path) -> list[str]:
    """A demo folder and its plans' agent areas (a demo still running is left alone)."""
    repo = folder / "repo"
    if demo_in_use(folder):
        return [f"left the demo folder {folder}: its demo is running"]
    done = []
    if (repo / ".git").is_dir():
        for plan_id in _state_ids(repo):
            area = remove_area(repo, plan_id)
            if area is not None:
                done.append(f"removed the agent area {area}")
    fsafe.remove(folder, below=folder.parent)
    done.append(f"removed the demo folder {folder}")
    return done


def _state_ids(repo: Path) -> list[str]:
    out = gitwork.run_git(repo, "for-each-ref", "--format=%(refname)", f"{NAMESPACE}/").decode().split()
    return [ref.removeprefix(f"{NAMESPACE}/") for ref in out]


def reset_plan(repo: Path, plan_id: str, branch: str, scratch: Path,
               remote: str | None = None) -> tuple[str | None, list[str]]:
    """Forget a plan's progress: its state ref and work branch are kept under one backup ref each
    (refs/plan-runner/backup/<plan>/<time>/...), then deleted, and its local folders removed; with a remote
    that holds them, there too (one atomic push with leases: else the next run would fetch them back).
    Returns the backup prefix (None when there was nothing to keep) and what was done."""
    state = f"{NAMESPACE}/{plan_id}"
    state_sha = gitwork.ref_sha(repo, state)
    branch_sha = gitwork.ref_sha(repo, f"refs/heads/{branch}")
    from runner.drivers.session.context import judge_tree_at

    holders = gitwork.worktrees_on(repo, branch, own=judge_tree_at(scratch, plan_id))
    if branch_sha and holders:
        raise PlanRunnerError(
            what=f"the work branch {branch!r} is checked out in {holders[0]}",
            why="`reset` deletes the work branch (kept under a backup ref); git cannot delete a checked-out branch",
            fix=f"switch that work tree to another branch (`git -C {holders[0]} switch main`), then reset again")
    done = clean_plan(repo, plan_id, scratch)
    prefix = f"{BACKUP}/{plan_id}/{wallclock.now().strftime('%Y%m%dT%H%M%S.%fZ')}"
    if remote:
        done += _reset_remote(repo, remote, plan_id, branch, prefix)
    if not (state_sha or branch_sha):
        return (prefix if done and remote else None), done
    if state_sha or branch_sha:
        lines = []
        if state_sha:
            lines += [f"create {prefix}/state {state_sha}", f"delete {state} {state_sha}"]
        if branch_sha:
            lines += [f"create {prefix}/branch {branch_sha}", f"delete refs/heads/{branch} {branch_sha}"]
        # One transaction: the backup exists exactly when the originals are gone.
        gitwork.run_git(repo, "update-ref", "--stdin", data=("\n".join(lines) + "\n").encode())
        done.append(f"the old state is kept: {prefix}/state" if state_sha else "there was no state")
        if branch_sha:
            done.append(f"the old work branch is kept: {prefix}/branch (`git branch {branch}-old {prefix}/branch` "
                        "brings it back)")
    for leftover in (scratch / plan_id, scratch / "reports" / f"{plan_id}-park.md",
                     scratch / "reports" / f"{plan_id}-finished.md"):
        if os.path.lexists(leftover) and leftover.name != "run.lock":
            _remove_own(leftover, keep=scratch / plan_id / "run.lock")
    return prefix, done


def _reset_remote(repo: Path, remote: str, plan_id: str, branch: str, prefix: str) -> list[str]:
    from runner.adapters.store.layout import TRACKING

    seen_state = gitwork.ref_sha(repo, f"{TRACKING}/{remote}/{plan_id}")
    seen_branch = gitwork.ref_sha(repo, f"refs/remotes/{remote}/{branch}")
    updates = []
    if seen_state:
        updates += [(seen_state, f"{prefix}/state", None), (None, f"{NAMESPACE}/{plan_id}", seen_state)]
    if seen_branch:
        updates += [(seen_branch, f"{prefix}/branch", None), (None, f"refs/heads/{branch}", seen_branch)]
    if not updates:
        return []
    gitwork.push_leased(repo, remote, updates, what=f"the state of plan {plan_id!r}", atomic=True)
    for ref in (f"{TRACKING}/{remote}/{plan_id}", f"refs/remotes/{remote}/{branch}"):
        if gitwork.ref_sha(repo, ref):
            gitwork.run_git(repo, "update-ref", "-d", ref)
    return [f"on {remote}: the state and work branch deleted, kept under {prefix}/ there too",
            f"if {remote} is on GitHub: the plan's pull request there (if any) is closed with a link to {prefix}/ by "
            "the first job of the plan's new run (with the job's token: `reset` uses none)"]


def _remove_own(path: Path, keep: Path) -> None:
    """plan-runner's own folder of a plan, but the run lock the caller holds."""
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            if child != keep:
                fsafe.remove(child, below=path)
    else:
        fsafe.remove(path, below=path.parent)
