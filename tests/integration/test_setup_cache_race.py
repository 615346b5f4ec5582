"""Issue 22: the set-up cache is archived and restored by plan-runner (often root) in a tree the agent's identity
owns. A process of that identity that flips a folder of the tree between a real folder and a link to the judge's
files while plan-runner works must get nothing: the archive never holds the judge's file, the extraction never
writes outside the tree. Effect-judged, each with a positive control: the path-based walk plan-runner used
before (kept here, as it was) loses the same race.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from runner.adapters.judge import setup, untar
from runner.adapters.sandbox import fsafe

pytestmark = pytest.mark.integration

FILES = 40  # files in the flipped folder: each one is a window for the race

# The agent's move: `<lib>/sub` flips between a real folder and a link to the judge's folder, until <stop>.
RACER = textwrap.dedent("""\
    import os, sys
    lib, judge, stop = sys.argv[1:4]
    sub, spare, link = (os.path.join(lib, n) for n in ("sub", "sub.dir", "sub.lnk"))
    open(os.path.join(os.path.dirname(stop), "racing"), "w").close()
    while not os.path.exists(stop):
        try:
            if not os.path.lexists(link):
                os.symlink(judge, link)
            os.rename(sub, spare)
            os.rename(link, sub)
            os.rename(sub, link)
            os.rename(spare, sub)
        except OSError:
            pass
    """)


class _Race:
    def __init__(self, lib: Path, judge: Path, tmp: Path) -> None:
        self.stop_file = tmp / "stop"
        self.stop_file.unlink(missing_ok=True)
        (tmp / "racing").unlink(missing_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-c", RACER, str(lib), str(judge), str(self.stop_file)])
        while not (tmp / "racing").exists():
            time.sleep(0.01)

    def stop(self) -> None:
        self.stop_file.touch()
        self.proc.wait(timeout=10)


# --- the walks plan-runner made before (positive controls), as they were -------------------------------------


def _old_write(archive: Path, source: Path, roots) -> None:
    """untar.write before: lstat/listdir/open by path string, O_NOFOLLOW on the last component only."""
    with tarfile.open(archive, "w") as tar:
        for root in roots:
            walk = [(str(source / root), root)]
            while walk:
                path, arc = walk.pop()
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                info = tarfile.TarInfo(arc)
                info.mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                    tar.addfile(info)
                elif stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    try:
                        names = os.listdir(path)
                    except OSError:
                        continue
                    walk += [(os.path.join(path, n), f"{arc}/{n}") for n in sorted(names, reverse=True)]
                elif stat.S_ISREG(st.st_mode):
                    try:
                        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                    except OSError:
                        continue
                    with os.fdopen(fd, "rb") as fh:
                        info.size = os.fstat(fh.fileno()).st_size
                        tar.addfile(info, fh)


def _old_extract(archive: Path, dest: Path, roots) -> None:
    """untar.extract before: the folder checked with realpath, then written by path string."""
    top = os.path.realpath(dest)
    with tarfile.open(archive, "r:") as tar:
        for member in tar:
            parent = os.path.realpath(os.path.join(top, posixpath.dirname(member.name)))
            if not (parent == top or parent.startswith(top + "/")):
                raise untar.Refused("leads out")
            os.makedirs(parent, 0o700, exist_ok=True)
            target = os.path.join(parent, posixpath.basename(member.name))
            if member.isdir():
                os.makedirs(target, 0o700, exist_ok=True)
            elif member.isreg():
                if os.path.islink(target) or os.path.lexists(target):
                    os.unlink(target)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(tar.extractfile(member), out)


def _clean(lib: Path) -> None:
    """Remove what an extraction left in the flipped folder (never through the link: it is the racer's)."""
    for name in ("sub", "sub.dir"):
        try:
            fd = os.open(lib / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            for entry in os.listdir(fd):
                try:
                    os.unlink(entry, dir_fd=fd)
                except OSError:
                    pass
        finally:
            os.close(fd)


# --- the arena ---------------------------------------------------------------------------------------------------


def _tree(tmp_path: Path) -> tuple[Path, Path, Path, bytes]:
    """A checkout in an area of plan-runner's own (0711), with `.venv/lib/sub` of FILES files; the judge's folder."""
    area = tmp_path / "area"
    work = area / "work"
    sub = work / ".venv" / "lib" / "sub"
    sub.mkdir(parents=True)
    area.chmod(0o711)
    for i in range(FILES):
        (sub / f"config{i}").write_text("harmless\n")
    judge = tmp_path / "judge.git"
    judge.mkdir()
    secret = b"AUTHORIZATION: basic ghs_" + os.urandom(8).hex().encode()
    for i in range(FILES):
        (judge / f"config{i}").write_bytes(secret)
    return work, sub.parent, judge, secret


@pytest.mark.parametrize("how", ["old", "now"])
def test_the_cache_archive_never_holds_a_judges_file_however_the_tree_is_flipped(tmp_path, how):
    """Archiving what set-up made while the tree's owner flips `.venv/lib/sub` to a link to the judge's folder:
    plan-runner's save (through a descriptor of the checkout, fsafe + untar) never archives the judge's file;
    the old path walk does (the positive control)."""
    work, lib, judge, secret = _tree(tmp_path)
    race = _Race(lib, judge, tmp_path)
    leaked = 0
    try:
        for i in range(1500):
            archive = tmp_path / "cache" / f"{i}.tar"
            if how == "old":
                archive.parent.mkdir(exist_ok=True)
                try:  # the old walk could also trip over the flip (a name gone between lstat and readlink)
                    _old_write(archive, work, [".venv"])
                except OSError:
                    pass
            else:
                setup._save(archive, work, (".venv",))  # what run_setup calls
            if archive.exists():
                leaked += secret in archive.read_bytes()
                archive.unlink()
            if how == "old" and leaked:
                break
    finally:
        race.stop()
    if how == "old":
        assert leaked, "the race never won against the old walk: the test shows nothing"
    else:
        assert leaked == 0, f"the judge's file was archived {leaked} times"


@pytest.mark.parametrize("how", ["old", "now"])
def test_restoring_the_cache_never_writes_outside_the_checkout_however_the_tree_is_flipped(tmp_path, how):
    """Restoring a cache of `.venv/lib/sub/*` while the tree's owner flips `sub` to a link to the judge's folder:
    plan-runner's restore never writes there (a flip makes it refuse, and the caller drops the cache); the old
    realpath-then-path extraction does (the positive control)."""
    work, lib, judge, _ = _tree(tmp_path)
    src = tmp_path / "src"
    (src / ".venv" / "lib" / "sub").mkdir(parents=True)
    for i in range(FILES):
        (src / ".venv" / "lib" / "sub" / f"evil{i}").write_text("planted\n")
    archive = tmp_path / "cache.tar"
    untar.write(archive, src, [".venv"])
    race = _Race(lib, judge, tmp_path)
    landed = []
    try:
        for _ in range(1500):
            try:
                if how == "old":
                    _old_extract(archive, work, [".venv"])
                else:
                    with fsafe.opened_dir(work, below=work.parent) as fd:
                        untar.extract(archive, work, [".venv"], dest_fd=fd)
            except (OSError, untar.Refused):
                pass
            landed = [p.name for p in judge.iterdir() if p.name.startswith("evil")]
            if landed:
                break
            _clean(lib)
    finally:
        race.stop()
    if how == "old":
        assert landed, "the race never won against the old extraction: the test shows nothing"
    else:
        assert landed == [], f"the restore wrote into the judge's folder: {landed}"
