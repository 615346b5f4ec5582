"""Who runs untrusted code: the agent, and every gate, `verify:` and `setup:` command (SPEC 4b).

plan-runner is the judge; the agent and the code it wrote are the defendant. When
plan-runner is root (or may use `sudo -n`, as on GitHub-hosted runners), untrusted
code runs as a dedicated unprivileged system user taken from a small pool
(`plan-runner-agent`, `plan-runner-agent-1`, ...; per judge user): that user cannot read the judge's
memory or environment (`/proc/<pid>/environ` is the owner's), signal or trace it,
or write its files. After the agent, and after each gate, every process of that
uid is killed, daemons that called `setsid` included: nothing outlives a session.

A pool slot is held with `flock` for the whole session, so overlapping sessions on
one machine (several plans at once) never share a uid, and a uid-wide kill of one
session never touches another's processes.

Without either (an ordinary user, no sudo), no isolation is possible: local mode
runs only with `isolation: none` (plan) or `--isolation none`, and says so on every
session; Actions mode refuses.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runner.core.errors import PlanRunnerError

Isolation = Literal["auto", "user", "none"]
USER_PREFIX = "plan-runner-agent"
POOL_SIZE = 64
_KILL_PASSES = 200


@dataclass(frozen=True)
class Identity:
    """The identity untrusted code runs as. `uid is None`: no isolation (the judge's own user)."""

    uid: int | None = None
    gid: int | None = None
    name: str = ""
    sudo: bool = False  # the judge is not root: untrusted code starts through `sudo -n`

    @property
    def isolated(self) -> bool:
        return self.uid is not None

    def describe(self) -> str:
        if not self.isolated:
            return "no isolation (isolation: none): the agent runs as plan-runner's own user"
        return f"isolated as user {self.name} (uid {self.uid})" + (" via sudo" if self.sudo else "")

    # --- starting processes ----------------------------------------------------------------

    def command(self, argv: Sequence[str], env: dict[str, str], cwd: Path | str) -> tuple[list[str], dict]:
        """The argv and extra Popen arguments (`cwd` included) that start `argv` in `cwd` as this identity
        with exactly `env`."""
        if not self.isolated:
            return list(argv), {"cwd": cwd}
        if not self.sudo:
            return list(argv), {"cwd": cwd, "user": self.uid, "group": self.gid, "extra_groups": [], "umask": 0o022}
        # sudo resets PATH (secure_path) and may drop variables: `env -i` sets exactly `env` after it; the
        # folder is entered as the identity (plan-runner's own user may not enter the agent's folders).
        assignments = [f"{k}={v}" for k, v in env.items() if "=" not in k]
        return ["sudo", "-n", "-u", self.name, "--", "/usr/bin/env", "-i", f"--chdir={cwd}", *assignments,
                *argv], {"cwd": "/"}

    # --- stopping everything it started -------------------------------------------------------

    def pids(self) -> list[int]:
        """Every live process of this uid (Linux /proc): real, effective or saved uid, so a setuid program
        the agent started (its real uid stays the agent's) is found too. A zombie is not live: it runs nothing,
        a signal cannot remove it, and it stays listed until its parent reaps it (often plan-runner itself,
        which reaps after this kill)."""
        if not self.isolated:
            return []
        found = []
        me = str(self.uid)
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
            if state not in (b"Z", b"X") and me.encode() in uids:
                found.append(int(entry.name))
        return found

    def kill_all(self) -> int:
        """SIGKILL every process of this uid until none is left; how many were killed.

        A process being killed cannot fork again, so each pass only meets children born
        before the previous one; a few passes end any fork loop."""
        if not self.isolated:
            return 0
        killed = 0
        for _ in range(_KILL_PASSES):
            pids = self.pids()
            if not pids:
                return killed
            if self.sudo:
                subprocess.run(["sudo", "-n", "kill", "-KILL", *map(str, pids)], capture_output=True, check=False)
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

    def give(self, path: Path) -> None:
        """Make `path` (a tree plan-runner just created; nothing of this uid runs) owned by this identity."""
        if not self.isolated:
            return
        if self.sudo:
            subprocess.run(["sudo", "-n", "chown", "-R", "-h", f"{self.uid}:{self.gid}", str(path)],
                           capture_output=True, check=True)
            return
        os.lchown(path, self.uid, self.gid)
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), self.uid, self.gid)

    def reclaim(self, path: Path) -> None:
        """Before plan-runner reads or replaces a tree this identity wrote (nothing of the uid runs any more):
        as root nothing to do; through sudo, the tree becomes plan-runner's user's again."""
        if self.isolated and self.sudo and os.path.lexists(path):
            subprocess.run(["sudo", "-n", "chown", "-R", "-h", f"{os.geteuid()}:{os.getegid()}", str(path)],
                           capture_output=True, check=True)

    def remove(self, path: Path) -> None:
        """Delete a tree this identity may have written (symlinks are removed, never followed)."""
        if not os.path.lexists(path):
            return
        if self.sudo:
            subprocess.run(["sudo", "-n", "rm", "-rf", "--one-file-system", str(path)], capture_output=True,
                           check=False)
            return
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
            return
        shutil.rmtree(path)  # fd-based on Linux: safe against symlinks swapped in (nothing of the uid runs)


@dataclass
class Lease:
    """An identity held for one session (its pool slot is locked until `release`)."""

    identity: Identity
    _lock_fd: int | None = field(default=None, repr=False)

    def release(self) -> None:
        self.identity.kill_all()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _can_sudo() -> bool:
    if shutil.which("sudo") is None:
        return False
    try:
        return subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def available() -> str | None:
    """How plan-runner can isolate here: 'root', 'sudo', or None."""
    if os.geteuid() == 0:
        return "root"
    return "sudo" if _can_sudo() else None


def unreachable(path: str | Path) -> Path | None:
    """The first part of `path` (its real location) another user cannot reach: a folder above it without
    o+x, or the file itself without o+r/o+x; None when the agent's user can run it."""
    real = Path(os.path.realpath(path))
    for folder in reversed(real.parents):
        try:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return folder
        except OSError:
            return folder
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return real
    return None if mode & stat.S_IXOTH and mode & stat.S_IROTH else real


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
    lock = judge_dir("pool") / "useradd.lock"
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


def acquire(isolation: Isolation, *, actions: bool = False) -> Lease:
    """Take an identity for one session, per the plan's `isolation` setting."""
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
        raise PlanRunnerError(
            what="plan-runner cannot isolate the agent on this machine",
            why="it is neither root nor allowed `sudo -n`, so the agent (and the code it writes, gates included) "
                "would run as your own user: it could read your credentials and forge its own verdict",
            fix="run as root or with passwordless sudo; or, locally and at your own risk, add "
                "`isolation: none` to the plan's front matter (or pass --isolation none)")
    sudo = how == "sudo"
    pool = judge_dir("pool")
    for slot in range(POOL_SIZE):
        fd = os.open(pool / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                continue
            raise
        name = agent_user_name(slot)
        try:
            uid, gid = _ensure_user(name, sudo)
        except BaseException:
            os.close(fd)
            raise
        if uid == 0 or uid == os.geteuid():
            os.close(fd)
            raise PlanRunnerError(what=f"the user {name!r} is root or plan-runner's own user",
                                  why="isolating the agent as itself would isolate nothing",
                                  fix=f"delete the user {name!r}; plan-runner creates it as a system user")
        identity = Identity(uid=uid, gid=gid, name=name, sudo=sudo)
        identity.kill_all()  # a crashed earlier session of this slot may have left something
        return Lease(identity, fd)
    raise PlanRunnerError(what=f"all {POOL_SIZE} agent identities are busy",
                          why="that many sessions run at once on this machine",
                          fix="wait for some to finish, or run fewer plans at once")


def agent_user_name(slot: int, judge_uid: int | None = None) -> str:
    """The pool's users are per judge user too: two judges (root and a sudo user) never share one, so one
    judge's uid-wide kill never reaches the other's agent (the slot locks are each judge's own)."""
    judge_uid = os.geteuid() if judge_uid is None else judge_uid
    return USER_PREFIX + (f"-u{judge_uid}" if judge_uid else "") + (f"-{slot}" if slot else "")


@contextmanager
def leased(isolation: Isolation, *, actions: bool = False) -> Iterator[Identity]:
    lease = acquire(isolation, actions=actions)
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
