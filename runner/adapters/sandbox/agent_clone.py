"""The agent's own area, and how its work crosses into the judge's repository (docs/security.md, "The mechanism").

The agent never works in plan-runner's repository. Each session it gets its tree at the work branch's judged sha
(`work/`), an empty `home/`, and `state/` (its CLI's saved sessions, restored from the plan's state), under a
per-plan folder whose path never changes (Claude Code finds a session to resume by its working directory).

Its tree is not written: in a room whose kernel mounts overlays, `work/` is an overlay whose read-only layers are
plan-runner's own base of the judged commit (`.base/tree`, runner.adapters.judge.base: the tree the gates judge,
brought to each session's sha incrementally) and the set-up layer (`.layers/setup`: the set-up cache restored at
this path, judge.setup.agent_layer; between the two, `.layers/hide` holds a whiteout at each cache path, so the
gates' copy of the cache in the base, made at another path, never shows), and whose upper layer (`.layers/up`) is
the agent's, kept on disk from
`prepare` to the export and emptied (moved aside, removed with no link followed) at the next `prepare`. Where the
kernel has no overlay, and without isolation, the upper is a copy of the two layers instead (the same code path
after the copy). Its `.git` is small and new each session, in the upper: objects borrowed from the judge's seed
store, the work branch at the judged sha, and the base's own index (whose stat data vouches for the files of the
lower layer), so its first `git status` does not read every file.

The agent's room (runner.adapters.sandbox.room) shows the area writable and nothing else of plan-runner's; it runs
as plan-runner's own uid, so the judge's folders in the area (`.trash`, `.layers`, `.base`) are covered by an
empty tmpfs in every room rather than kept out by their modes (the agent's tree is mounted from their host paths
before the cover), and `in/` is bound read-only. Only the processes of the agent's phases (its git, `setup:` in its
tree, the agent, the export) see the tree; the gates' see `work/` empty.

plan-runner never runs git in the agent's tree. After the agent's processes are all gone, a git running *as the
agent*, in a room that shows the same tree, commits its leftovers (a marked WIP commit) and writes a bundle of the
work branch; plan-runner copies the bundle (a regular file, never through a link) and fetches it into its own
repository with object checks on. Commits are data: their configuration, hooks, attributes, replace refs and
alternates never come along.

Gates and `verify:` run on plan-runner's own base of the judged commit (tracked files only: no ignored or untracked
files, no caches the agent left), shown at `gates/` read-only under a throwaway layer per process
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
from runner.adapters.sandbox.room import ROOT_INSIDE, fresh_copy
from runner.adapters.sandbox.identity import Identity, area_key, judge_dir

IMPORT_PREFIX = "refs/plan-runner/agent"
# The seed store's first fill brings this many commits of a work branch's history, not all of it: on a
# GitHub-hosted runner every job is a first fill, and a whole history costs ~8 s at 100,000 commits (0.04 s at
# 100). Later fetches into the store are incremental; the agent's repository is shallow at the same commits.
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
# The agent's `.git`, made by a git running as the agent in its tree (cwd): a new repository whose
# objects/info/alternates borrows the judge's seed store (read-only to the agent; its `shallow` commits too), the work
# branch at the judged sha, plan-runner's committer, and the store as the branch's remote. Nothing is checked out:
# the files are the base's (a lower layer or a copy), and the index prepare put in `.git` is the base's. `refresh`
# (a copy: new inodes and ctimes) lets git note the files' stat data once, reading each file.
_SEED_SCRIPT = r"""
objects=$1 branch=$2 sha=$3 name=$4 email=$5 url=$6 shallow=$7 refresh=$8
set -e
g() { git -c core.hooksPath=/dev/null "$@"; }
g init --quiet --initial-branch="$branch" .
printf '%s\n' "$objects" > .git/objects/info/alternates
if [ -f "$shallow" ]; then cp "$shallow" .git/shallow; fi
g config user.name "$name"
g config user.email "$email"
g config remote.plan-runner.url "$url"
g config remote.plan-runner.fetch "+refs/heads/$branch:refs/remotes/plan-runner/$branch"
g config "branch.$branch.remote" plan-runner
g config "branch.$branch.merge" "refs/heads/$branch"
g update-ref "refs/remotes/plan-runner/$branch" "$sha"
g update-ref "refs/heads/$branch" "$sha"
if [ "$refresh" = 1 ]; then g update-index -q --refresh >/dev/null || true; fi
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

    @property
    def base_tree(self) -> Path:
        """plan-runner's base of the judged commit (runner.adapters.judge.base): the agent's tree's lower layer."""
        return self.root / BASE / "tree"

    @property
    def base_index(self) -> Path:
        """The base's index (the judge's read-tree keeps it): its stat data match the lower layer's files."""
        return self.root / BASE / "index"

    @property
    def setup_layer(self) -> Path:
        """The set-up cache restored at `work/`'s path (judge.setup.agent_layer): the top read-only layer."""
        return self.root / LAYERS / "setup"

    @property
    def hide_layer(self) -> Path:
        """Between the base and the set-up layer: a whiteout at each cache path (judge.setup.agent_layer), so the
        gates' cache the base holds (made at `gates/`'s path: a venv there names it) never shows in the agent's tree."""
        return self.root / LAYERS / "hide"

    @property
    def upper(self) -> Path:
        """The agent's upper layer (in a room: its writes; a copy of the layers where there is no overlay)."""
        return self.root / LAYERS / "up"

    @property
    def overlay_work(self) -> Path:
        return self.root / LAYERS / "wd"


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
    for own in (LAYERS, TRASH, BASE):  # before any room shows the area: every room covers them (room.AREA_OWN)
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


def tree_of(area: AgentArea, identity: Identity) -> tuple[tuple[Path, ...], Path, Path, Path] | None:
    """How a room shows the agent's tree at `work/` (room.View.tree): the base and the set-up layer under the
    agent's upper layer, or, where the kernel has no overlay, the upper (a copy) bound there; None without a room."""
    room = identity.room
    if room is None:
        return None
    lowers = (area.base_tree, area.hide_layer, area.setup_layer) if room.overlay else ()
    return lowers, area.upper, area.overlay_work, area.work


def files_of(area: AgentArea, identity: Identity) -> Path:
    """Where the agent's own files are on the host: its upper layer in a room, `work/` itself without one."""
    return area.upper if identity.room is not None else area.work


def prepare(area: AgentArea, identity: Identity, repo: Path, branch: str, saved_state: Path | None,
            scratch: Path) -> None:
    """The area for one session: the agent's tree at the work branch's judged sha (the base, which the caller
    brought to that sha, with the set-up layer, under an empty upper layer of the agent's; or a copy of them), a
    small `.git` that borrows its objects from the judge's seed store (seed_store: only the new commits cross,
    whatever the history's length), an empty home, and the agent's saved CLI state. Nothing of the previous session
    is left: its upper layer and other parts are moved aside in O(1) and deleted, with no link followed, off the
    critical path (discard_trash). Every later process of the room whose phase is the agent's sees the tree."""
    own_root(area, repo)
    room = identity.room
    if room is not None:
        room.grant(area.root)
    hold_area(area, identity)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        sha = gitwork.ref_sha(repo, f"refs/heads/{branch}")
        if sha is None:
            raise PlanRunnerError(what=f"the work branch {branch!r} is missing in {repo}",
                                  why="it was deleted while the session started", fix="run the session again")
        store = seed_store(repo, branch) if identity.isolated else None
        if store is not None and room is not None:
            room.show(store)  # the agent's objects: borrowed, read-only
    except GitCommandError as exc:
        raise PlanRunnerError(what=f"could not seed the agent's repository of the work branch {branch!r}",
                              why=gitwork.stderr_of(exc), fix=f"check `git -C {repo} fsck`") from None
    for layer in (area.base_tree, area.base_index):
        if not os.path.lexists(layer):
            raise PlanRunnerError(what=f"the base of {branch!r} is not checked out in {area.root / BASE}",
                                  why="the agent's tree is laid over it", fix="report this as a bug")
    if room is not None and room.overlay:
        for layer in (area.hide_layer, area.setup_layer):
            _own_folder(layer)  # (an empty layer when nothing is restored there)
    for part in (*area.parts(), area.upper, area.overlay_work):
        _move_aside(area, part, identity)
    for part in (area.home, area.state, area.out):
        os.mkdir(part, 0o700)
    os.mkdir(area.work, 0o755)  # in a room, the mount point of the tree
    tree = tree_of(area, identity)
    files = files_of(area, identity)
    if tree is not None and tree[0]:
        os.mkdir(files, 0o755)
        os.mkdir(area.overlay_work, 0o700)
    else:  # no overlay: the layers copied (links as links, never followed)
        fresh_copy(area.base_tree, files)
        for hidden in whiteouts(area.hide_layer):  # (the gates' cache: what the hide layer would cover)
            if os.path.lexists(files / hidden):
                fsafe.remove(files / hidden, below=files)
        if os.path.isdir(area.setup_layer) and os.listdir(area.setup_layer):
            _copy_into(area.setup_layer, files)
    os.mkdir(files / ".git", 0o755)
    exact = _index_copy(area.base_index, files / ".git" / "index", inside=ROOT_INSIDE if room is not None else None)
    if room is not None:
        room.mount_tree(tree)
    if saved_state is not None and saved_state.is_dir():
        shutil.copytree(saved_state, area.state, symlinks=True, dirs_exist_ok=True)
    os.mkdir(area.inputs, 0o711)
    source = store if store is not None else gitwork.git_dir(repo)  # where the objects (and `shallow`) are
    name, email = _committer(repo)
    args = [str(source / "objects"), branch, sha, name, email, str(store or repo), str(source / "shallow"),
            "1" if not exact or tree is None or not tree[0] else "0"]
    proc = run_as(identity, ["sh", "-c", _SEED_SCRIPT, "seed", *args], cwd=area.work, env=agent_git_env(area))
    if proc.returncode != 0:
        raise PlanRunnerError(what=f"could not give the agent a repository of {branch!r}",
                              why=_tail(proc),
                              fix=f"check `git -C {store or repo} fsck`; remove {area.root} and run again")


def whiteouts(layer: Path) -> list[str]:
    """The paths an overlay layer of the judge's own hides (its whiteouts: character devices 0/0), relative."""
    found = []
    for folder, _dirs, files in os.walk(layer):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                found.append(os.path.relpath(os.path.join(folder, name), layer))
    return found


def _copy_into(src: Path, dest: Path) -> None:
    """What `src` holds copied into `dest` (links as links, modes kept), over what is there."""
    cp = tools.which("cp") or "/bin/cp"
    done = subprocess.run([cp, "-a", "--reflink=auto", "--", f"{src}/.", str(dest)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise PlanRunnerError(what=f"could not copy {src} into {dest}", why=done.stderr.strip()[-500:],
                              fix="check the free space of the file system that holds it")


def _index_copy(src: Path, dst: Path, *, inside: int | None) -> bool:
    """The base's index copied for the agent's `.git`; True when its stat data hold as the agent's room sees the
    files. As root, a room shows root's files as `inside` (room.ROOT_INSIDE), so the entries' owner is rewritten to
    it (index versions 2 and 3; another version is copied as it is, and git reads the files once)."""
    if inside is None or os.geteuid() != 0:
        shutil.copyfile(src, dst, follow_symlinks=False)
        return True
    buf = bytearray(src.read_bytes())
    exact = _index_owned_by(buf, inside)
    dst.write_bytes(buf)
    return exact


def _index_owned_by(buf: bytearray, uid: int) -> bool:
    """`buf` (a git index of SHA-1 objects, version 2 or 3) rewritten with every entry's uid and gid `uid`: True;
    False, unchanged, for anything else."""
    if len(buf) < 32 or buf[:4] != b"DIRC":
        return False
    version, count = int.from_bytes(buf[4:8], "big"), int.from_bytes(buf[8:12], "big")
    view = memoryview(buf)
    if version not in (2, 3) or hashlib.sha1(view[:-20]).digest() != buf[-20:]:  # noqa: S324 - git's own checksum
        return False
    entries, at, owner = [], 12, uid.to_bytes(4, "big")
    for _ in range(count):  # (checked whole before anything is written)
        if at + 62 > len(buf) - 20:
            return False
        flags = int.from_bytes(buf[at + 60:at + 62], "big")
        end = buf.find(b"\0", at + 62 + (2 if version == 3 and flags & 0x4000 else 0))
        if end < 0:
            return False
        entries.append(at)
        at = at + ((end - at + 8) & ~7)
    for at in entries:
        buf[at + 28:at + 36] = owner + owner
    view.release()
    buf[-20:] = hashlib.sha1(memoryview(buf)[:-20]).digest()  # noqa: S324
    return True


def _repo_key(repo: Path) -> str:
    return hashlib.sha256(str(Path(repo).resolve()).encode()).hexdigest()[:16]


def seed_store(repo: Path, branch: str) -> Path:
    """The judge's seed store of `repo`, with `branch` brought up to date by an incremental fetch from the
    judge's repository (only the objects the store lacks cross; the first fill brings the last SEED_DEPTH
    commits, so even a fresh runner's first fill does not grow with the history), under a lock; the path the
    agent's repository borrows objects from (its `shallow` file, if any, is copied into it).

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
LAYERS = ".layers"  # likewise: the agent's upper layer, the overlay's workdir, the set-up layer (AgentArea.upper)
BASE = ".base"  # likewise: the base the gates judge and the agent's tree lies on (runner.adapters.judge.base)


def has_tree(area: AgentArea) -> bool:
    """The area holds an agent's repository (in its upper layer, or in `work/` without isolation): a session cut
    short may have left work in it. Never through a link."""
    for git in (area.upper / ".git", area.work / ".git"):
        try:
            if stat.S_ISDIR(os.lstat(git).st_mode) and not os.path.islink(git.parent):
                return True
        except OSError:
            continue
    return False


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
    """Who the agent commits as in its tree: the repository's configured identity, else plan-runner's agent."""
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
    """After the agent: its leftovers committed and its work branch imported into the judge's repository. The export
    runs in a room that shows the agent's tree as the agent left it (a salvage's room is new; the caller keeps the
    base at the session's sha); the gates' processes that follow do not see it."""
    room = identity.room
    if room is not None:  # the agent's objects are borrowed from the seed store
        room.show(_store_path(judge_dir("seeds"), _repo_key(repo)))
        room.mount_tree(tree_of(area, identity))
    env = {**agent_git_env(area, gitwork.BOT_ENV), **gitwork.BOT_ENV}
    out = area.out / "work.bundle"
    # One process as the agent (its git, its config: its own business), arguments passed positionally.
    try:
        proc = run_as(identity, ["sh", "-c", _EXPORT_SCRIPT, "export", branch, base_sha, str(out), _WIP_MESSAGE],
                      cwd=area.work, env=env)
    finally:
        if room is not None:
            room.mount_tree(None)
    said = proc.stdout.decode("utf-8", "replace").splitlines()
    if proc.returncode == 10:
        return Imported(None, None, problem=f"the agent's repository is no longer a usable git repository: "
                                            f"{_tail(proc)}")
    notes: list[str] = []
    if "wip-failed" in said:
        notes.append("the agent's uncommitted changes could not be saved as a WIP commit: " + _tail(proc))
    has_branch, on_branch = "has-branch" in said, f"head-ref=refs/heads/{branch}" in said
    if not has_branch:
        notes.append(f"the agent deleted the work branch {branch!r} in its repository")
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
                        fix=f"run again (the agent's work is kept in its tree); if it recurs, `git -C {repo} "
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
