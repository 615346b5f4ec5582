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
  identity owns the tree (the uid that wrote it may serve another session meanwhile), the tree is listed
  whole (`listing`: GNU find, never through a link nor into another file system) and every entry that is
  not in the record or differs from it is moved into the area's trash, unread and unfollowed, through
  descriptors (never through a link, runner.adapters.sandbox.fsafe); a folder stays only when it is the
  recorded folder with the recorded attributes, and nothing below a folder moved aside stays. What is left
  is a subset of the recorded checkout, owned by the identity, with no link, FIFO or file the judge did not
  write;
* then only what differs from the new commit (`git diff-tree`, plus the recorded entries that were moved
  or went missing) is moved aside and written again by the judge's git, the record updated.

Anything unexpected (no record, another owner, a walk error, too many differences, a changed
`.gitattributes`, which would change how unchanged files check out) falls back to a fresh checkout.
Nothing is deleted on the critical path: entries go to the area's trash (agent_clone.discard_trash).
Standard library only, and GNU find where there is one (`listing`).
"""

from __future__ import annotations

import array
import bisect
import gc
import itertools
import marshal
import os
import secrets
import selectors
import shutil
import stat
import struct
import subprocess
import time
from collections.abc import Callable, Container, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from runner.adapters.sandbox import fsafe, tools

RECORD = "gates.record"
_VERSION = 4  # 4: an entry's line as find prints it; 3: packed keys in frames (_put); 2: one marshal object; older
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


# An entry's record is the line GNU find prints for it with this format: type, permission bits, owner, size,
# inode, device, mtime and ctime in ns, link count and path, separated by spaces (the path last: it may hold
# spaces), each line ended by a NUL. A folder's record is that line and its extended attributes' names. `line`
# makes the same bytes from an `lstat` (test_kept_tree compares the two on every kind of entry), so a tree is
# listed in C by `find` (about 0.05 s for 50,000 files, against 0.2 s of `fstatat` calls and objects in
# Python, holding the interpreter's lock) and an entry the judge writes itself is recorded in Python.
_PRINTF = "%y %m %U %G %s %i %D %T@ %C@ %n %p\\0"
_TYPES = {stat.S_IFREG: "f", stat.S_IFDIR: "d", stat.S_IFLNK: "l", stat.S_IFIFO: "p", stat.S_IFSOCK: "s",
          stat.S_IFCHR: "c", stat.S_IFBLK: "b"}
_FIELDS = 10  # spaces before the path
_CTIME = 8
_IDENT = (0, 1, 2, 3, 5, 6)  # what a folder is, whatever was added to it or removed: type, mode, owner, inode, device
Key = bytes | tuple  # a file's record (its line) or a folder's (its line, its attributes' names)


def _time(ns: int) -> str:
    sec, frac = divmod(ns, 10**9)
    return f"{sec}.{frac:09d}0"  # as find prints a timespec: seconds, nine digits of ns and a 0


def line(st: os.stat_result, rel: str) -> bytes:
    """The line `find . -printf _PRINTF` prints for the entry at `rel` ("" for the root) that `st` describes."""
    return (f"{_TYPES.get(stat.S_IFMT(st.st_mode), 'U')} {st.st_mode & 0o7777:o} {st.st_uid} {st.st_gid} "
            f"{st.st_size} {st.st_ino} {st.st_dev} {_time(st.st_mtime_ns)} {_time(st.st_ctime_ns)} "
            f"{st.st_nlink} ").encode() + (b"./" + os.fsencode(rel) if rel else b".")


def _fields(ln: bytes) -> list[bytes]:
    return ln.split(b" ", _FIELDS)


def _rel(ln: bytes) -> str:
    path = _fields(ln)[_FIELDS]
    return "" if path == b"." else os.fsdecode(path[2:])


def _ns(field: bytes) -> int:
    sec, _, frac = field.partition(b".")
    return int(sec) * 10**9 + int(frac[:9] or b"0")


def _line_of(key: Key) -> bytes:
    return key if isinstance(key, bytes) else key[0]


def _ident(ln: bytes) -> tuple[bytes, ...]:
    f = _fields(ln)
    return tuple(f[i] for i in _IDENT)


def _xattrs(fd: int) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listxattr(fd)))
    except OSError:  # a file system without extended attributes
        return ()


def file_key(st: os.stat_result, rel: str) -> bytes:
    return line(st, rel)


def dir_key(st: os.stat_result, fd: int, rel: str) -> tuple:
    """A folder's record: its entries are checked one by one, so its own times and size (they move with every
    entry added or removed) are compared only through its identity and attributes (an ACL): same()."""
    return (line(st, rel), _xattrs(fd))


def same(a: dict[str, Key], b: dict[str, Key]) -> bool:
    """Two records of the same entries: files as recorded, folders the same folders with the same attributes."""
    if a.keys() != b.keys():
        return False
    for rel, key in a.items():
        other = b[rel]
        if isinstance(key, bytes) or isinstance(other, bytes):
            if key != other:
                return False
        elif key[1] != other[1] or _ident(key[0]) != _ident(other[0]):
            return False
    return True


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

    def folder(fd: int, name: str, rel: str) -> None:
        sub = os.open(name, _DIR, dir_fd=fd)
        try:
            out[rel] = dir_key(os.fstat(sub), sub, rel)
            with os.scandir(sub) as it:
                items = list(it)
            for e in items:
                if e.is_dir(follow_symlinks=False):
                    folder(sub, e.name, f"{rel}/{e.name}")
                else:
                    out[f"{rel}/{e.name}"] = file_key(os.stat(e.name, dir_fd=sub, follow_symlinks=False),
                                                      f"{rel}/{e.name}")
        finally:
            os.close(sub)

    for fd, parents, name, st in _roots(root_fd, rels):
        rel = "/".join([*parents, name])
        if stat.S_ISDIR(st.st_mode):
            folder(fd, name, rel)
        else:
            out[rel] = file_key(st, rel)
    return out


def _roots(root_fd: int, rels: tuple[str, ...]) -> Iterator[tuple[int, list[str], str, os.stat_result]]:
    """For each path of `rels` that is there: its parent folder (a descriptor reached from `root_fd` through
    folders, never a link; closed once the next is asked for), the parent's path parts, its name, its lstat."""
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
            yield fd, parents, name, st
        finally:
            os.close(fd)


def listed_under(root_fd: int, rels: tuple[str, ...], bound: int) -> dict[str, bytes] | None:
    """record_under's entries as GNU find lists them (C, no interpreter lock held an entry): each entry's line
    alone, a folder's attributes not read (same_listed reads them only where they could differ). Each path's
    parent is reached from `root_fd` through folders, never a link, and find starts at its name there (listing
    nothing through a link nor into another file system). Raises Mismatch past `bound` entries (a cache the agent
    filled is not listed to its end); None where there is no find or it failed (the caller walks in Python)."""
    find = _find_program()
    if find is None:
        return None
    out: dict[str, bytes] = {}
    for fd, parents, name, _st in _roots(root_fd, rels):
        prefix = os.fsencode("/".join(parents) + "/") if parents else b""

        def take(lines: list[bytes], prefix: bytes = prefix) -> None:
            for ln in lines:
                fields = ln.split(b" ", _FIELDS)
                path = prefix + fields[_FIELDS][2:]  # find's "./name/..." as the path from root_fd
                out[os.fsdecode(path)] = b" ".join(fields[:_FIELDS]) + b" ./" + path
            if len(out) > bound:
                raise Mismatch(f"more than {bound} entries")
        if not _find_listing(find, fd, None, None, take, start=f"./{name}"):
            return None
    return out


def same_listed(now: dict[str, bytes], recorded: dict[str, Key], root_fd: int) -> bool:
    """`same(record_under(...), recorded)` for a listing by `listed_under`: a file as recorded; a folder whose line
    is the recorded one has its recorded attributes too (setting one moves the ctime, which the line holds), and
    one whose line moved (an entry was added or removed) is the same folder when its identity and its attributes,
    read now, are the recorded ones."""
    if now.keys() != recorded.keys():
        return False
    for rel, ln in now.items():
        key = recorded[rel]
        if isinstance(key, bytes):
            if ln != key:
                return False
        elif ln != key[0]:
            if ln[:1] != b"d" or _ident(ln) != _ident(key[0]):
                return False
            try:
                if _xattrs_at(root_fd, rel) != key[1]:
                    return False
            except OSError:
                return False
    return True


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
    way when given (links changed themselves, never followed), and recorded as it is after that, as `listing`
    gives it (the lister the proof uses): relative paths, "" for the root."""
    if owner is not None:
        def hand_over(fd: int) -> None:
            with os.scandir(fd) as it:
                items = list(it)
            for e in items:
                if e.is_dir(follow_symlinks=False):
                    sub = os.open(e.name, _DIR, dir_fd=fd)
                    try:
                        os.fchown(sub, *owner)
                        hand_over(sub)
                    finally:
                        os.close(sub)
                else:
                    os.chown(e.name, *owner, dir_fd=fd, follow_symlinks=False)

        os.fchown(root_fd, *owner)
        hand_over(root_fd)
    entries: dict[str, Key] = {}
    with _no_gc():
        for ln in listing(root_fd, None):
            rel = _rel(ln)
            if ln[:1] == b"d":
                entries[rel] = (ln, _xattrs_at(root_fd, rel))
            else:
                entries[rel] = ln
    return entries


def _xattrs_at(root_fd: int, rel: str) -> tuple[str, ...]:
    """The attribute names of the folder at `rel` below `root_fd`, reached without following a link."""
    if not rel:
        return _xattrs(root_fd)
    fd = fsafe.open_below(root_fd, rel.split("/"))
    try:
        return _xattrs(fd)
    finally:
        os.close(fd)


# --- listing a tree ------------------------------------------------------------------------------------------

_find: list[str | None] = []  # GNU find, resolved once on the trusted PATH (tools.harden_path) and checked


def _find_program() -> str | None:
    if not _find:
        found = shutil.which("find")
        _find.append(found if found and tools.replaceable(found) is None else None)
    return _find[0]


def listing(root_fd: int, bound: int | None, like: dict[str, Key] | None = None,
            take: Callable[[list[bytes]], None] | None = None) -> list[bytes]:
    """The line of every entry below `root_fd` (the root first), as `line` makes them, never through a link nor
    into another file system. Listed by GNU find (C: no interpreter lock held for each entry), by three side by
    side when `like` (the tree's record) is large and the machine has two cores (_split); where there is no find,
    or it fails, by the same walk in Python. Raises Mismatch past `bound` entries (a tree the agent filled is not
    listed to its end). With `take`, the lines go to it a batch at a time as they are read (none are kept: a
    listing of 50,000 entries is not held whole beside the record) and [] is returned; a find that fails after
    some batches is followed by the walk in Python, so `take` may see a line twice."""
    out: list[bytes] = []
    sink = take if take is not None else out.extend
    find = _find_program()
    if find is not None:
        if _find_listing(find, root_fd, bound, _split(like) if like is not None else None, sink):
            return out
        out.clear()
    lines = _python_listing(root_fd, bound)
    if take is None:
        return lines
    take(lines)
    return out


_SPLIT_FROM = 4096  # entries: a smaller tree is listed by one find (more processes cost more than they save)


def _split(entries: dict[str, Key]) -> tuple[int, tuple[str, ...], tuple[str, ...]] | None:
    """How three finds list the tree side by side: the first to a depth (its folders there included), each of
    the others below every other recorded folder at that depth, the shallowest that has at least eight (their
    order sorted). Only a guide to the work: whatever the tree holds now is listed, a folder at that depth the
    record does not hold by the first find alone (it is moved aside whole). None: one find."""
    if len(entries) < _SPLIT_FROM or (os.cpu_count() or 1) < 2:
        return None
    depths: dict[int, list[str]] = {}
    for rel, key in entries.items():
        if rel and key.__class__ is tuple:
            depths.setdefault(rel.count("/"), []).append(rel)
    for depth in sorted(depths)[:6]:
        if len(depths[depth]) >= 8:
            folders = sorted(depths[depth])
            return depth + 1, tuple(folders[0::2]), tuple(folders[1::2])
    return None


def _find_listing(find: str, root_fd: int, bound: int | None,
                  split: tuple[int, tuple[str, ...], tuple[str, ...]] | None, take: Callable[[list[bytes]], None],
                  start: str = ".") -> bool:
    """The listing by find (`listing`), its lines given to `take` as they come; False when find failed. `start`:
    one entry of `root_fd` (a name: find lists it, and below it when it is a folder) instead of the whole tree."""
    runs = [[find, start, "-xdev", "-printf", _PRINTF]]
    if split is not None:
        depth, first, second = split
        runs = [[find, ".", "-xdev", "-maxdepth", str(depth), "-printf", _PRINTF],
                *([find, *("./" + rel for rel in half), "-xdev", "-mindepth", "1", "-printf", _PRINTF]
                  for half in (first, second))]
    procs: list[subprocess.Popen] = []
    tails: dict[int, bytes] = {}
    count = 0
    rooted = False  # the first line of the first find is the root's
    read = False  # every find's output read to its end
    try:
        for argv in runs:
            procs.append(subprocess.Popen(argv, cwd=f"/proc/self/fd/{root_fd}", pass_fds=(root_fd,),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env={"LC_ALL": "C"}))
        with selectors.DefaultSelector() as sel:
            for n, proc in enumerate(procs):
                sel.register(proc.stdout, selectors.EVENT_READ, n)  # type: ignore[arg-type]
                tails[n] = b""
            while sel.get_map():
                for key, _ in sel.select():
                    chunk = os.read(key.fd, 1 << 20)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    lines = (tails[key.data] + chunk).split(b"\0")
                    tails[key.data] = lines.pop()  # the start of a line still coming
                    if not lines:
                        continue
                    if key.data == 0 and not rooted:
                        if not lines[0].endswith(b" " + os.fsencode(start)):
                            return False
                        rooted = True
                    count += len(lines)
                    if bound is not None and count > bound:
                        raise Mismatch(f"more than {bound} entries in the tree")
                    take(lines)
        read = True
    except OSError:
        return False
    finally:
        for proc in procs:
            if not read and proc.poll() is None:
                proc.kill()  # (a listing stopped short: past its bound, or not the tree's)
            proc.stdout.close()  # type: ignore[union-attr]
        codes = [proc.wait() for proc in procs]
    # (an unreadable folder, a folder gone, a find without -printf: find says so; the walk in Python instead)
    return len(procs) == len(runs) and not any(codes) and rooted and not any(tails.values())


def _python_listing(root_fd: int, bound: int | None) -> list[bytes]:
    root = os.fstat(root_fd)
    out = [line(root, "")]

    def walk(fd: int, prefix: str) -> None:
        with os.scandir(fd) as it:
            items = list(it)
        for e in items:
            rel = prefix + e.name
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            out.append(line(st, rel))
            if bound is not None and len(out) > bound:
                raise Mismatch(f"more than {bound} entries in the tree")
            if stat.S_ISDIR(st.st_mode) and st.st_dev == root.st_dev:
                sub = os.open(e.name, _DIR, dir_fd=fd)
                try:
                    here = os.fstat(sub)
                    if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino):
                        raise Mismatch(f"{rel}: replaced while it was listed")
                    walk(sub, rel + "/")
                finally:
                    os.close(sub)

    with _no_gc():
        walk(root_fd, "")
    return out


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


def inodes(entries: Mapping[str, Key]) -> Inodes:
    """The inode numbers a record names (a line's sixth field: the five before it hold no space)."""
    return Inodes([int(_line_of(k).split(b" ", 6)[5]) for k in entries.values()])


def newest_ctime(entries: dict[str, Key]) -> int:
    return max((_ns(_fields(_line_of(k))[_CTIME]) for k in entries.values()), default=0)


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
    itself differs or more than `limit` entries do.

    The tree is listed whole (`listing`, in C) and compared with the record as two sets of lines, so only the
    entries whose line differs are looked at in Python: a folder whose times moved (something was added to it
    or removed) stays when it is the same folder with the same attributes; anything else is moved aside, a
    folder with everything below it (nothing below a folder moved aside is kept, whatever its line)."""
    root = entries.get("")
    if not isinstance(root, tuple):
        raise Mismatch("the record has no root")
    with _no_gc():
        recorded = {_line_of(k) for k in entries.values()}
        missing = set(recorded)  # what the listing has not shown yet
        found: set[bytes] = set()  # what it showed that the record does not hold

        def take(lines: list[bytes]) -> None:
            batch = set(lines)
            found.update(batch - recorded)
            missing.difference_update(batch)

        listing(root_fd, len(entries) + limit, entries, take)
        extra = sorted(((_rel(ln), ln) for ln in found), key=lambda item: item[0].count("/"))
    kept_folders: set[str] = set()  # folders whose line differs but which are the recorded folder
    moved: set[str] = set()

    def below_moved(rel: str) -> bool:
        parts = rel.split("/")
        return any("/".join(parts[:i]) in moved for i in range(1, len(parts)))

    for rel, ln in extra:
        if rel and below_moved(rel):
            continue
        known = entries.get(rel)
        if isinstance(known, tuple) and ln[:1] == b"d" and _ident(ln) == _ident(known[0]):
            try:
                same_attrs = _xattrs_at(root_fd, rel) == known[1]
            except OSError:
                same_attrs = False
            if same_attrs:
                kept_folders.add(rel)
                continue
        if not rel:
            raise Mismatch("the tree's folder itself changed")
        moved.add(rel)
        if len(moved) > limit:
            raise Mismatch(f"more than {limit} entries differ from the record")
        move_aside(root_fd, rel, trash_fd)
    gone = {rel for rel in map(_rel, missing) if rel not in kept_folders}
    if "" in gone:
        raise Mismatch("the tree's folder itself changed")
    folders = tuple(rel + "/" for rel in moved if isinstance(entries.get(rel), tuple))
    if folders:  # recorded entries below a folder moved aside went with it
        gone.update(rel for rel in entries if rel.startswith(folders))
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
                    entries[here] = dir_key(os.fstat(fd), fd, here)
            name = parts[-1]
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):  # a submodule's empty folder
                sub = os.open(name, _DIR, dir_fd=fd)
                try:
                    if owner is not None:
                        os.fchown(sub, *owner)
                    entries[rel] = dir_key(os.fstat(sub), sub, rel)
                finally:
                    os.close(sub)
            else:
                if owner is not None:
                    os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
                entries[rel] = file_key(os.stat(name, dir_fd=fd, follow_symlinks=False), rel)
        finally:
            os.close(fd)
