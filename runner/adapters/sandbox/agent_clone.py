"""The agent's own area, and how its work crosses into the judge's repository (docs/security.md, "The mechanism").

The agent never works in plan-runner's repository. Each session it gets a clone of
the work branch at its judged sha in a directory of its own (`work/`: the previous
session's clone updated in place by the agent's own git where that can be done
cleanly, else made again), an empty `home/`,
and `state/` (its CLI's saved sessions, restored from the plan's state), under a
per-plan folder whose path never changes (Claude Code finds a session to resume by
its working directory). The agent's room (runner.adapters.sandbox.room) shows that
folder writable and nothing else of plan-runner's; it runs as plan-runner's own uid,
so the judge's folders in the area (`.trash`, `.kept`) are covered by an empty tmpfs
in every room rather than kept out by their modes, and `in/` is bound read-only.

plan-runner never runs git in that clone. After the agent's processes are all
gone, a git running *as the agent* commits its leftovers (a marked WIP commit)
and writes a bundle of the work branch; plan-runner copies the bundle (a
regular file, never through a link) and fetches it into its own repository with
object checks on. Commits are data: their configuration, hooks, attributes,
replace refs and alternates never come along.

Gates and `verify:` run on plan-runner's own checkout of the judged commit (tracked files only: no ignored or
untracked files, no caches the agent left), shown at `gates/` read-only under a throwaway layer per process
(runner.adapters.judge.base), with a clean `gate-home`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.adapters.git.work import GitCommandError  # the git room owns GitPython and its errors

from runner.adapters.git import work as gitwork
from runner.core.errors import PlanRunnerError
from runner.adapters.sandbox import fsafe, origin, tools
from runner.adapters.sandbox.proc import StartFailed, capture
from runner.adapters.sandbox.identity import Identity, area_key, judge_dir

IMPORT_PREFIX = "refs/plan-runner/agent"
# The seed store's first fill brings this many commits of a work branch's history, not all of it: on a
# GitHub-hosted runner every job is a first fill, and a whole history costs ~8 s at 100,000 commits (0.04 s at
# 100). Later fetches into the store are incremental; the agent's clone is shallow at the same commits.
SEED_DEPTH = 1000
STATE_COPY_LIMIT = 64 * 2**20  # the agent's saved CLI state kept with the plan: bounded
BUNDLE_LIMIT = 2 * 2**30
_AGENT_GIT_TIMEOUT_S = 300
_EXPORT_SCRIPT = r"""
branch=$1 base=$2 out=$3 msg=$4
g() { git -c core.hooksPath=/dev/null -c commit.gpgsign=false "$@"; }
if ! s=$(g status --porcelain --untracked-files=all 2>&1); then echo "$s" >&2; exit 10; fi
if [ -n "$s" ]; then { g add --all && g commit --quiet --no-verify --allow-empty -m "$msg"; } >&2 || echo wip-failed; fi
set --
if g rev-parse --verify --quiet "refs/heads/$branch^{commit}" >/dev/null; then echo has-branch; set -- "refs/heads/$branch"; fi
ref=$(g symbolic-ref --quiet HEAD); echo "head-ref=$ref"
if [ "$ref" != "refs/heads/$branch" ]; then set -- "$@" HEAD; fi
[ $# -gt 0 ] || exit 0
if [ -z "$(g rev-list --max-count=1 "$@" "^$base")" ]; then echo empty; exit 0; fi
g bundle create --quiet "$out" "$@" "^$base" && echo bundled
"""
# What a new clone and an updated one both get: objects borrowed from the store (its `shallow` commits too),
# plan-runner's committer, and the store as the work branch's remote.
_CLONE_SETTINGS = r"""printf '%s\n' "$objects" > .git/objects/info/alternates
if [ -f "$shallow" ]; then cp "$shallow" .git/shallow; fi
g config user.name "$name"
g config user.email "$email"
g config remote.plan-runner.url "$url"
g config remote.plan-runner.fetch "+refs/heads/$branch:refs/remotes/plan-runner/$branch"
g config "branch.$branch.remote" plan-runner
g config "branch.$branch.merge" "refs/heads/$branch"
"""
# The agent's clone, made by a git running as the agent: a new repository whose objects/info/alternates
# borrows the judge's seed store (read-only to the agent), the work branch set to the judged sha, checked out.
# Nothing is copied but the work tree: O(files), never O(history).
_SEED_SCRIPT = r"""
work=$1 objects=$2 branch=$3 sha=$4 name=$5 email=$6 url=$7 shallow=$8
set -e
g() { git -c core.hooksPath=/dev/null "$@"; }
g init --quiet --initial-branch="$branch" "$work"
cd "$work"
""" + _CLONE_SETTINGS + r"""g update-ref "refs/remotes/plan-runner/$branch" "$sha"
g update-ref "refs/heads/$branch" "$sha"
g reset --quiet --hard
"""
# The previous session's clone brought to the judged sha in place (its files rewritten only where they differ),
# by a git running as the agent: a configuration as a new clone's (the one the agent left, its hooks, excludes,
# attributes and sparse patterns gone), the branch reset to the sha, the work tree checked out with force, and
# everything a new clone would not hold (untracked and ignored files: what the agent's last session and its
# set-up made) moved aside in O(1) per folder. An index with skip-worktree or assume-unchanged entries (the
# checkout would not rewrite those files), a quoted name or anything else unusual: exit non-zero, made again.
# A clone the last export left clean and hid (`trusted`: _hide_clone, _reveal_clone) needs no pass over its files:
# its index vouches for them, so the branch is only moved (at the same sha) or the two-way `read-tree -m -u` writes
# what differs (anything in the way: the forced checkout after all). No `git status` after it (a second pass over
# every file, 0.13 s at 50,000): the forced checkout rewrote every tracked file its stat data did not vouch for,
# `ls-files --others` (no exclude rule: ignored files included) listed everything else, and nothing of the agent
# runs meanwhile. What the agent's clone holds is its own
# business in any case: the judge takes only commits from it (test_agent_seed checks the result with status).
_UPDATE_SCRIPT = r"""
work=$1 objects=$2 branch=$3 sha=$4 name=$5 email=$6 url=$7 shallow=$8 aside=$9 trusted=${10}
shift 10  # the rest: pathspecs of what stays where it is (the set-up cache: judge.setup.CloneSetup)
set -e
cd "$work"
[ -d .git ] && [ ! -L .git ] && [ -f .git/HEAD ] && [ -d .git/objects/info ] && [ ! -L .git/objects ] || exit 20
g() { git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.untrackedCache=false -c core.quotePath=true "$@"; }
rm -f .git/config .git/commondir .git/info/exclude .git/info/attributes .git/info/sparse-checkout .git/info/grafts \
  .git/index.lock .git/shallow
rm -rf .git/hooks
g init --quiet --initial-branch="$branch" . >/dev/null
""" + _CLONE_SETTINGS + r"""g for-each-ref --format='%(refname)' | while IFS= read -r r; do
  [ "$r" = "refs/heads/$branch" ] || echo "delete $r"
done | g update-ref --stdin
g update-ref "refs/remotes/plan-runner/$branch" "$sha"
if [ -n "$(g ls-files -v | grep -v '^H ' | head -n 1)" ]; then exit 21; fi
head=$(g rev-parse --verify --quiet "HEAD^{commit}") || head=
if [ "$trusted" = 1 ] && [ "$head" = "$sha" ]; then
  how=moved; g update-ref "refs/heads/$branch" "$sha" && g symbolic-ref HEAD "refs/heads/$branch"
elif [ "$trusted" = 1 ] && [ -n "$head" ] && g read-tree -m -u "$head" "$sha" >/dev/null 2>&1; then
  how=merged; g update-ref "refs/heads/$branch" "$sha" && g symbolic-ref HEAD "refs/heads/$branch"
else
  how=checked-out; g checkout --quiet --force -B "$branch" "$sha"
fi
g update-index --no-untracked-cache --no-fsmonitor >/dev/null 2>&1 || true
mkdir "$aside"
i=0
g ls-files --others --directory -- . "$@" > "$aside.list"
while IFS= read -r p; do
  case $p in \"*) exit 22;; esac
  i=$((i + 1)); mv -- "${p%/}" "$aside/$i"
done < "$aside.list"
[ "$(g rev-parse HEAD)" = "$sha" ] && [ "$(g symbolic-ref HEAD)" = "refs/heads/$branch" ] || exit 23
echo "$how"
echo updated
"""
_WIP_MESSAGE = ("plan-runner: WIP: uncommitted changes left by the agent\n\n"
                "Saved by plan-runner so no work is lost; this commit does not count as progress.\n\n"
                f"{gitwork.WIP_TRAILER}: true\n")


@dataclass(frozen=True)
class AgentArea:
    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def inputs(self) -> Path:
        """plan-runner's files for the agent (prompt, script): readable by it, not writable."""
        return self.root / "in"

    @property
    def creds(self) -> Path:
        """The agent's credential files (runner.adapters.sandbox.agent_creds): its user's alone, never saved."""
        return self.root / "creds"

    @property
    def gates(self) -> Path:
        return self.root / "gates"

    @property
    def gate_home(self) -> Path:
        return self.root / "gate-home"

    def parts(self) -> tuple[Path, ...]:
        return self.work, self.home, self.state, self.out, self.inputs, self.creds, self.gates, self.gate_home


def area_for(repo: Path, plan_id: str) -> AgentArea:
    return AgentArea(judge_dir("agents") / area_key(repo, plan_id))


def _fresh_dir(area: AgentArea, path: Path, identity: Identity, mode: int = 0o700) -> None:
    _move_aside(area, path, identity)
    os.mkdir(path, mode)


def own_root(area: AgentArea, repo: Path | None = None) -> None:
    """The area's root made or checked (plan-runner's own folder, 0711), with `repo` recorded as its
    repository (runner.adapters.sandbox.origin; sweep removes the areas of repositories that are gone)."""
    try:
        os.mkdir(area.root, 0o711)
    except FileExistsError:
        pass
    st = os.lstat(area.root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise PlanRunnerError(what=f"{area.root} is not plan-runner's own directory",
                              why="it was replaced (by a link or another user's folder)",
                              fix=f"remove {area.root} and run again")
    os.chmod(area.root, 0o711)
    for own in (KEPT, TRASH, BASE):  # before any room shows the area: every room covers them (room.AREA_OWN)
        _own_folder(area.root / own)
    if repo is not None:
        origin.record(origin.area_origin(area.root), repo)


def agent_git_env(area: AgentArea, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the git plan-runner runs as the agent (its own config is its own business)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(area.home), "LANG": "C.UTF-8",
           "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
    env.update({k: v for k, v in (base or {}).items() if k in gitwork.BOT_ENV})
    return env


def run_as(identity: Identity, argv: list[str], *, cwd: Path, env: dict[str, str],
           timeout_s: float = _AGENT_GIT_TIMEOUT_S) -> subprocess.CompletedProcess[bytes]:
    """Run one command as the agent's identity, bounded in time and output; everything of the uid dies after it."""
    try:
        done = capture(argv, cwd=cwd, env=env, time_limit_s=timeout_s, identity=identity)
    except StartFailed as exc:
        raise exc.error from None
    if done.finished.reason == "time_limit":
        return subprocess.CompletedProcess(argv, 124, done.stdout, done.stderr + b"\ntimed out")
    code = done.finished.returncode
    return subprocess.CompletedProcess(argv, -9 if code is None else code, done.stdout, done.stderr)


def _tail(proc: subprocess.CompletedProcess[bytes]) -> str:
    return (proc.stderr or proc.stdout or b"").decode("utf-8", "replace").strip()[-2000:]


def prepare(area: AgentArea, identity: Identity, repo: Path, branch: str, saved_state: Path | None,
            scratch: Path, keep: tuple[str, ...] = ()) -> None:
    """The area for one session: a clone of `branch` at its judged sha that borrows its objects from the
    judge's seed store (seed_store: only the new commits cross, whatever the history's length), an empty
    home, and the agent's saved CLI state; nothing of the previous session (and no process) is left. The
    previous session's clone is updated in place by a git running as the agent where it can be (same owner,
    a usable repository: _UPDATE_SCRIPT), else made again; the other parts are moved aside in O(1) and
    deleted off the critical path (discard_trash). `keep`: the set-up cache's paths, left in a clone updated in
    place (the clone is the agent's own: judge.setup.CloneSetup restores them only when the archive changed)."""
    own_root(area, repo)
    if identity.room is not None:
        identity.room.grant(area.root)
    hold_area(area, identity)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        sha = gitwork.ref_sha(repo, f"refs/heads/{branch}")
        if sha is None:
            raise PlanRunnerError(what=f"the work branch {branch!r} is missing in {repo}",
                                  why="it was deleted while the session started", fix="run the session again")
        store = seed_store(repo, branch) if identity.isolated else None
        if store is not None and identity.room is not None:
            identity.room.show(store)  # the clone's objects: borrowed, read-only
    except GitCommandError as exc:
        raise PlanRunnerError(what=f"could not seed the agent's clone of the work branch {branch!r}",
                              why=gitwork.stderr_of(exc), fix=f"check `git -C {repo} fsck`") from None
    source = store if store is not None else gitwork.git_dir(repo)  # where the objects (and `shallow`) are
    objects = str(source / "objects")
    name, email = _committer(repo)
    seed_args = [str(area.work), objects, branch, sha, name, email, str(store or repo), str(source / "shallow")]
    trusted = _reveal_clone(area, identity, scratch)
    kept = _update_clone(area, identity, seed_args, keep, trusted=trusted)
    for part in area.parts():
        if not (kept and part == area.work):
            _move_aside(area, part, identity)
    fresh = (area.home, area.state, area.out) if kept else (area.work, area.home, area.state, area.out)
    for part in fresh:
        os.mkdir(part, 0o700)
    if saved_state is not None and saved_state.is_dir():
        shutil.copytree(saved_state, area.state, symlinks=True, dirs_exist_ok=True)
    os.mkdir(area.inputs, 0o711)
    if kept:
        return
    proc = run_as(identity, ["sh", "-c", _SEED_SCRIPT, "seed", *seed_args], cwd=area.home, env=agent_git_env(area))
    if proc.returncode != 0:
        raise PlanRunnerError(what=f"could not give the agent a clone of {branch!r}",
                              why=_tail(proc),
                              fix=f"check `git -C {store or repo} fsck`; remove {area.root} and run again")


def _update_clone(area: AgentArea, identity: Identity, seed_args: list[str], keep: tuple[str, ...] = (), *,
                  trusted: bool = False) -> bool:
    """The previous session's clone brought to the judged sha in place, by a git running as the agent in its
    own clone (never the judge's git there): True when it is. Only a clone the same identity owns (the uid
    that wrote another may serve another session meanwhile); what the update leaves aside goes into the old
    `out` (moved to the trash next), made anew when it is gone: the update runs with it as its HOME, and the lease
    that ran the last update wiped it with the other HOMEs of its processes at its release (every other later
    session made the clone again, and restored its set-up, before). `trusted`: the clone is as the last export
    left it (_reveal_clone)."""
    owner = os.geteuid()  # (a room runs as plan-runner's own uid)
    for part in (area.work, area.out):
        try:
            if part == area.out and not os.path.lexists(part):  # (only once the clone is one to update)
                os.mkdir(part, 0o700)
            st = os.lstat(part)
        except OSError:  # (made again)
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner:
            return False
    env = {**agent_git_env(area), "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_NO_REPLACE_OBJECTS": "1",
           "HOME": str(area.out)}
    proc = run_as(identity, ["sh", "-c", _UPDATE_SCRIPT, "update", *seed_args, f"{area.out}/aside",
                             "1" if trusted else "0", *(f":(exclude,literal){path}" for path in keep)],
                  cwd=area.work, env=env)
    return proc.returncode == 0 and proc.stdout.strip().endswith(b"updated")


def _repo_key(repo: Path) -> str:
    return hashlib.sha256(str(Path(repo).resolve()).encode()).hexdigest()[:16]


def seed_store(repo: Path, branch: str) -> Path:
    """The judge's seed store of `repo`, with `branch` brought up to date by an incremental fetch from the
    judge's repository (only the objects the store lacks cross; the first fill brings the last SEED_DEPTH
    commits, so even a fresh runner's first fill does not grow with the history), under a lock; the path the
    agent's clone borrows objects from (its `shallow` file, if any, is copied into the clone).

    It is a bare repository plan-runner's user owns and only it writes (core.sharedRepository=0644: the
    agent's identity reads, never writes), holding the plans' work branches only (no state, no other ref),
    at a name nobody can guess (judge_dir is listable by nobody else). plan-runner's git runs in it with its
    own config only; the agent's git merely reads its objects (docs/security.md, "The mechanism")."""
    seeds = judge_dir("seeds")
    key = _repo_key(repo)
    lock = os.open(seeds / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        origin.record(origin.store_origin(seeds, key), repo)  # the store goes when the repository does
        store = _store_path(seeds, key)
        first_fill = not (store / "objects").is_dir()
        if first_fill:
            identity_remove_judge_tree(store)
            os.mkdir(store, 0o755)
            gitwork.run_git(store, "init", "--quiet", "--bare", "--shared=0644")
            for k, v in (("gc.auto", "0"), ("core.logAllRefUpdates", "false"), ("receive.denyCurrentBranch", "ignore")):
                gitwork.run_git(store, "config", k, v)
        st = os.lstat(store)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PlanRunnerError(what=f"{store} is not plan-runner's own seed store",
                                  why="it was replaced or made writable by others",
                                  fix=f"remove {store} and run again")
        depth = [f"--depth={SEED_DEPTH}"] if first_fill else []
        gitwork.run_git(store, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance",
                        *depth, str(gitwork.git_dir(repo)), f"+refs/heads/{branch}:refs/heads/{branch}")
        return store
    finally:
        os.close(lock)


def _store_path(seeds: Path, key: str) -> Path:
    """The store's unguessable name, kept in a file only plan-runner's user reads."""
    name_file = seeds / f"{key}.name"
    try:
        fd = os.open(name_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "r", encoding="ascii") as fh:
            name = fh.read().strip()
    except FileNotFoundError:
        name = ""
    if not (len(name) == 32 and all(c in "0123456789abcdef" for c in name)):
        name = secrets.token_hex(16)
        tmp = seeds / f"{key}.name.tmp"
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(name + "\n")
        os.replace(tmp, name_file)
    return seeds / f"{key}-{name}"


def identity_remove_judge_tree(path: Path) -> None:
    """Remove a tree plan-runner's own user made (links removed, never followed)."""
    if os.path.lexists(path):
        fsafe.remove(path, below=path.parent)


TRASH = ".trash"  # in an area's root: plan-runner's own, mode 0700, out of the agent's reach
KEPT = ".kept"  # likewise: the agent's clone between its export and the next session (_hide_clone)
BASE = ".base"  # likewise: the gates' read-only base (runner.adapters.judge.base), shown in no room


CLONE_RECORD = "clone.record"  # in the judge's scratch: the agent's clone as the last export left it (_hide_clone)


def _hide_clone(area: AgentArea, identity: Identity, scratch: Path, clean: bool) -> None:
    """After an export (the identity's processes all dead): the agent's clone out of its reach until the next
    `prepare` (renamed into the area's KEPT folder, plan-runner's own, 0700, like the gates' tree), so the gates
    that run meanwhile as the same identity cannot change it. With `clean` (its work all committed: the index
    vouches for every tracked file), what its folder and index are is noted in the judge's scratch: a next
    update that finds them so needs no pass over its files (_reveal_clone). Anything refused: left in place."""
    note = scratch / CLONE_RECORD
    note.unlink(missing_ok=True)
    hidden = area.root / KEPT / "work"
    try:
        st = os.lstat(area.work)
        if not stat.S_ISDIR(st.st_mode) or not _own_folder(area.root / KEPT):
            return
        if os.path.lexists(hidden):
            _move_aside(area, hidden, identity)
        os.rename(area.work, hidden)
        if not clean:
            return
        index = os.lstat(hidden / ".git" / "index")
        if not stat.S_ISREG(index.st_mode):
            return
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(" ".join(map(str, (st.st_dev, st.st_ino, st.st_uid, *_index_id(index)))) + "\n")
    except OSError:
        return


def _index_id(st: os.stat_result) -> tuple[int, ...]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _reveal_clone(area: AgentArea, identity: Identity, scratch: Path) -> bool:
    """The clone the last export hid back in its place; True when it is the folder that export hid and its index
    is the file that export left (inode, size, times: any write since would have moved its ctime). The note is
    taken away: a session cut short after this is not trusted next time."""
    note = scratch / CLONE_RECORD
    try:
        fd = os.open(note, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        said: tuple[int, ...] = ()
    else:
        try:
            with os.fdopen(fd, "r", encoding="ascii") as fh:
                said = tuple(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            said = ()
        note.unlink(missing_ok=True)
    hidden = area.root / KEPT / "work"
    try:
        st = os.lstat(hidden)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    _move_aside(area, area.work, identity)
    try:
        os.rename(hidden, area.work)
        index = os.lstat(area.work / ".git" / "index")
    except OSError:
        return False
    return len(said) == 7 and said == (st.st_dev, st.st_ino, st.st_uid, *_index_id(index))


def has_clone(area: AgentArea) -> bool:
    """The area holds an agent's clone, in its place or hidden by an export."""
    return area.work.is_dir() or (area.root / KEPT / "work").is_dir()


def reveal_clone(area: AgentArea, identity: Identity, scratch: Path) -> None:
    """The clone an export hid back in its place (a session cut short after its export: its work is salvaged)."""
    _reveal_clone(area, identity, scratch)


def move_aside(area: AgentArea, part: Path) -> None:
    """`part` of the area out of the way in O(1) (into its trash: _move_aside)."""
    _move_aside(area, part, Identity())


def _move_aside(area: AgentArea, part: Path, identity: Identity) -> None:
    """The previous session's part out of the way in O(1): renamed into the area's trash (the agent can
    reach nothing in there, so nothing it runs can race the deletion, done later by discard_trash). Where
    the rename is refused (a folder of another user moved across folders by a non-root judge), removed now."""
    if not os.path.lexists(part):
        return
    trash = area.root / TRASH
    try:
        os.mkdir(trash, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(trash)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
        try:
            os.rename(part, trash / f"{part.name}-{secrets.token_hex(6)}")
            return
        except OSError:
            pass
    identity.remove(part)


_IN_USE = ".in-use"  # in an area's root: a lock a session holds (shared) from prepare to its end


def hold_area(area: AgentArea, identity: Identity) -> None:
    """Mark the area in use for the session `identity` is leased to (released by discard_trash at the session's
    end, or with the lease): remove_agent_areas never takes an area whose lock is held, however old it looks."""
    if area.root in identity.areas:
        return
    fd = os.open(area.root / _IN_USE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    identity.areas[area.root] = fd


def hold_alone(area: AgentArea) -> int | None:
    """The area's in-use lock taken exclusively, without waiting (its descriptor; close it to release), or None
    while a session holds it: the preflight then knows no session of the plan is using the area."""
    fd = os.open(area.root / _IN_USE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _release_area(area: AgentArea, identity: Identity) -> None:
    fd = identity.areas.pop(area.root, None)
    if fd is not None:
        os.close(fd)


def discard_trash(area: AgentArea, identity: Identity, *, wait: bool = False) -> None:
    """At a session's end: the area released (hold_area), and what _move_aside put in its trash deleted in
    a detached process (never on a session's critical path) or, with `wait`, now."""
    _release_area(area, identity)
    trash = area.root / TRASH
    try:
        names = os.listdir(trash)
    except OSError:
        return
    if not names:
        return
    _remove_trees([trash / n for n in names], wait=wait)


def discard_area(area: AgentArea, identity: Identity | None = None) -> None:
    """A whole area no session will use again (the preflight's own, a finished plan's), deleted in a detached
    process: never on the critical path. Its files are plan-runner's user's (a room runs as its uid); nothing of
    `identity` runs any more (its rooms' PID namespaces ended with their processes)."""
    if os.path.isdir(area.root) and not os.path.islink(area.root):
        _remove_trees([area.root], wait=False)


def _remove_trees(paths: list[Path], *, wait: bool) -> None:
    """GNU rm walks with fts relative to directory descriptors (FTS_PHYSICAL): no link is followed. Only
    ever called on trees in plan-runner's own folders that the agent can no longer reach. Where rm fails (a
    folder the agent made unwritable or unreadable: `chmod 555`, a Go module cache), GNU chmod gives every
    folder back to its owner first (-R ignores the links it meets) and rm runs again."""
    rm, chmod = tools.which("rm") or "/bin/rm", tools.which("chmod") or "/bin/chmod"
    script = ('"$0" -rf --one-file-system -- "$@" 2>/dev/null && exit 0; '
              'for p; do [ -L "$p" ] || "$CHMOD" -R u+rwx -- "$p" 2>/dev/null; done; '
              'exec "$0" -rf --one-file-system -- "$@"')
    argv = ["/bin/sh", "-c", script, rm, *map(str, paths)]
    env = {"CHMOD": chmod, "PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    if wait:
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False, env=env)
        return
    # Detached: a shell that starts the removal in the background and exits at once (it is then init's child,
    # and nothing of this process waits for it or holds it).
    sh = tools.which("sh") or "/bin/sh"
    subprocess.run([sh, "-c", '"$@" </dev/null >/dev/null 2>&1 &', "discard", *argv], stdin=subprocess.DEVNULL,
                   capture_output=True, start_new_session=True, check=False, env=env)


def _try_hold(path: Path) -> int | bool | None:
    """The area's in-use lock taken exclusively (its fd), False when a session holds it, None without one."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    return fd


def remove_agent_areas(older_than_s: float = 0.0, *, keep: tuple[Path, ...] = (), wait: bool = True,
                       now: float | None = None, kinds: tuple[str, ...] = ("agents", "seeds"),
                       select: Callable[[Path, os.stat_result], bool] | None = None) -> list[Path]:
    """Remove the agent areas (and seed stores) of plan-runner's user not used for `older_than_s` seconds,
    except `keep` (and, with `select`, only those it chooses); the areas removed. An area whose in-use lock a
    running session holds (hold_area, from prepare to the session's end) is never taken, however old, nor a
    store whose fill lock is held (seed_store); one being removed is renamed aside first, so a session starting then makes a new one. The removal
    `plan-runner clean` and the sweep of areas whose repository is gone (runner.adapters.sandbox.sweep) call."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    kept = {Path(k).resolve() for k in keep}
    for name in kinds:
        base = judge_dir(name)
        for entry in sorted(os.listdir(base)):
            path = base / entry
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode) or path.resolve() in kept or now - st.st_mtime < older_than_s:
                continue
            if select is not None and not entry.startswith(".removing-") and not select(path, st):
                continue
            if entry.startswith(".removing-"):  # a removal that was cut short: finished now
                _remove_trees([path], wait=wait)
                continue
            store_key = None if name == "agents" else entry.partition("-")[0]  # a seed store: <key>-<name>
            lock = _try_hold(path / _IN_USE if store_key is None else base / f"{store_key}.lock")
            if lock is False:
                continue  # a session is using it (an area held, a store being filled)
            try:
                aside = base / f".removing-{entry}-{secrets.token_hex(4)}"
                try:
                    os.rename(path, aside)
                except OSError:
                    continue
                if store_key is not None:  # its name and record go with it: the next fill makes a new store
                    for suffix in (".name", ".origin"):
                        try:
                            os.unlink(base / f"{store_key}{suffix}")
                        except FileNotFoundError:
                            pass
            finally:
                if isinstance(lock, int):
                    os.close(lock)
            removed.append(path)
            _remove_trees([aside], wait=wait)
    return removed


def _committer(repo: Path) -> tuple[str, str]:
    """Who the agent commits as in its clone: the repository's configured identity, else plan-runner's agent."""
    found = {"user.name": "plan-runner agent", "user.email": "plan-runner-agent@users.noreply.github.com"}
    try:
        text = gitwork.git_text(repo, "config", "--get-regexp", r"^user\.(name|email)$")
    except GitCommandError:  # neither is set
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in found and value.strip() and "\n" not in value:
            found[key] = value.strip()
    return found["user.name"], found["user.email"]


@dataclass(frozen=True)
class Imported:
    head: str | None  # the agent's work branch as imported (None: it deleted the branch, or nothing came)
    other: str | None  # where the agent left HEAD when that is not the work branch
    notes: tuple[str, ...] = ()
    problem: str | None = None  # the agent's repository could not be read: its work could not be judged


def export_work(area: AgentArea, identity: Identity, repo: Path, branch: str, base_sha: str,
                plan_id: str, scratch: Path) -> Imported:
    """After the agent: its leftovers committed and its work branch imported into the judge's repository."""
    if identity.room is not None:  # the clone borrows its objects from the seed store (a salvage's room is new)
        identity.room.show(_store_path(judge_dir("seeds"), _repo_key(repo)))
    env = {**agent_git_env(area, gitwork.BOT_ENV), **gitwork.BOT_ENV}
    out = area.out / "work.bundle"
    # One process as the agent (its git, its config: its own business), arguments passed positionally.
    proc = run_as(identity, ["sh", "-c", _EXPORT_SCRIPT, "export", branch, base_sha, str(out), _WIP_MESSAGE],
                  cwd=area.work, env=env)
    said = proc.stdout.decode("utf-8", "replace").splitlines()
    _hide_clone(area, identity, scratch, clean=proc.returncode == 0 and "wip-failed" not in said)
    if proc.returncode == 10:
        return Imported(None, None, problem=f"the agent's clone is no longer a usable git repository: {_tail(proc)}")
    notes: list[str] = []
    if "wip-failed" in said:
        notes.append("the agent's uncommitted changes could not be saved as a WIP commit: " + _tail(proc))
    has_branch, on_branch = "has-branch" in said, f"head-ref=refs/heads/{branch}" in said
    if not has_branch:
        notes.append(f"the agent deleted the work branch {branch!r} in its clone")
    if "empty" in said or (not has_branch and on_branch):
        return Imported(base_sha if has_branch else None, None, tuple(notes))
    if proc.returncode != 0 or "bundled" not in said:
        return Imported(None, None, tuple(notes), problem=f"git could not bundle the agent's work: {_tail(proc)}")
    copy = scratch / f"import-{plan_id}.bundle"
    problem = _copy_regular(out, copy, identity, BUNDLE_LIMIT)
    if problem:
        return Imported(None, None, tuple(notes), problem=problem)
    ns = f"{IMPORT_PREFIX}/{plan_id}"
    refspecs = [f"+refs/heads/{branch}:{ns}/branch"] if has_branch else []
    if not on_branch:
        refspecs.append(f"+HEAD:{ns}/other")
    try:
        for attempt in (1, 2):
            try:
                gitwork.run_git(repo, "update-ref", "--stdin",
                                data=f"delete {ns}/branch\ndelete {ns}/other\n".encode())
                gitwork.run_git(repo, "-c", "fetch.fsckObjects=true", "-c", "transfer.fsckObjects=true", "fetch",
                                "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance", str(copy),
                                *refspecs)
                break
            except GitCommandError as exc:
                err = gitwork.stderr_of(exc)
                if not _own_git_fault(err):
                    return Imported(None, None, tuple(notes), problem=f"the agent's commits failed git's checks: "
                                                                      f"{err[-1000:]}")
                if attempt == 2:  # plan-runner's own repository, not the agent's objects: nobody's fault here
                    raise PlanRunnerError(
                        what="git could not bring the agent's commits into plan-runner's repository",
                        why=err[-1000:] or str(exc),
                        fix=f"run again (the agent's work is kept in its clone); if it recurs, `git -C {repo} "
                            "worktree prune` and `git fsck`") from None
    finally:
        copy.unlink(missing_ok=True)
    head = gitwork.ref_sha(repo, f"{ns}/branch") if has_branch else None
    other = gitwork.ref_sha(repo, f"{ns}/other") if not on_branch else None
    if other is not None and other != head:
        notes.append(f"the agent left HEAD off the work branch (at {other[:12]}, kept locally as {ns}/other); "
                     f"only {branch!r} is judged")
    return Imported(head, other if other != head else None, tuple(notes))


# git's complaints about the judge's own repository (another session's work tree or a lock it holds), not about
# the objects the agent sent: a concurrent session's `worktree add`/`prune`, a ref lock.
_OWN_FAULT = ("worktrees/", "unable to lock", "cannot lock ref", ".lock': File exists")


def _own_git_fault(stderr: str) -> bool:
    return any(s in stderr for s in _OWN_FAULT)


def _copy_regular(src: Path, dst: Path, identity: Identity, limit: int) -> str | None:
    """Copy a file the agent's identity wrote, refusing links (at any component below the area's root),
    devices and oversize files (runner.adapters.sandbox.fsafe)."""
    owner = identity.uid if identity.isolated else None
    below = src.parent.parent  # the area's root: plan-runner's own folder
    problem = fsafe.copy_file(src, dst, below=below, limit=limit, owner=owner)
    return None if problem is None else f"the agent's bundle: {problem}"


def save_state(area: AgentArea, identity: Identity, dest: Path, limit: int = STATE_COPY_LIMIT) -> list[str]:
    """Copy the agent's CLI state (its saved sessions) into plan-runner's transcripts: regular files only,
    never through a link at any depth (an fd-relative walk from the area's root, fsafe), bounded in total.
    What was left out, and why."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True, exist_ok=True)
    return fsafe.copy_tree(area.state, dest, below=area.root, limit=limit)


def fresh_gate_home(area: AgentArea) -> Path:
    """The gates' HOME, made anew (the last one's moved aside)."""
    _fresh_dir(area, area.gate_home, Identity())
    return area.gate_home


def checkout(area: AgentArea, identity: Identity, repo: Path, sha: str, scratch: Path,
             into: Path | None = None) -> Path:
    """A fresh, writable checkout of `sha` (tracked files only, nothing else) in a folder of the area (`gates/`, or
    `into`), and a clean home for the commands run in it: where `setup:` runs (its cache built from the trusted
    commit, or a set-up nothing can cache). The gates otherwise run on the read-only base (judge.base)."""
    own_root(area, repo)
    if identity.room is not None:
        identity.room.grant(area.root)
    target = into or area.gates
    if into is None:
        _fresh_dir(area, area.gate_home, identity)
    _fresh_dir(area, target, identity, 0o755 if into is None else 0o700)
    scratch.mkdir(parents=True, exist_ok=True)
    index = scratch / f"checkout-{secrets.token_hex(4)}.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        gitwork.run_git(repo, "read-tree", sha, env=env)
        gitwork.run_git(repo, "checkout-index", "--all", "--force", f"--prefix={target}/", env=env)
    except GitCommandError as exc:
        raise PlanRunnerError(what=f"could not check out {sha[:12]} for the gates",
                              why=gitwork.stderr_of(exc), fix=f"check `git -C {repo} fsck`") from None
    finally:
        index.unlink(missing_ok=True)
    return target


def _own_folder(path: Path) -> bool:
    """`path` made if missing (0700); True when it is a real folder of plan-runner's user nobody else can use."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077
