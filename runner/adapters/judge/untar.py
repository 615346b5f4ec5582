"""The set-up cache's archive format: written and read member by member, with checks of our own.

Only the standard library, and no `TarFile.extractall(filter=...)`: that argument exists from Python
3.11.4 (and 3.12), and the package allows 3.11.0. The checks do not depend on the Python either:

* a member's name is relative, has no `..` part, and lies under one of the cache's declared paths;
* only directories, regular files and symbolic links are written (no hard links, devices or fifos);
  a link may point anywhere (a virtualenv links to its interpreter by absolute path), but nothing is
  ever written *through* a link: every member is reached from a descriptor of the destination, one
  `openat(O_NOFOLLOW | O_DIRECTORY)` per folder, so a link on the way (there before, or swapped in by a
  racing process of the tree's owner) is refused, and a link at a member's own path is removed, never
  followed (plan-runner handles these trees as root);
* reading a tree to archive it walks the same way: links are stored as links, at any depth, never followed;
* files get no setuid/setgid/sticky bits and no group/other write; everything is owned by the extracting
  user (the caller then hands the tree to the agent's identity).

Writing stores the same three kinds only, links as links (never followed), so an archive plan-runner
wrote passes its own checks.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Iterable
from pathlib import Path

from runner.adapters.sandbox import fsafe


# A member the checks refuse (the archive is not trusted), or a link on the way: the walk's own type (fsafe).
Refused = fsafe.Unsafe


def clean_roots(roots: Iterable[str]) -> tuple[str, ...]:
    """The cache paths as relative, normalised names; a path that is absolute or climbs out is dropped."""
    out = []
    for root in roots:
        name = posixpath.normpath(root.strip().rstrip("/"))
        if name and name != "." and not posixpath.isabs(name) and ".." not in name.split("/"):
            out.append(name)
    return tuple(out)


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(r + "/") for r in roots)


def _check_name(raw: str, roots: tuple[str, ...]) -> str:
    name = posixpath.normpath(raw)
    if not raw or posixpath.isabs(raw) or ".." in raw.split("/") or name in (".", ""):
        raise Refused(f"member {raw!r}: an absolute name or one with '..'")
    if not _under(name, roots):
        raise Refused(f"member {raw!r} is not under a cache path ({', '.join(roots)})")
    return name


_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def write(archive: Path, source: Path, roots: Iterable[str], limit: int = 8 * 2**30, *,
          source_fd: int | None = None) -> None:
    """Archive the cache paths under `source` (those that exist). Nothing of the tree's writer may run, and
    nothing it does meanwhile redirects the walk: every entry is reached from `source_fd` (a descriptor of
    `source` the caller opened without following links; else `source` is opened here) by `dir_fd` calls, a
    link is stored as a link and never followed, at any depth."""
    roots = clean_roots(roots)
    total = 0
    top_fd = source_fd if source_fd is not None else os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def add(tar: tarfile.TarFile, dir_fd: int, name: str, arc: str) -> None:
        nonlocal total
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        info = tarfile.TarInfo(arc)
        info.mtime = int(st.st_mtime)
        info.mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            try:
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
            except OSError:
                raise Refused(f"{arc!r} changed while it was archived") from None
            tar.addfile(info)
        elif stat.S_ISDIR(st.st_mode):
            sub = fsafe.open_dir_at(name, dir_fd)
            try:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                for child in sorted(os.listdir(sub)):
                    add(tar, sub, child, f"{arc}/{child}")
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(name, _FILE, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as fh:
                now = os.fstat(fh.fileno())
                if not stat.S_ISREG(now.st_mode):
                    raise Refused(f"{arc!r} changed while it was archived")
                info.size = now.st_size
                total += info.size
                if total > limit:
                    raise Refused(f"the cache is over {limit} bytes")
                tar.addfile(info, fh)
        # sockets, fifos and devices are never cached

    try:
        with tarfile.open(archive, "w") as tar:
            for root in roots:
                *parents, base = root.split("/")
                try:
                    parent = fsafe.open_below(top_fd, parents)
                except FileNotFoundError:
                    continue
                try:
                    add(tar, parent, base, root)
                finally:
                    os.close(parent)
    except RecursionError:
        raise Refused("the cache tree is nested too deeply") from None
    finally:
        if source_fd is None:
            os.close(top_fd)


def extract(archive: Path, dest: Path, roots: Iterable[str], *, dest_fd: int | None = None) -> int:
    """Extract `archive` into `dest` with the checks above; the number of members written.
    Everything is written relative to `dest_fd` (a descriptor of `dest` the caller opened without following
    links; else `dest` is opened here), one `dir_fd` call per component: a link anywhere in the tree, there
    before or swapped in meanwhile, is refused or replaced, never followed.
    Raises Refused (or OSError / tarfile.TarError) at the first member that fails them; what was written
    before it stays, for the caller to throw away."""
    roots = clean_roots(roots)
    top_fd = dest_fd if dest_fd is not None else os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    dirs: list[tuple[list[str], int]] = []
    count = 0
    cached: list = []  # [(parts, fd)]: the last member's folder (members come folder by folder)

    def folder(parts: list[str]) -> int:
        if cached and cached[0][0] == tuple(parts):
            return cached[0][1]
        while cached:
            os.close(cached.pop()[1])
        fd = fsafe.open_below(top_fd, parts, create=True)
        cached.append((tuple(parts), fd))
        return fd

    try:
        for root in roots:  # what the checkout has at a cache path is replaced, never written into
            *parents, base = root.split("/")
            parent = fsafe.open_below(top_fd, parents, create=True)
            try:
                fsafe.remove_at(parent, base)
            finally:
                os.close(parent)
        with tarfile.open(archive, "r:") as tar:
            for member in tar:
                name = _check_name(member.name, roots)
                if not (member.isdir() or member.isreg() or member.issym()):
                    raise Refused(f"member {name!r} is a link, device or fifo ({member.type!r})")
                *parents, base = name.split("/")
                parent = folder(parents)
                try:
                    st = os.stat(base, dir_fd=parent, follow_symlinks=False)
                    if not (member.isdir() and stat.S_ISDIR(st.st_mode)):
                        fsafe.remove_at(parent, base)  # a link (or a file) where this member goes is replaced
                except FileNotFoundError:
                    pass
                mode = member.mode & 0o1777 & ~0o1022  # no setuid/setgid/sticky, no group/other write
                if member.isdir():
                    try:
                        os.mkdir(base, 0o700, dir_fd=parent)
                    except FileExistsError:
                        pass
                    sub = fsafe.open_dir_at(base, parent)
                    try:
                        os.chmod(sub, mode | 0o700)
                    finally:
                        os.close(sub)
                    dirs.append(([*parents, base], int(member.mtime)))
                elif member.issym():
                    os.symlink(member.linkname, base, dir_fd=parent)
                else:
                    source = tar.extractfile(member)
                    assert source is not None
                    fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=parent)
                    with os.fdopen(fd, "wb") as out:
                        shutil.copyfileobj(source, out, 1 << 20)
                        out.flush()
                        os.chmod(out.fileno(), mode)
                        os.utime(out.fileno(), (member.mtime, member.mtime))
                count += 1
        while cached:
            os.close(cached.pop()[1])
        for parts, mtime in reversed(dirs):  # deepest first, after their contents: reached again by descriptor
            fd = fsafe.open_below(top_fd, parts)
            try:
                os.utime(fd, (mtime, mtime))
            finally:
                os.close(fd)
    finally:
        while cached:
            os.close(cached.pop()[1])
        if dest_fd is None:
            os.close(top_fd)
    return count
