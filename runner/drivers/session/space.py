"""A full disk or inode table ends in a recorded, clear state.

The agent can fill a file system it shares with plan-runner (the temp folder, the repository's disk) with
bytes or with empty files. Without care every later write of plan-runner fails with `OSError: [Errno 28]`, the
session is never recorded, and each later run crashes the same way. The mechanism:

* **a reserve** (`Reserve`): before a session starts, plan-runner keeps `RESERVE_BYTES` of allocated space and
  `RESERVE_INODES` empty files in a folder of its own on every file system it writes (its scratch folder,
  `.git/plan-runner` by default, and its sandbox root under the temp folder). When a file system is
  exhausted mid-session (the agent is stopped by then: its room's PID namespace ended before anything is read), the
  reserve is released, and the space it frees is what plan-runner needs to save the agent's work and write
  the session's record;
* **a clear error** (`OutOfSpace`): what is full (which file system, how much is left, bytes and inodes), why,
  and how to fix it, in place of an `unexpected error`;
* **the next run** re-makes the reserve first: while the disk is still full it stops with that clear error
  before it starts anything; once space is back it runs (a session whose record could not be written even
  so is reconciled then, its agent's work salvaged from the agent's clone).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import PlanRunnerError

RESERVE_BYTES = 4 * 2**20
RESERVE_INODES = 64
_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# the C library's words, and git's when it cannot write an object or an index ("sha1 file ... write error. Out of
# diskspace")
_WORDS = ("no space left on device", "disk quota exceeded", "out of diskspace")


def exhausted(exc: BaseException | None) -> bool:
    """Did `exc` (or what caused it) come from a full file system: ENOSPC/EDQUOT, or a tool saying so (git)."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, OSError) and exc.errno in _ERRNOS:
            return True
        text = str(exc).lower()
        if isinstance(exc, PlanRunnerError):
            text += f" {exc.why} {exc.fix}".lower()
        if any(w in text for w in _WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


@dataclass(frozen=True)
class Usage:
    path: Path  # one of the folders plan-runner writes
    mount: Path  # the mount point of its file system
    free_bytes: int
    free_inodes: int
    total_inodes: int

    @property
    def full(self) -> bool:
        return self.free_bytes < RESERVE_BYTES or (self.total_inodes > 0 and self.free_inodes < RESERVE_INODES)

    def words(self) -> str:
        inodes = f"{self.free_inodes} of {self.total_inodes} inodes free" if self.total_inodes else "no inode limit"
        return f"{self.mount} (holding {self.path}): {_size(self.free_bytes)} free, {inodes}"


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _mount(path: Path) -> Path:
    dev = os.stat(path).st_dev
    while path.parent != path:
        try:
            if os.stat(path.parent).st_dev != dev:
                break
        except OSError:
            break
        path = path.parent
    return path


def _existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def usage(paths: Iterable[Path]) -> list[Usage]:
    """Each distinct file system among `paths` (the nearest existing folder of each), once."""
    out: list[Usage] = []
    devs: set[int] = set()
    for raw in paths:
        path = _existing(Path(raw))
        try:
            st, vfs = os.stat(path), os.statvfs(path)
        except OSError:
            continue
        if st.st_dev in devs:
            continue
        devs.add(st.st_dev)
        out.append(Usage(path=path, mount=_mount(path), free_bytes=vfs.f_bavail * vfs.f_frsize,
                         free_inodes=vfs.f_favail, total_inodes=vfs.f_files))
    return out


class OutOfSpace(PlanRunnerError):
    """A file system plan-runner writes is full: what, how full, why, and what to do."""


def full_words(found: list[Usage]) -> str:
    """The exhausted file systems among `found` in words (all of them when none is below the reserve now)."""
    full = [u for u in found if u.full] or found
    return "; ".join(u.words() for u in full) or "a file system plan-runner writes"


def out_of_space(paths: Iterable[Path], *, when: str, outcome: str, seen: list[Usage] | None = None) -> OutOfSpace:
    """The clear error; `seen`: the file systems as measured when the write failed (before a reserve was freed)."""
    found = seen if seen is not None else usage(paths)
    full = [u for u in found if u.full] or found
    where = full_words(found)
    first = full[0].mount if full else Path("/tmp")
    return OutOfSpace(
        what=f"no space left{' ' + when if when else ''}: {where}",
        why="a file system plan-runner writes (its repository's .git, its temp and sandbox folders) ran out of "
            "space or of inodes; an agent can fill one it shares with plan-runner (a temp folder), with bytes or "
            f"with many small files. {outcome}",
        fix=f"free space there (`df -h {first}` and `df -i {first}`; what agents left is in their areas: "
            "`plan-runner clean` removes them), then run "
            "again: plan-runner keeps a reserve of space of its own so that it can record a session cut short "
            "this way, and re-makes it before the next session starts")


class Reserve:
    """Space and inodes held back on each file system plan-runner writes, released to save and record a session
    when one of them is exhausted. `folders`: plan-runner's own private folders (one is kept per file system)."""

    NAME = "space-reserve"

    def __init__(self, folders: Iterable[Path]) -> None:
        self.folders: list[Path] = []
        devs: set[int] = set()
        for folder in folders:
            try:
                dev = os.stat(_existing(Path(folder))).st_dev
            except OSError:
                continue
            if dev not in devs:
                devs.add(dev)
                self.folders.append(Path(folder) / self.NAME)

    def ensure(self) -> None:
        """Make (or top up) every reserve; a file system too full for it raises OutOfSpace: nothing is started."""
        for folder in self.folders:
            try:
                self._make(folder)
            except OSError as exc:
                if exc.errno not in _ERRNOS:
                    raise
                self._drop(folder)
                raise out_of_space([folder.parent], when="before the session",
                                   outcome="No session was started, nothing was recorded and nothing is lost.") \
                    from exc

    @staticmethod
    def _make(folder: Path) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for i in range(RESERVE_INODES):
            inode = folder / f"inode-{i}"
            if not inode.exists():
                os.close(os.open(inode, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        space = folder / "bytes"
        if not space.exists() or space.stat().st_size < RESERVE_BYTES:
            fd = os.open(space, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                try:
                    os.posix_fallocate(fd, 0, RESERVE_BYTES)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    os.ftruncate(fd, 0)
                    chunk = b"\0" * 2**20
                    for _ in range(RESERVE_BYTES // len(chunk)):
                        os.write(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)

    @staticmethod
    def _drop(folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def release(self) -> None:
        """Free every reserve now (the agent is stopped): the room plan-runner saves and records the session in."""
        for folder in self.folders:
            self._drop(folder)

    def held(self) -> bool:
        return all((f / "bytes").is_file() and (f / f"inode-{RESERVE_INODES - 1}").exists() for f in self.folders)
