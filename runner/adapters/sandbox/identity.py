"""Who runs untrusted code: the agent, and every gate, `verify:` and `setup:` command (SPEC 4b).

plan-runner is the judge; the agent and the code it wrote are the defendant. When
plan-runner is root (or may use `sudo -n`, as on GitHub-hosted runners), untrusted
code runs as a dedicated unprivileged system user taken from a small pool
(`plan-runner-agent`, `plan-runner-agent-1`, ...; per judge user): that user cannot read the judge's
memory or environment (`/proc/<pid>/environ` is the owner's), signal or trace it,
or write its files.

Nothing outlives a session, by construction (invariant 2): where the machine has a writable cgroup v2
hierarchy, every untrusted process starts inside the session's own cgroup (a tiny launcher, run as root,
joins it before it drops to the agent's uid and execs), and no process of that uid can leave it (moving
a process needs write access to root's `cgroup.procs` files). After the agent, after each gate, and when
the lease ends, the cgroup is killed (`cgroup.kill`, or frozen then killed where the kernel predates it)
and checked empty. As well, and as the fallback where there is no cgroup, every process of the uid is
killed, thread groups whose leader already exited (a zombie leader whose other threads run on) included.

The launcher also carries the environment: it reads it from a private file (mode 0600, removed at once)
rather than from its command line, so no secret is ever visible in `ps` (/proc/<pid>/cmdline).

A pool slot is held with `flock` on a lock file at a machine-wide place (/run/plan-runner for root,
/run/lock/plan-runner-<uid> otherwise; never under TMPDIR or PLAN_RUNNER_SANDBOX_ROOT), for the whole
session: two plan-runners on one machine, whatever their roots, never lease the same uid.

Each lease has a private temporary folder (TMPDIR, and Claude Code's CLAUDE_CODE_TMPDIR, point there for
every untrusted process), removed with every HOME it was started with, and with whatever the uid left
directly in /tmp, /var/tmp and /dev/shm, when the lease ends: the next session on the same uid, another
plan's included, finds none of it.

Without either (an ordinary user, no sudo: a laptop), untrusted code runs in kernel namespaces instead
(runner.adapters.sandbox.room, bubblewrap): as plan-runner's own uid, but seeing only the agent's area,
the seed store it borrows from, the toolchain read-only and a private TMP and HOME; its own PID namespace
ends everything it started when its first process exits (issue 49). `isolation: none` (plan) or
`--isolation none` runs it unconfined, and says so on every session; Actions mode refuses that.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import sys
import pwd
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from runner.adapters.sandbox import fsafe, room as rooms, tools
from runner.core.errors import PlanRunnerError

if TYPE_CHECKING:
    from runner.core.network import ModelAccess, Phase

Isolation = Literal["auto", "user", "none"]
USER_PREFIX = "plan-runner-agent"
POOL_SIZE = 64
_KILL_PASSES = 200


# Run as root (directly, or through `sudo -n`) by the interpreter plan-runner itself runs on, isolated from
# its environment and site (-I -S): read the environment from the private file and remove it, join the
# session's cgroup, drop to the agent's uid and groups, enter the folder as it, exec the program. Its
# argv carries no secret. Exit 125: the cgroup could not be joined (nothing runs outside it); 126/127: as a
# shell says. Signals through `_signal`, the C module: `signal` imports enum, a third of the launcher's 14 ms.
LAUNCHER = r"""
import os, sys, _signal as signal
envfile, procs, uid, gid, cwd, _sep, *argv = sys.argv[1:]
fd = os.open(envfile, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
data = b""
while True:
    chunk = os.read(fd, 65536)
    if not chunk:
        break
    data += chunk
os.close(fd)
os.unlink(envfile)
env = {}
for item in data.split(b"\0"):
    key, eq, value = item.partition(b"=")
    if eq:
        env[key] = value
if procs:
    try:
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))
    except OSError as exc:
        sys.stderr.write(f"plan-runner: cannot join the session's cgroup {procs}: {exc.strerror}\n")
        os._exit(125)
os.setgroups([])
os.setresgid(int(gid), int(gid), int(gid))
os.setresuid(int(uid), int(uid), int(uid))
os.umask(0o022)
for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
    signal.signal(sig, signal.SIG_DFL)
try:
    os.chdir(cwd)
except OSError as exc:
    sys.stderr.write(f"plan-runner: cannot enter {cwd} as the agent's user: {exc.strerror}\n")
    os._exit(126)
try:
    os.execvpe(argv[0], argv, env)
except OSError as exc:
    sys.stderr.write(f"plan-runner: cannot start {argv[0]!r}: {exc.strerror}\n")
    os._exit(127 if exc.errno == 2 else 126)
"""

# Root's chores through `sudo -n` (a judge that is not root): one small program, its source passed on the
# command line (nothing plan-runner's user or the agent's could have replaced is read).
ADMIN = r"""
import os, sys, time
op, path = sys.argv[1], sys.argv[2]
if op == "mkcg":
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    os.mkdir(path, 0o755)
elif op == "kill":
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as fh:
            fh.write("1")
        frozen = False
    except FileNotFoundError:
        with open(os.path.join(path, "cgroup.freeze"), "w") as fh:
            fh.write("1")
        frozen = True
    for pid in open(os.path.join(path, "cgroup.procs")).read().split():
        try:
            os.kill(int(pid), 9)
        except OSError:
            pass
    if frozen:
        with open(os.path.join(path, "cgroup.freeze"), "w") as fh:
            fh.write("0")
elif op == "rmcg":
    os.rmdir(path)
"""


class _Session:
    """What one lease made for its identity: its cgroup, its private temporary folder, the homes its processes
    were started with (all removed when the lease ends)."""

    def __init__(self, cgroup: Path | None, tmp: Path | None) -> None:
        self.cgroup = cgroup
        self.tmp = tmp
        self.homes: set[str] = set()


@dataclass(frozen=True)
class Launch:
    """How to start one untrusted process: `argv` and Popen's extra arguments; `env_file` to remove after."""

    argv: list[str]
    popen: dict
    env_file: Path | None = None


@dataclass(frozen=True)
class Identity:
    """The identity untrusted code runs as. `uid is None`: no isolation (the judge's own user)."""

    uid: int | None = None
    gid: int | None = None
    name: str = ""
    sudo: bool = False  # the judge is not root: untrusted code starts through `sudo -n`
    session: _Session | None = field(default=None, compare=False, repr=False)
    # kernel namespaces instead of another uid (an ordinary user without sudo): uid is plan-runner's own
    room: rooms.Namespaces | None = field(default=None, compare=False, repr=False)

    @property
    def isolated(self) -> bool:
        return self.uid is not None

    @property
    def cgroup(self) -> Path | None:
        return self.session.cgroup if self.session else None

    @property
    def other_user(self) -> bool:
        """Untrusted code runs as another uid (the pool): what it may reach is decided by file modes."""
        return self.isolated and self.room is None

    def describe(self) -> str:
        if self.room is not None:
            return self.room.describe()
        if not self.isolated:
            return "no isolation (isolation: none): the agent runs as plan-runner's own user"
        how = "" if self.cgroup is not None or self.session is None else \
            " (no writable cgroup v2 here: its processes are found through /proc)"
        return f"isolated as user {self.name} (uid {self.uid})" + (" via sudo" if self.sudo else "") + how

    # --- starting processes ----------------------------------------------------------------

    def launch(self, argv: Sequence[str], env: dict[str, str], cwd: Path | str) -> Launch:
        """How to start `argv` in `cwd` as this identity with exactly `env` (plus its private TMPDIR): through the
        launcher, which reads `env` from a private file (never from a command line) and joins the cgroup."""
        if not self.isolated:
            return Launch(list(argv), {"cwd": cwd, "env": dict(env)})
        if self.room is not None:
            made = self.room.command(argv, env, cwd, self.room.view_for(Path(cwd), judge_dir("agents")))
            return Launch(made.argv, made.popen)
        env = dict(env)
        if self.session is not None:
            if self.session.tmp is not None:
                for name in ("TMPDIR", "TMP", "TEMP", "CLAUDE_CODE_TMPDIR"):
                    env[name] = str(self.session.tmp)
            if env.get("HOME"):
                self.session.homes.add(env["HOME"])
        fd, name = tempfile.mkstemp(prefix="env-", dir=judge_dir("launch"))
        try:
            os.write(fd, b"\0".join(f"{k}={v}".encode("utf-8", "surrogateescape") for k, v in env.items()
                                     if "=" not in k and "\0" not in k + v))
        finally:
            os.close(fd)
        procs = str(self.cgroup / "cgroup.procs") if self.cgroup is not None else ""
        python = _tools(self.sudo).python
        argv = [python, "-I", "-S", "-c", LAUNCHER, name, procs, str(self.uid), str(self.gid), str(cwd), "--",
                *argv]
        if self.sudo:
            argv = [_sudo(), "-n", "--", *argv]
        return Launch(argv, {"cwd": "/", "env": {}}, Path(name))

    @contextmanager
    def network(self, phase: Phase, network: object, access: ModelAccess | None = None,
                refused: list | None = None) -> Iterator[None]:
        """In a room, every process of the block reaches only what the plan's `network:` allows `phase` (and for
        the agent its model, through a credential route: the key stays outside), through an allow-list proxy of
        its own; what it was refused is appended to `refused`. Another uid (the pool) keeps the host's network."""
        if self.room is None:
            yield
            return
        from runner.adapters.netproxy import start_proxy
        from runner.core.network import ModelAccess, allow_list

        access = access if access is not None else ModelAccess()
        routes = access.routes if phase == "agent" else ()
        with start_proxy(allow_list(network, phase, access), routes) as proxy, self.room.behind(proxy):
            try:
                yield
            finally:
                if refused is not None:
                    refused.extend(proxy.refused())

    # --- stopping everything it started -------------------------------------------------------

    def pids(self) -> list[int]:
        """Every live thread group of this uid (Linux /proc): real, effective or saved uid, so a setuid program
        the agent started (its real uid stays the agent's) is found too. A zombie whose threads are all gone is
        not live (it runs nothing, a signal cannot remove it, its parent reaps it); a zombie *leader* whose
        other threads run on (its main thread left with the bare `exit` syscall) is: a SIGKILL to its id ends
        them all. In a room, none: each process's PID namespace ended with it."""
        if not self.other_user:
            return []
        found = []
        me = str(self.uid).encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(os.path.join(entry.path, "status"), "rb") as fh:
                    state, uids = b"", []
                    for line in fh:
                        if line.startswith(b"State:"):
                            state = (line.split() + [b""])[1]
                        elif line.startswith(b"Uid:"):
                            uids = line.split()[1:4]
                            break  # State comes before Uid
            except OSError:
                continue
            if me not in uids:
                continue
            if state not in (b"Z", b"X") or _threads_alive(entry.path):
                found.append(int(entry.name))
        return found

    def kill_all(self, *, everywhere: bool = False) -> int:
        """Kill everything this identity runs until nothing is left: its cgroup (killed at once, forks
        included; every process it started is in there and cannot leave), then, without a cgroup or with
        `everywhere` (the lease's start and end), every thread group of its uid (a few passes end any fork
        loop: a process being killed cannot fork again); how many the uid scan found. Raises if something
        survives. In a room, nothing to do: what a process started was in its PID namespace, which the kernel
        emptied when that process (bwrap's child) or bwrap ended (proc.run kills bwrap's group)."""
        if not self.other_user:
            return 0
        if self.cgroup is not None:
            _kill_cgroup(self.cgroup, self.sudo)
            if not everywhere:
                return 0
        killed = 0
        for _ in range(_KILL_PASSES):
            pids = self.pids()
            if not pids:
                return killed
            if self.sudo:
                kill = tools.harden(need_sudo=True).which("kill") or "/bin/kill"
                subprocess.run([_sudo(), "-n", kill, "-KILL", *map(str, pids)], capture_output=True, check=False)
            else:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        continue
            killed += len(pids)
            time.sleep(0.01)
        raise PlanRunnerError(
            what=f"processes of {self.name} (uid {self.uid}) keep appearing after {_KILL_PASSES} kills",
            why="something outside plan-runner keeps starting processes as the agent's user",
            fix=f"check `ps -u {self.name}`; no other service may run as that user")

    # --- files the identity must own ---------------------------------------------------------

    def give(self, path: Path, below: Path | None = None) -> None:
        """Make `path` (a tree plan-runner just created in a folder of its own) owned by this identity, through
        descriptors: no link the tree holds is followed (runner.adapters.sandbox.fsafe). `below`: the trusted
        folder to walk from when `path`'s own folder is this identity's (e.g. the agent's clone)."""
        if not self.other_user:
            return
        if self.sudo:
            _sudo_chown(path, f"{self.uid}:{self.gid}")
            return
        assert self.uid is not None and self.gid is not None  # isolated: both are set
        fsafe.chown_tree(Path(path), self.uid, self.gid, below=Path(below or Path(path).parent))

    def reclaim(self, path: Path) -> None:
        """Before plan-runner reads or replaces a tree this identity wrote: as root nothing to do (it reads
        through descriptors, fsafe); through sudo, the tree becomes plan-runner's user's again."""
        if self.isolated and self.sudo and os.path.lexists(path):
            _sudo_chown(path, f"{os.geteuid()}:{os.getegid()}")

    def remove(self, path: Path) -> None:
        """Delete a tree this identity may have written (links are removed, never followed)."""
        if not os.path.lexists(path):
            return
        if self.sudo:
            rm = tools.harden(need_sudo=True).which("rm") or "/bin/rm"
            # GNU rm walks with fts relative to directory descriptors (FTS_PHYSICAL|FTS_CWDFD): no link followed
            subprocess.run([_sudo(), "-n", rm, "-rf", "--one-file-system", "--", str(path)], capture_output=True,
                           check=False)
            return
        fsafe.remove(Path(path), below=Path(path).parent)


def _threads_alive(proc_dir: str) -> bool:
    """Whether a zombie thread-group leader still has running threads (/proc/<pid>/task/<tid>/stat)."""
    try:
        tids = os.listdir(os.path.join(proc_dir, "task"))
    except OSError:
        return False
    for tid in tids:
        try:
            with open(os.path.join(proc_dir, "task", tid, "stat"), "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[:1]
        except OSError:
            continue
        if state and state[0] not in (b"Z", b"X"):
            return True
    return False


def _tools(sudo: bool) -> tools.Tools:
    return tools.hardened() or tools.harden(need_sudo=sudo)


def _sudo() -> str:
    found = tools.harden(need_sudo=True).sudo
    assert found is not None
    return found


def _sudo_chown(path: Path, owner: str) -> None:
    chown = tools.harden(need_sudo=True).which("chown") or "/bin/chown"
    # -R -h -P: GNU chown walks with fts on directory descriptors and changes links themselves, never follows
    subprocess.run([_sudo(), "-n", chown, "-R", "-h", "-P", owner, "--", str(path)], capture_output=True, check=True)


def _admin(sudo: bool, op: str, path: Path) -> None:
    """One of root's chores on a cgroup (ADMIN): in this process as root, through `sudo -n` otherwise."""
    if sudo:
        done = subprocess.run([_sudo(), "-n", _tools(True).python, "-I", "-S", "-c", ADMIN, op, str(path)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"{op} {path}: {done.stderr.strip()[-300:]}")
        return
    if op == "mkcg":
        os.makedirs(path.parent, mode=0o755, exist_ok=True)
        os.mkdir(path, 0o755)
    elif op == "kill":
        # cgroup.kill sends SIGKILL to each thread-group leader as a *thread*-directed signal, which a leader
        # that already exited (the bare `exit` survivor) drops: its other threads run on. A process-directed
        # SIGKILL to each member's id (kill(2)) reaches them. Where cgroup.kill is missing (before Linux 5.14),
        # the group is frozen first, so nothing forks meanwhile.
        try:
            (path / "cgroup.kill").write_text("1")
            frozen = False
        except FileNotFoundError:
            (path / "cgroup.freeze").write_text("1")
            frozen = True
        for pid in (path / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        if frozen:
            (path / "cgroup.freeze").write_text("0")
    elif op == "rmcg":
        os.rmdir(path)


def _cgroup_procs(cgroup: Path) -> list[str]:
    """The thread groups in `cgroup` that still run something (a zombie all of whose threads are gone stays
    listed until its parent reaps it: it runs nothing)."""
    try:
        pids = (cgroup / "cgroup.procs").read_text().split()
    except FileNotFoundError:
        return []
    return [p for p in pids if _threads_alive(f"/proc/{p}")]


def _kill_cgroup(cgroup: Path, sudo: bool, wait_s: float = 10.0) -> None:
    """Kill everything in `cgroup` and wait until it is empty; raise if it is not."""
    if not _cgroup_procs(cgroup):
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            _admin(sudo, "kill", cgroup)
        except OSError:
            pass
        pause = time.monotonic() + 0.5
        while time.monotonic() < pause:
            if not _cgroup_procs(cgroup):
                return
            time.sleep(0.005)
        if time.monotonic() > deadline:
            raise PlanRunnerError(
                what=f"the session's cgroup {cgroup} is not empty after it was killed",
                why=f"processes {' '.join(_cgroup_procs(cgroup)[:10])} are still in it",
                fix=f"check them with `ps -o pid,stat,cmd -p ...`; kill them (as root: `echo 1 > {cgroup}/cgroup.kill`)")


def cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on a
    hybrid one), read-write; None without one."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if rest and rest[0] == "cgroup2" and len(fields) > 5 and fields[3] == "/" and "rw" in fields[5].split(","):
            found.append(Path(fields[4]))
    found.sort(key=lambda p: (p != Path("/sys/fs/cgroup"), str(p)))
    return found[0] if found else None


CGROUP_DIR = "plan-runner"


def _session_cgroup(name: str, sudo: bool) -> Path | None:
    """A fresh cgroup for one lease of `name` (its stale ones, from a plan-runner killed outright, are killed and
    removed first: the slot's lock is held, so nothing else uses them); None where none can be made."""
    if os.environ.get("PLAN_RUNNER_NO_CGROUP") == "1":
        return None
    root = cgroup2_root()
    if root is None:
        return None
    base = root / CGROUP_DIR
    try:
        for old in base.iterdir() if base.is_dir() else ():
            if old.name.startswith(name + "."):
                _kill_cgroup(old, sudo)
                try:
                    _admin(sudo, "rmcg", old)
                except OSError:
                    pass
        path = base / f"{name}.{os.getpid()}.{secrets.token_hex(4)}"
        _admin(sudo, "mkcg", path)
    except (OSError, PlanRunnerError):
        return None
    if not (path / "cgroup.procs").exists():
        return None
    return path


_SWEPT = ("/tmp", "/var/tmp", "/dev/shm")


def _sweep(identity: Identity) -> None:
    """Remove what the uid left directly in the world-writable temporary folders (Claude Code's
    /tmp/claude-<uid> included): nothing of one lease is there for the next."""
    if not identity.isolated:
        return
    for folder in _SWEPT:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                owner = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if owner == identity.uid:
                try:
                    identity.remove(Path(entry.path))
                except (OSError, PlanRunnerError):
                    pass


@dataclass
class Lease:
    """An identity held for one session (its pool slot is locked until `release`)."""

    identity: Identity
    _lock_fd: int | None = field(default=None, repr=False)
    _legacy_fd: int | None = field(default=None, repr=False)
    _dir: Path | None = field(default=None, repr=False)

    def release(self) -> None:
        identity = self.identity
        if identity.room is not None:
            identity.room.close()
            return
        try:
            identity.kill_all(everywhere=True)
            session = identity.session
            if session is not None:
                for home in sorted(session.homes):
                    if os.path.lexists(home):
                        _wipe(identity, Path(home))
                if self._dir is not None:
                    identity.remove(self._dir / "tmp")
                    fsafe.remove(self._dir, below=self._dir.parent)
                _sweep(identity)
                if session.cgroup is not None:
                    _kill_cgroup(session.cgroup, identity.sudo)
                    try:
                        _admin(identity.sudo, "rmcg", session.cgroup)
                    except OSError:
                        pass
        finally:
            for fd in (self._lock_fd, self._legacy_fd):
                if fd is not None:
                    os.close(fd)
            self._lock_fd = self._legacy_fd = None


def _wipe(identity: Identity, home: Path) -> None:
    """Remove a HOME the lease's processes were started with, when it is the uid's own folder in a folder of
    plan-runner's (the agent's areas): never anyone else's."""
    try:
        st = os.lstat(home)
        parent = os.lstat(home.parent)
    except OSError:
        return
    if (stat.S_ISDIR(st.st_mode) and st.st_uid == identity.uid and parent.st_uid in (0, os.geteuid())
            and not parent.st_mode & 0o022):
        try:
            identity.remove(home)
        except (OSError, PlanRunnerError):
            pass


def _can_sudo() -> bool:
    try:
        sudo = tools.resolve(check_code=False).sudo
    except PlanRunnerError:
        return False
    if sudo is None:
        return False
    try:
        return subprocess.run([sudo, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def available() -> str | None:
    """How plan-runner can isolate here: 'root', 'sudo', or None."""
    if os.geteuid() == 0:
        return "root"
    return "sudo" if _can_sudo() else None


def unreachable(path: str | Path) -> Path | None:
    """The first place on the way to `path`, as it is executed, that another user cannot pass: a folder the
    kernel walks through without o+x, or the file (or folder) itself without o+r/o+x; None when the agent's
    user can run (or read) it.

    The walk is the kernel's: every folder along the path as written and along every symlink it follows, so a
    venv's `bin/python` under a private home is unreachable even when its target (/usr/bin/python3.11) is not.
    Checking only the symlink-resolved path said yes to it, and every isolated session then died with
    "Permission denied"."""
    text = os.fspath(path)
    pending = (text if text.startswith("/") else os.getcwd() + "/" + text).split("/")  # ".." as the kernel does
    current = Path("/")
    hops = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        try:
            if not os.stat(current).st_mode & stat.S_IXOTH:
                return current  # nothing in it can be looked up by other users
        except OSError:
            return current
        if name == "..":
            current = current.parent
            continue
        step = current / name
        try:
            st = os.lstat(step)
        except OSError:
            return step
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                return step
            try:
                target = os.readlink(step)
            except OSError:
                return step
            if target.startswith("/"):
                current = Path("/")
            pending[:0] = target.split("/")
            continue
        current = step
    try:
        mode = os.stat(current).st_mode
    except OSError:
        return current
    return None if mode & stat.S_IXOTH and mode & stat.S_IROTH else current


def judge_dir(name: str) -> Path:
    """A directory only the judge may write, under the system temp dir, checked (never a planted link)."""
    base = Path(os.environ.get("PLAN_RUNNER_SANDBOX_ROOT") or tempfile.gettempdir())
    path = base / f"plan-runner-{os.geteuid()}" / name
    for p in (path.parent, path):
        try:
            os.mkdir(p, 0o711)
        except FileExistsError:
            pass
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PlanRunnerError(
                what=f"{p} is not a private directory of plan-runner's user",
                why="another user created it (or a link) first: plan-runner never works in a directory "
                    "someone else controls",
                fix=f"remove {p} (as root if needed) and run again, or set PLAN_RUNNER_SANDBOX_ROOT "
                    "to a directory only you can write")
    return path


def _private_dir(path: Path, mode: int) -> Path | None:
    """`path` made (if missing) and checked: a real directory of plan-runner's user that nobody else can write;
    None when it cannot be made or is someone else's."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return None
    return path


def lock_dir() -> Path:
    """Where the pool's slot locks live: one place per machine (and per judge user, whose pool it is),
    whatever TMPDIR or PLAN_RUNNER_SANDBOX_ROOT say, so two plan-runners never lease the same uid: root's
    /run/plan-runner, another judge's /run/lock/plan-runner-<uid> (/run/lock is sticky: only that user can
    make or replace it), else /var/lock, else /tmp."""
    uid = os.geteuid()
    candidates = [Path("/run/plan-runner")] if uid == 0 else []
    candidates += [Path(d) / f"plan-runner-{uid}" for d in ("/run/lock", "/var/lock", "/tmp")]
    for folder in candidates:
        parent = folder.parent
        try:
            pst = os.stat(parent)
        except OSError:
            continue
        if pst.st_uid != 0 or (pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX):
            continue  # a folder others could replace entries of
        if _private_dir(folder, 0o755 if uid == 0 else 0o700) is not None:
            pool = _private_dir(folder / "pool", 0o700)
            if pool is not None:
                return pool
    raise PlanRunnerError(
        what="no machine-wide place for the agent pool's locks",
        why="/run/plan-runner, /run/lock/plan-runner-<uid>, /var/lock/... and /tmp/plan-runner-<uid> are missing, "
            "not writable, or belong to another user",
        fix=f"remove a plan-runner-{uid} folder that another user made in /run/lock or /tmp, or create /run/lock "
            "(mode 1777, owned by root)")


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def _ensure_user(name: str, sudo: bool) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(name)
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        pass
    argv = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
            "--shell", "/bin/sh", name]
    if sudo:
        argv = ["sudo", "-n", *argv]
    lock = lock_dir() / "useradd.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for attempt in range(20):
            try:
                entry = pwd.getpwnam(name)
                return entry.pw_uid, entry.pw_gid
            except KeyError:
                pass
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode in (0, 9):  # 9: it exists (created by another machine-wide process)
                continue
            if "lock" in proc.stderr.lower() and attempt < 19:  # /etc/passwd locked by another tool
                time.sleep(0.1)
                continue
            raise PlanRunnerError(
                what=f"could not create the agent's user {name!r}",
                why=(proc.stderr or proc.stdout).strip() or f"useradd exited {proc.returncode}",
                fix="install `useradd` (passwd package), or create the user yourself: "
                    f"`useradd --system --user-group {name}`; or run with isolation: none (local mode only)")
    finally:
        os.close(fd)
    raise PlanRunnerError(what=f"the agent's user {name!r} did not appear after useradd",
                          why="useradd kept failing", fix=f"create it yourself: `useradd --system --user-group {name}`")


def acquire(isolation: Isolation, *, actions: bool = False, prefer_uid: int | None = None) -> Lease:
    """Take an identity for one session, per the plan's `isolation` setting. `prefer_uid`: the pool user tried
    first when free (the one that owns the plan's kept gates' tree: agent_clone.kept_owner)."""
    if isolation == "none":
        if actions:
            raise PlanRunnerError(
                what="isolation: none is refused on GitHub Actions",
                why="the agent would run as the job's own user and could read the GitHub token and forge the verdict",
                fix="remove `isolation: none` from the plan; GitHub-hosted runners isolate with sudo")
        return Lease(Identity())
    if not os.path.isdir("/proc/self"):
        raise PlanRunnerError(
            what="plan-runner can isolate the agent only on Linux",
            why="after the agent and after each gate it finds and kills every process of the agent's user through "
                "/proc, which this system does not have: the agent's processes could outlive its session",
            fix="run plan-runner on Linux (a container or a VM will do); or, locally and at your own risk, add "
                "`isolation: none` to the plan's front matter (or pass --isolation none)")
    how = available()
    if how is None:
        return _room_lease()
    sudo = how == "sudo"
    tools.harden(need_sudo=sudo)  # before the first agent starts: absolute tools, a PATH nobody else can write
    pool = lock_dir()
    legacy = judge_dir("pool")  # where plan-runners before the machine-wide lock held theirs: held too
    for slot in _slot_order(prefer_uid):
        fd = _try_lock(pool / f"slot-{slot}.lock")
        if fd is None:
            continue
        legacy_fd = _try_lock(legacy / f"slot-{slot}.lock") if legacy != pool else None
        if legacy_fd is None and legacy != pool:
            os.close(fd)
            continue
        name = agent_user_name(slot)
        try:
            uid, gid = _ensure_user(name, sudo)
        except BaseException:
            for f in (fd, legacy_fd):
                if f is not None:
                    os.close(f)
            raise
        if uid == 0 or uid == os.geteuid():
            for f in (fd, legacy_fd):
                if f is not None:
                    os.close(f)
            raise PlanRunnerError(what=f"the user {name!r} is root or plan-runner's own user",
                                  why="isolating the agent as itself would isolate nothing",
                                  fix=f"delete the user {name!r}; plan-runner creates it as a system user")
        lease = Lease(Identity(uid=uid, gid=gid, name=name, sudo=sudo), fd, legacy_fd)
        try:
            bare = Identity(uid=uid, gid=gid, name=name, sudo=sudo)
            bare.kill_all()  # a crashed earlier session of this slot may have left something
            _sweep(bare)
            sessions = judge_dir("sessions")
            for stale in sessions.glob(f"{name}.*"):  # a lease of this slot whose plan-runner was killed outright
                bare.remove(stale / "tmp")
                fsafe.remove(stale, below=sessions)
            folder = sessions / f"{name}.{secrets.token_hex(6)}"
            os.mkdir(folder, 0o711)
            os.mkdir(folder / "tmp", 0o700)
            bare.give(folder / "tmp")
            lease._dir = folder
            lease.identity = Identity(uid=uid, gid=gid, name=name, sudo=sudo,
                                      session=_Session(_session_cgroup(name, sudo), folder / "tmp"))
        except BaseException:
            lease.release()
            raise
        return lease
    raise PlanRunnerError(what=f"all {POOL_SIZE} agent identities are busy",
                          why="that many sessions run at once on this machine",
                          fix="wait for some to finish, or run fewer plans at once")


def _room_lease() -> Lease:
    """An ordinary user without sudo: kernel namespaces (bubblewrap) as plan-runner's own uid."""
    from runner.adapters.sandbox.agentenv import own_roots

    also = [Path(p) for p in own_roots()] + [Path(sys.base_prefix), Path(sys.executable)]
    claude = os.environ.get("PLAN_RUNNER_CLAUDE")
    if claude:
        also.append(Path(claude))
    shown = rooms.toolchain(os.environ.get("PATH", os.defpath), also, homes=[Path.home()],
                            private=[judge_dir("agents").parent])
    made = rooms.open_room(toolchain_roots=shown, base=judge_dir("rooms"))
    uid, gid = os.geteuid(), os.getegid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return Lease(Identity(uid=uid, gid=gid, name=name, room=made))


def _slot_order(prefer_uid: int | None) -> list[int]:
    slots = list(range(POOL_SIZE))
    if prefer_uid is None:
        return slots
    try:
        name = pwd.getpwuid(prefer_uid).pw_name
    except KeyError:
        return slots
    first = [s for s in slots if agent_user_name(s) == name]
    return first + [s for s in slots if s not in first]


def agent_user_name(slot: int, judge_uid: int | None = None) -> str:
    """The pool's users are per judge user too: two judges (root and a sudo user) never share one, so one
    judge's uid-wide kill never reaches the other's agent (the slot locks are each judge's own)."""
    judge_uid = os.geteuid() if judge_uid is None else judge_uid
    return USER_PREFIX + (f"-u{judge_uid}" if judge_uid else "") + (f"-{slot}" if slot else "")


@contextmanager
def leased(isolation: Isolation, *, actions: bool = False, prefer_uid: int | None = None) -> Iterator[Identity]:
    lease = acquire(isolation, actions=actions, prefer_uid=prefer_uid)
    try:
        yield lease.identity
    finally:
        lease.release()


def area_key(repo: Path, plan_id: str) -> str:
    """A stable short name for one plan of one repository (the agent's work tree path must not change
    between sessions: Claude Code finds a session to resume by its working directory)."""
    digest = hashlib.sha256(f"{Path(repo).resolve()}\0{plan_id}".encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in plan_id)[:40]
    return f"{safe}-{digest}"
