"""The set-up cache's archive format: written and read member by member, with checks of our own.

Only the standard library, and no `TarFile.extractall(filter=...)`: that argument exists from Python
3.11.4 (and 3.12), and the package allows 3.11.0. The checks do not depend on the Python either:

* a member's name is relative, has no `..` part, and lies under one of the cache's declared paths;
* only directories, regular files and symbolic links are written (no hard links, devices or fifos);
  a link may point anywhere (a virtualenv links to its interpreter by absolute path), but nothing is
  ever written *through* a link: the folder each member goes into must resolve inside the destination,
  and a link already at a member's own path is removed, never followed;
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


class Refused(Exception):
    """A member the checks refuse; the archive is not trusted."""


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


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def write(archive: Path, source: Path, roots: Iterable[str], limit: int = 8 * 2**30) -> None:
    """Archive the cache paths under `source` (those that exist). Nothing of the tree's writer may run."""
    roots = clean_roots(roots)
    total = 0
    with tarfile.open(archive, "w") as tar:
        for root in roots:
            top = source / root
            if not os.path.lexists(top):
                continue
            walk = [(str(top), root)]
            while walk:
                path, arc = walk.pop()
                st = os.lstat(path)
                info = tarfile.TarInfo(arc)
                info.mtime = int(st.st_mtime)
                info.mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                    tar.addfile(info)
                elif stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    for name in sorted(os.listdir(path), reverse=True):
                        walk.append((os.path.join(path, name), f"{arc}/{name}"))
                elif stat.S_ISREG(st.st_mode):
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as fh:
                        info.size = os.fstat(fh.fileno()).st_size
                        total += info.size
                        if total > limit:
                            raise Refused(f"the cache is over {limit} bytes")
                        tar.addfile(info, fh)
                # sockets, fifos and devices are never cached


def _remove(path: str) -> None:
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def extract(archive: Path, dest: Path, roots: Iterable[str]) -> int:
    """Extract `archive` into `dest` with the checks above; the number of members written.
    Raises Refused (or OSError / tarfile.TarError) at the first member that fails them; what was written
    before it stays, for the caller to throw away."""
    roots = clean_roots(roots)
    top = os.path.realpath(dest)
    for root in roots:  # what the checkout has at a cache path is replaced, never written into
        parent = os.path.realpath(os.path.join(top, posixpath.dirname(root)))
        if not _inside(parent, top):
            raise Refused(f"the cache path {root!r} leads out of the checkout through a link")
        _remove(os.path.join(parent, posixpath.basename(root)))
    dirs: list[tuple[str, int, int]] = []
    count = 0
    with tarfile.open(archive, "r:") as tar:
        for member in tar:
            name = _check_name(member.name, roots)
            if not (member.isdir() or member.isreg() or member.issym()):
                raise Refused(f"member {name!r} is a link, device or fifo ({member.type!r})")
            parent = os.path.realpath(os.path.join(top, posixpath.dirname(name)))
            if not _inside(parent, top):
                raise Refused(f"member {name!r} would be written through a link that leads out")
            os.makedirs(parent, 0o700, exist_ok=True)
            target = os.path.join(parent, posixpath.basename(name))
            if os.path.islink(target) or (os.path.lexists(target) and not (member.isdir() and os.path.isdir(target))):
                _remove(target)  # a link (or a file) where this member goes is replaced, never followed
            mode = member.mode & 0o1777 & ~0o1022  # no setuid/setgid/sticky, no group/other write
            if member.isdir():
                os.makedirs(target, 0o700, exist_ok=True)
                dirs.append((target, mode | 0o700, int(member.mtime)))
            elif member.issym():
                os.symlink(member.linkname, target)
            else:
                source = tar.extractfile(member)
                assert source is not None
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
                os.chmod(target, mode)
                os.utime(target, (member.mtime, member.mtime), follow_symlinks=False)
            count += 1
    for path, mode, mtime in reversed(dirs):  # deepest first, after their contents
        os.chmod(path, mode)
        os.utime(path, (mtime, mtime))
    return count
