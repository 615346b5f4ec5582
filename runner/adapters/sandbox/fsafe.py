"""Files in folders the agent could write, touched by the judge without following a single link.

plan-runner (often root) copies, reads, hands over (chown) and removes trees the agent's identity wrote:
its saved CLI state, its bundle, its areas. A path string is resolved by the kernel component by
component at the moment of each call, so a process of the agent that swaps a directory on the path for a
symlink (to the judge's `.git`, to /root) between two calls redirects the judge's copy or chown there;
`O_NOFOLLOW` guards only the last component. Every function here walks instead: it opens a trusted
base directory (owned by root or plan-runner's user, writable by nobody else: nobody can replace an
entry in it), then each component below it with `O_NOFOLLOW | O_DIRECTORY` relative to the previous
directory's descriptor, and acts on the last one through its descriptor (`fchown`, `fstat`, a read from
the open file, `unlinkat`). A link anywhere below the base is never followed: it is skipped (copies) or
removed as a link (removals). That is the invariant; it needs no process of the agent to be dead.

Standard library only, Linux/POSIX `dir_fd` calls.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePath

from runner.core.errors import PlanRunnerError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


class Unsafe(OSError):
    """A component below the base is a link or not a directory: plan-runner does not go there. (Also what the set-up
    cache's archive checks refuse, as `untar.Refused`: one type for every refusal to go through a link.)"""


def _rel(path: Path, below: Path) -> PurePath:
    try:
        rel = PurePath(os.path.normpath(path)).relative_to(os.path.normpath(below))
    except ValueError:
        raise PlanRunnerError(what=f"{path} is not inside {below}", why="plan-runner walks only below a trusted base",
                              fix="this is a bug in plan-runner; please report it") from None
    if ".." in rel.parts:
        raise PlanRunnerError(what=f"{path} leaves {below}", why="a '..' component", fix="report this bug")
    return rel


def open_base(below: Path) -> int:
    """A descriptor of the trusted base: a directory owned by root or plan-runner's user that no one else can
    write (so no one can replace what is in it), or a sticky one such as /tmp (others can replace only their
    own entries there, and those are walked like everything below the base: without following links)."""
    fd = os.open(below, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid not in (0, os.geteuid()) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
        os.close(fd)
        raise PlanRunnerError(what=f"{below} is not a directory only plan-runner can write",
                              why="entries in it could be replaced while plan-runner works there",
                              fix=f"remove {below} and run again")
    return fd


def open_dir_at(name: str, dir_fd: int) -> int:
    """`name` in the folder `dir_fd` as a folder descriptor; Unsafe when it is a link or not a folder (never
    followed)."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(exc.errno, f"{name!r} is a link or not a folder: nothing is read or written through it") \
                from None
        raise


def open_below(dir_fd: int, parts: Sequence[str], *, create: bool = False) -> int:
    """A new descriptor of the folder `parts` below the folder `dir_fd`, reached without following any link
    (Unsafe when a component is a link or not a folder; missing folders made, private, with `create`); the caller
    closes it. The one descent of plan-runner through folders another identity could write."""
    fd = os.dup(dir_fd)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = open_dir_at(part, fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def opened_dir(path: Path, *, below: Path) -> Iterator[int]:
    """A descriptor of the directory `path`, reached from `below` without following any link."""
    base = open_base(below)
    try:
        fd = open_below(base, _rel(path, below).parts)
    finally:
        os.close(base)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _parent(path: Path, below: Path) -> Iterator[tuple[int, str]]:
    parts = _rel(path, below).parts
    if not parts:
        raise PlanRunnerError(what=f"refusing to act on {below} itself", why="only what is below it",
                              fix="report this bug")
    base = open_base(below)
    try:
        fd = open_below(base, parts[:-1])
    finally:
        os.close(base)
    try:
        yield fd, parts[-1]
    finally:
        os.close(fd)


def read_bytes(path: Path, *, below: Path, limit: int) -> bytes | None:
    """The content of the regular file `path` (no link at any component below `below`), at most `limit`
    bytes; None when it is missing, a link, not a regular file, or bigger."""
    try:
        with _parent(path, below) as (dfd, name):
            fd = os.open(name, _FILE, dir_fd=dfd)
    except (OSError, PlanRunnerError):
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return fh.read(limit + 1)[:limit]


def list_regular(directory: Path, *, below: Path) -> list[str]:
    """Names of the regular files directly in `directory` (reached without links), sorted; [] if none."""
    try:
        with opened_dir(directory, below=below) as fd:
            return sorted(e.name for e in os.scandir(fd) if e.is_file(follow_symlinks=False))
    except (OSError, PlanRunnerError):
        return []


def _copy_fd(src: int, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    with open(dst, "xb") as out, os.fdopen(os.dup(src), "rb") as fh:
        shutil.copyfileobj(fh, out, _CHUNK)


def copy_file(src: Path, dst: Path, *, below: Path, limit: int, owner: int | None = None) -> str | None:
    """Copy the regular file `src` (no link at any component below `below`; owned by `owner` when given) to
    `dst` (a judge-private place); what was wrong instead, or None."""
    try:
        with _parent(src, below) as (dfd, name):
            fd = os.open(name, _FILE, dir_fd=dfd)
    except OSError as exc:
        return f"{src.name} could not be opened without following a link: {exc.strerror}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (owner is not None and st.st_uid != owner):
            return f"{src.name} is not a regular file the agent wrote"
        if st.st_size > limit:
            return f"{src.name} is {st.st_size} bytes, over the limit of {limit}"
        _copy_fd(fd, dst)
    finally:
        os.close(fd)
    return None


def copy_tree(src: Path, dst: Path, *, below: Path, limit: int) -> list[str]:
    """Copy the regular files and directories of `src` into `dst` (created; judge-private), never through a
    link at any depth, bounded in total; what was left out, and why."""
    skipped: list[str] = []
    total = 0
    dst.mkdir(parents=True, exist_ok=True)
    try:
        ctx = opened_dir(src, below=below)
        root = ctx.__enter__()
    except OSError:
        return skipped  # missing, or itself a link: nothing is copied

    def walk(dfd: int, rel: PurePath, out: Path) -> None:
        nonlocal total
        entries = sorted(os.scandir(dfd), key=lambda e: e.name)
        for entry in entries:
            name, shown = entry.name, rel / entry.name
            if entry.is_symlink():
                skipped.append(f"{shown} (a link)")
                continue
            if entry.is_dir(follow_symlinks=False):
                try:
                    sub = os.open(name, _DIR, dir_fd=dfd)
                except OSError:
                    skipped.append(f"{shown} (a link or unreadable)")
                    continue
                try:
                    (out / name).mkdir(exist_ok=True)
                    walk(sub, shown, out / name)
                finally:
                    os.close(sub)
                continue
            try:
                fd = os.open(name, _FILE, dir_fd=dfd)
            except OSError:
                skipped.append(f"{shown} (a link or unreadable)")
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    skipped.append(f"{shown} (not a regular file)")
                    continue
                if total + st.st_size > limit:
                    skipped.append(f"{shown} (over the {limit}-byte bound)")
                    continue
                total += st.st_size
                _copy_fd(fd, out / name)
            finally:
                os.close(fd)
    try:
        walk(root, PurePath(), dst)
    finally:
        ctx.__exit__(None, None, None)
    return skipped


def chown_tree(path: Path, uid: int, gid: int, *, below: Path) -> None:
    """`chown -R` of `path` through descriptors: links are changed themselves (never what they point to),
    directories entered only without following a link."""
    def walk(dfd: int) -> None:
        for entry in list(os.scandir(dfd)):
            if entry.is_dir(follow_symlinks=False):
                try:
                    sub = os.open(entry.name, _DIR, dir_fd=dfd)
                except OSError:
                    os.chown(entry.name, uid, gid, dir_fd=dfd, follow_symlinks=False)
                    continue
                try:
                    os.fchown(sub, uid, gid)
                    walk(sub)
                finally:
                    os.close(sub)
            else:
                os.chown(entry.name, uid, gid, dir_fd=dfd, follow_symlinks=False)

    with _parent(path, below) as (pfd, name):
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.chown(name, uid, gid, dir_fd=pfd, follow_symlinks=False)
            return
        fd = os.open(name, _DIR, dir_fd=pfd)
        try:
            os.fchown(fd, uid, gid)
            walk(fd)
        finally:
            os.close(fd)


def remove_at(dir_fd: int, name: str) -> None:
    """Delete `name` in the folder `dir_fd` (a tree, a file or a link: the link itself); nothing through a link.
    `shutil.rmtree` with a `dir_fd` is descriptor-based (it re-checks each directory it enters). Folders the
    agent made unwritable or unreadable (`chmod 555`, a Go module cache) are made the owner's again first, and an
    entry another remover took meanwhile (a detached `rm` of the same area) is simply gone."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    try:
        shutil.rmtree(name, dir_fd=dir_fd, onerror=_gone_is_fine)
    except PermissionError:
        owner_writable(dir_fd, name)
        shutil.rmtree(name, dir_fd=dir_fd, onerror=_gone_is_fine)


def _gone_is_fine(func: object, path: str, exc_info: tuple[type, BaseException, object]) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def owner_writable(dir_fd: int, name: str) -> None:
    """Every folder of the tree `name` (in the folder `dir_fd`) that this user owns made readable, writable and
    searchable by it, so the tree can be removed; no link is followed (each folder is opened `O_PATH |
    O_NOFOLLOW` and changed through that descriptor, which even a mode-000 folder allows). Depth first without
    recursion: as many descriptors open as the tree is deep, as `shutil.rmtree` holds."""
    me = os.geteuid()

    def enter(parent: int, entry: str) -> tuple[int, list[str]] | None:
        try:
            pfd = os.open(entry, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
        except OSError:  # gone, a link, not a folder: nothing to open
            return None
        try:
            st = os.fstat(pfd)
            if st.st_uid == me and stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
                os.chmod(f"/proc/self/fd/{pfd}", stat.S_IMODE(st.st_mode) | 0o700)
            fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=pfd)
        except OSError:  # another user's folder: left as it is
            return None
        finally:
            os.close(pfd)
        with os.scandir(fd) as entries:
            return fd, [e.name for e in entries if e.is_dir(follow_symlinks=False)]

    stack = [top] if (top := enter(dir_fd, name)) else []
    try:
        while stack:
            fd, subdirs = stack[-1]
            if not subdirs:
                os.close(fd)
                stack.pop()
            elif (below := enter(fd, subdirs.pop())) is not None:
                stack.append(below)
    finally:
        for fd, _ in stack:
            os.close(fd)


def remove(path: Path, *, below: Path) -> None:
    """Delete `path` (a tree, a file or a link: the link itself) below `below`; nothing through a link."""
    try:
        with _parent(path, below) as (pfd, name):
            remove_at(pfd, name)
    except FileNotFoundError:
        return
