"""The gates' checkout kept from one session of a plan to the next, and proven before it is reused.

The gates run the agent's code as the agent's identity in a tree that identity owns, so it can change
anything in it. A kept tree is reused only once the judge has brought it back to exactly what a fresh
checkout of the recorded commit holds, by a mechanism rather than a list of attacks:

* right after the judge writes (and hands over) a checkout, it records in its own scratch every entry's
  `lstat` (type and mode, owner, size, inode, mtime and ctime in ns, link count; for a folder its type,
  mode, owner, inode and extended attribute names), then waits until the file system's clock has moved
  past the newest ctime it recorded;
* the kernel sets an inode's ctime to the current time on every change (a write, truncate, chmod, chown,
  rename, new or removed hard link, extended attribute) and an unprivileged process cannot set it, so an
  entry the agent's code changed, replaced (a new inode), made a link or a FIFO, or hard-linked elsewhere
  no longer matches its record, whatever it did with `utime`;
* before the next checkout, once every process of the identity is dead and nothing that can reach the tree
  runs before it is used (agent_clone._Proof: in a thread, off the critical path), and only when the same
  identity owns the tree (the uid that wrote it may serve another session meanwhile), a walk through descriptors (never
  through a link, runner.adapters.sandbox.fsafe) moves into the area's trash, unread and unfollowed,
  every entry that is not in the record or differs from it; a folder is entered only when its record
  matches, and its entries are all checked in turn. What is left is a subset of the recorded checkout,
  owned by the identity, with no link, FIFO or file the judge did not write;
* then only what differs from the new commit (`git diff-tree`, plus the recorded entries that were moved
  or went missing) is moved aside and written again by the judge's git, the record updated.

Anything unexpected (no record, another owner, a walk error, too many differences, a changed
`.gitattributes`, which would change how unchanged files check out) falls back to a fresh checkout.
Nothing is deleted on the critical path: entries go to the area's trash (agent_clone.discard_trash).
Standard library only.
"""

from __future__ import annotations

import array
import bisect
import gc
import itertools
import marshal
import os
import secrets
import stat
import struct
import time
from collections.abc import Container, Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.adapters.sandbox import fsafe

RECORD = "gates.record"
_VERSION = 3  # 3: in frames (_put); 2: one marshal object; 1: a file's key as eight integers (older: no record)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SETTLE_LIMIT_S = 3.0  # a file system whose clock ticks in seconds (FAT's two) still settles


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Mismatch(Exception):
    """The kept tree cannot be brought back cheaply or safely: the caller makes a fresh checkout."""


# A file's key: mode, uid, gid, size, inode, mtime and ctime in ns, link count, packed (one bytes object of 64
# bytes instead of a tuple of eight integers: a record of 50,000 files takes 8 MB less, and compares as fast).
_FILE = struct.Struct("<8q")
_INO, _CTIME = 4, 6
Key = bytes | tuple  # a file's (packed) or a folder's (dir_key) record


def file_key(st: os.stat_result) -> bytes:
    return _FILE.pack(st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns,
                      st.st_nlink)


def _xattrs(fd: int) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listxattr(fd)))
    except OSError:  # a file system without extended attributes
        return ()


def dir_key(st: os.stat_result, fd: int) -> tuple:
    """A folder's record: its entries are checked one by one, so its own times (they move with every entry
    added or removed) are not compared; what it is, who owns it and its attributes (an ACL) are."""
    return (st.st_mode, st.st_uid, st.st_gid, st.st_ino, _xattrs(fd))


# --- the record ---------------------------------------------------------------------------------------------


def load(path: Path) -> dict | None:
    """The record at `path` (the judge's scratch), taken away: a checkout cut short leaves none, so the next
    one is fresh. None when missing or unreadable."""
    data = _take(path)
    if not (isinstance(data, dict) and data.get("v") == _VERSION and isinstance(data.get("entries"), dict)
            and isinstance(data.get("sha"), str) and isinstance(data.get("uid"), int)):
        return None
    return data


def _take(path: Path) -> object:
    """What `_put` wrote at `path` (plan-runner's own 0600 file, never through a link), taken away; None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None
        with os.fdopen(os.dup(fd), "rb") as fh, _no_gc():  # 50,000 objects made at once: no collection midway
            data = _read_frames(fh, st.st_size)
    except (OSError, EOFError, ValueError, TypeError, struct.error):
        return None
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
    return data


# The record on disk: frames of marshal data, each after its length; the first holds everything but the entries,
# the others the entries a chunk at a time. `marshal.loads` of a frame's bytes is 5x faster than `marshal.load` of
# a file (which reads object by object, 0.05 s for 50,000 entries, holding the interpreter's lock all along: the
# main thread waits on the proof's load), and only one chunk's bytes are ever in memory beside the record.
_FRAME = struct.Struct("<Q")
_CHUNK = 4096  # entries per frame (about 400 KB)


def _read_frames(fh, length: int) -> object:
    def frame() -> bytes | None:
        head = fh.read(_FRAME.size)
        if not head:
            return None
        (size,) = _FRAME.unpack(head)
        if size > length - fh.tell():  # (an older record's bytes read as a length): never a read past the end
            raise ValueError("not a record")
        body = fh.read(size)
        if len(body) != size:
            raise EOFError("a record cut short")
        return body

    first = frame()
    if first is None:
        raise EOFError("an empty record")
    data = marshal.loads(first)
    if not isinstance(data, dict) or "entries" in data:
        raise ValueError("not a record")
    entries: dict = {}
    while (body := frame()) is not None:
        chunk = marshal.loads(body)
        if not isinstance(chunk, dict):
            raise ValueError("not a record's entries")
        entries.update(chunk)
    data["entries"] = entries
    return data


def _put(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    items = iter(data["entries"].items())
    frames = itertools.chain([{k: v for k, v in data.items() if k != "entries"}],
                             iter(lambda: dict(itertools.islice(items, _CHUNK)), {}))
    with os.fdopen(fd, "wb") as fh:
        for obj in frames:
            body = marshal.dumps(obj)
            fh.write(_FRAME.pack(len(body)) + body)
    os.replace(tmp, path)


def save(path: Path, *, sha: str, uid: int, entries: dict[str, Key]) -> None:
    _put(path, {"v": _VERSION, "sha": sha, "uid": uid, "entries": entries})


def load_setup(path: Path) -> dict | None:
    """A set-up record (save_setup), taken away; None when missing or unreadable."""
    data = _take(path)
    if not (isinstance(data, dict) and data.get("v") == _VERSION and data.get("kind") == "setup"
            and isinstance(data.get("entries"), dict) and isinstance(data.get("uid"), int)
            and isinstance(data.get("archive"), tuple) and isinstance(data.get("roots"), tuple)):
        return None
    return data


def save_setup(path: Path, *, archive: tuple, uid: int, roots: tuple[str, ...], entries: dict[str, Key]) -> None:
    """What a set-up cache restore wrote (`entries`, record_under's) from which archive (its file's identity)."""
    _put(path, {"v": _VERSION, "kind": "setup", "archive": archive, "uid": uid, "roots": roots, "entries": entries})


def record_under(root_fd: int, rels: tuple[str, ...]) -> dict[str, Key]:
    """The entries at and below each path of `rels` (reached from `root_fd` through folders, never a link), as
    `record` keeps them, without handing anything over; a path that is not there has no entry."""
    out: dict[str, Key] = {}
    for rel in rels:
        *parents, name = rel.split("/")
        try:
            fd = fsafe.open_below(root_fd, parents)
        except OSError:
            continue
        try:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                out[rel] = file_key(st)
                continue
            sub = os.open(name, _DIR, dir_fd=fd)
            try:
                for key, value in record(sub, None).items():
                    out[f"{rel}/{key}" if key else rel] = value
            finally:
                os.close(sub)
        finally:
            os.close(fd)
    return out


def settle(area_fd: int, newest_ctime_ns: int) -> None:
    """Wait until the file system's clock (as it stamps ctimes: a coarse clock, in ticks of a few ms) is past
    `newest_ctime_ns`: a change made later, by anyone, then gets a ctime the record does not hold. Measured on
    a probe file in `area_fd` (plan-runner's folder, the tree's file system)."""
    fd = os.open(".clock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=area_fd)
    try:
        deadline = time.monotonic() + _SETTLE_LIMIT_S
        while True:
            os.utime(fd)
            if os.fstat(fd).st_ctime_ns > newest_ctime_ns:
                return
            if time.monotonic() > deadline:
                raise Mismatch("the file system's clock does not move")
            time.sleep(0.001)
    finally:
        os.close(fd)


def record(root_fd: int, owner: tuple[int, int] | None) -> dict[str, Key]:
    """Every entry below `root_fd` (a fresh checkout the judge just wrote), handed to `owner` (uid, gid) on the
    way when given (links changed themselves, never followed), and recorded as it is after that: relative
    paths, "" for the root."""
    entries: dict[str, Key] = {}

    def walk(fd: int, prefix: str) -> None:
        with os.scandir(fd) as it:
            items = list(it)
        for e in items:
            rel = prefix + e.name
            if e.is_dir(follow_symlinks=False):
                sub = os.open(e.name, _DIR, dir_fd=fd)
                try:
                    if owner is not None:
                        os.fchown(sub, *owner)
                    entries[rel] = dir_key(os.fstat(sub), sub)
                    walk(sub, rel + "/")
                finally:
                    os.close(sub)
            else:
                if owner is not None:
                    os.chown(e.name, *owner, dir_fd=fd, follow_symlinks=False)
                entries[rel] = file_key(os.stat(e.name, dir_fd=fd, follow_symlinks=False))

    if owner is not None:
        os.fchown(root_fd, *owner)
    entries[""] = dir_key(os.fstat(root_fd), root_fd)
    with _no_gc():
        walk(root_fd, "")
    return entries


class Inodes:
    """A set of inode numbers held as one sorted array of 8-byte integers (50,000 of them take 0.4 MB, not the
    4 MB of a set of ints): membership by bisection."""

    def __init__(self, numbers) -> None:
        self._a = array.array("q", sorted(numbers))

    def __contains__(self, ino: object) -> bool:
        i = bisect.bisect_left(self._a, ino)
        return i < len(self._a) and self._a[i] == ino

    def __len__(self) -> int:
        return len(self._a)


def inodes(entries: dict[str, Key]) -> Inodes:
    """The inode numbers a record names (a folder's key holds it at 3)."""
    unpack = _FILE.unpack
    return Inodes(unpack(k)[_INO] if isinstance(k, bytes) else k[3] for k in entries.values())


def newest_ctime(entries: dict[str, Key]) -> int:
    unpack = _FILE.unpack
    return max((unpack(k)[_CTIME] for k in entries.values() if isinstance(k, bytes)), default=0)


# --- bringing a kept tree back -------------------------------------------------------------------------------


def _aside(dfd: int, name: str, trash_fd: int) -> None:
    """`name` in `dfd` renamed into the trash (plan-runner's own folder on the same file system): O(1), nothing
    read, nothing followed. Refused (another file system, no right to rename) means no reuse."""
    try:
        os.rename(name, f"kept-{secrets.token_hex(8)}", src_dir_fd=dfd, dst_dir_fd=trash_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Mismatch(f"{name}: could not be moved aside ({exc.strerror})") from None


def prune(root_fd: int, entries: dict[str, Key], trash_fd: int, limit: int) -> set[str]:
    """Move aside every entry below `root_fd` that is not in `entries` or differs from its record; the recorded
    paths no longer there (moved, or gone), which are dropped from `entries`. Raises Mismatch when the root
    itself differs or more than `limit` entries do."""
    want = entries.get("")
    if want is None or dir_key(os.fstat(root_fd), root_fd) != want:
        raise Mismatch("the tree's folder itself changed")
    seen = {""}
    moved = 0

    def walk(fd: int, prefix: str) -> None:
        nonlocal moved
        with os.scandir(fd) as it:
            items = list(it)
        for e in items:
            rel = prefix + e.name
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            known = entries.get(rel)
            if known is not None and stat.S_ISDIR(st.st_mode) and isinstance(known, tuple) \
                    and known[:4] == (st.st_mode, st.st_uid, st.st_gid, st.st_ino):
                try:
                    sub = os.open(e.name, _DIR, dir_fd=fd)
                except OSError:
                    sub = None
                if sub is not None:
                    try:
                        if dir_key(os.fstat(sub), sub) == known:
                            seen.add(rel)
                            walk(sub, rel + "/")
                            continue
                    finally:
                        os.close(sub)
            elif known is not None and isinstance(known, bytes) and known == file_key(st):
                seen.add(rel)
                continue
            moved += 1
            if moved > limit:
                raise Mismatch(f"more than {limit} entries differ from the record")
            _aside(fd, e.name, trash_fd)

    with _no_gc():
        walk(root_fd, "")
    gone = entries.keys() - seen
    if len(gone) > limit:
        raise Mismatch(f"{len(gone)} recorded entries are gone")
    for rel in gone:
        del entries[rel]
    return gone


def held_open(dev: int, inodes: Container[int]) -> int | None:
    """A process (other than this one) that holds an entry of the tree open: a descriptor, its working or root
    folder, or a mapping of one of `inodes` (on `dev`; a mapping by inode alone). Such a process (one the agent
    passed a descriptor to, of another user: the agent's own are all dead) could write the file after it was
    checked, so the tree is not reused while one exists. Its pid, or None."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        base = f"/proc/{pid}"
        try:
            links = [f"{base}/fd/{n}" for n in os.listdir(f"{base}/fd")] + [f"{base}/cwd", f"{base}/root"]
        except OSError:
            continue  # gone, or a kernel thread
        for link in links:
            try:
                st = os.stat(link)
            except OSError:
                continue
            if st.st_ino in inodes and st.st_dev == dev:
                return int(pid)
        try:
            with open(f"{base}/maps", "rb") as fh:
                for line in fh:
                    fields = line.split(None, 5)
                    if len(fields) > 4 and fields[4] != b"0" and int(fields[4]) in inodes:
                        return int(pid)
        except (OSError, ValueError):
            continue
    return None


def move_aside(root_fd: int, rel: str, trash_fd: int) -> None:
    """The entry at `rel` (reached through recorded folders, never a link) into the trash, if it is there."""
    *parents, name = rel.split("/")
    try:
        fd = fsafe.open_below(root_fd, parents)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Mismatch(f"{rel}: {exc.strerror}") from None
    try:
        _aside(fd, name, trash_fd)
    finally:
        os.close(fd)


def drop(entries: dict[str, Key], rels: set[str]) -> None:
    """`rels` and everything below them out of the record."""
    folders = tuple(r + "/" for r in rels if isinstance(entries.get(r), tuple))
    for rel in rels:
        entries.pop(rel, None)
    if folders:
        for key in [k for k in entries if k.startswith(folders)]:
            del entries[key]


def adopt(root_fd: int, rels: list[str], entries: dict[str, Key], owner: tuple[int, int] | None) -> None:
    """The entries the judge's git just wrote at `rels` (and the folders it made for them) handed to `owner`
    and added to the record."""
    for rel in sorted(rels):
        parts = rel.split("/")
        fd = os.dup(root_fd)
        try:
            for i, part in enumerate(parts[:-1]):
                sub = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = sub
                here = "/".join(parts[:i + 1])
                if here not in entries:
                    if owner is not None:
                        os.fchown(fd, *owner)
                    entries[here] = dir_key(os.fstat(fd), fd)
            name = parts[-1]
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):  # a submodule's empty folder
                sub = os.open(name, _DIR, dir_fd=fd)
                try:
                    if owner is not None:
                        os.fchown(sub, *owner)
                    entries[rel] = dir_key(os.fstat(sub), sub)
                finally:
                    os.close(sub)
            else:
                if owner is not None:
                    os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
                entries[rel] = file_key(os.stat(name, dir_fd=fd, follow_symlinks=False))
        finally:
            os.close(fd)
