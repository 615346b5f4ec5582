"""`setup:` (issue 27): its run, cache, key, timeout_minutes and failure, on real git repositories and real
processes; the cache archive's own member checks, on this Python and on an older one (3.11.0-3.11.3 have
no `extractall(filter=)`), and the rule that a cache holds only what the base commit's code produced."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from runner.adapters.judge import untar
from runner.adapters.judge.setup import run_setup, setup_key
from runner.adapters.sandbox.identity import Identity
from runner.core.plan import SetupConfig
from tests.reliability_world import git

ROOT = Path(__file__).resolve().parents[2]
NONE = Identity()  # the judge's own user: these tests are about set-up, not isolation (test_sandbox.py is)


# --- the archive's member checks ----------------------------------------------------------------------------


def _venv_like(root: Path) -> None:
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "lib" / "site").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")  # absolute, as a venv's is
    (root / ".venv" / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    (root / ".venv" / "bin" / "tool").chmod(0o4775)  # setuid and group-write: dropped on the way back
    (root / ".venv" / "lib" / "site" / "mod.py").write_text("X = 1\n")
    os.link(root / ".venv" / "lib" / "site" / "mod.py", root / ".venv" / "lib" / "site" / "hard.py")
    os.mkfifo(root / ".venv" / "fifo")


def test_an_archive_round_trips_a_venv_like_tree_without_setuid_hard_links_or_fifos(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    _venv_like(src)
    (src / "outside.txt").write_text("not a cache path")
    untar.write(tmp_path / "c.tar", src, [".venv"])
    untar.extract(tmp_path / "c.tar", dst, [".venv"])
    assert os.readlink(dst / ".venv" / "bin" / "python") == "/usr/bin/python3"
    assert (dst / ".venv" / "lib" / "site" / "hard.py").read_text() == "X = 1\n"  # stored as a file of its own
    assert os.stat(dst / ".venv" / "lib" / "site" / "hard.py").st_nlink == 1
    assert stat.S_IMODE(os.stat(dst / ".venv" / "bin" / "tool").st_mode) == 0o755
    assert not (dst / ".venv" / "fifo").exists() and not (dst / "outside.txt").exists()


def _tar(path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info


@pytest.mark.parametrize("members, what", [
    ([(_info("/tmp/abs-evil"), b"x")], "absolute"),
    ([(_info(".venv/../../evil"), b"x")], ".."),
    ([(_info("elsewhere/evil"), b"x")], "not under a cache path"),
    ([(_info(".venv/h", tarfile.LNKTYPE, "/etc/passwd"), None)], "link, device"),
    ([(_info(".venv/dev", tarfile.CHRTYPE), None)], "link, device"),
    ([(_info(".venv/fifo", tarfile.FIFOTYPE), None)], "link, device"),
    ([(_info(".venv/out", tarfile.SYMTYPE, "{outside}"), None), (_info(".venv/out/evil"), b"x")], "is a link or not a folder"),
])
def test_the_member_checks_refuse_what_could_write_outside(tmp_path, members, what):
    """Each refused member writes nothing outside the checkout (the effect), and says why."""
    outside = tmp_path / "outside"
    outside.mkdir()
    dst = tmp_path / "dst"
    dst.mkdir()
    fixed = []
    for info, data in members:
        info.linkname = info.linkname.replace("{outside}", str(outside))
        fixed.append((info, data))
    archive = _tar(tmp_path / "bad.tar", *fixed)
    with pytest.raises(untar.Refused, match=what):
        untar.extract(archive, dst, [".venv"])
    assert list(outside.iterdir()) == [] and not Path("/tmp/abs-evil").exists()
    assert not (tmp_path / "evil").exists()


def test_a_link_committed_at_a_cache_path_is_replaced_never_written_through(tmp_path):
    """The agent commits `.venv` as a link to a folder outside: the cache is restored in its place."""
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    for d in (src, dst, outside):
        d.mkdir()
    (src / ".venv").mkdir()
    (src / ".venv" / "f").write_text("cached")
    untar.write(tmp_path / "c.tar", src, [".venv"])
    (dst / ".venv").symlink_to(outside)
    untar.extract(tmp_path / "c.tar", dst, [".venv"])
    assert not (dst / ".venv").is_symlink() and (dst / ".venv" / "f").read_text() == "cached"
    assert list(outside.iterdir()) == []
    (dst / "build").symlink_to(outside)  # a cache path whose parent leads out is refused whole
    with pytest.raises(untar.Refused, match="is a link or not a folder"):
        untar.extract(tmp_path / "c.tar", dst, ["build/venv"])


def _old_pythons() -> list[str]:
    found = []
    for candidate in ("/usr/bin/python3", "/usr/bin/python3.11", shutil.which("python3.11") or ""):
        if not candidate or not os.path.exists(candidate) or candidate in found:
            continue
        out = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:3] >= (3, 11) "
                              "and sys.version_info[:3] < (3, 11, 4))"], capture_output=True, text=True)
        if out.stdout.strip() == "True":
            found.append(candidate)
    return found


OLD = _old_pythons()


@pytest.mark.skipif(not OLD, reason="no Python 3.11.0-3.11.3 on this machine (Debian 12's python3 is 3.11.2)")
def test_the_cache_round_trips_on_a_python_without_extractall_filter(tmp_path):
    """Issue 27: on 3.11.0-3.11.3 `extractall(filter=...)` raised TypeError and every later run crashed. The
    module the cache is read with runs on such a Python (it imports the standard library only), and refuses
    there what it refuses here."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    _venv_like(src)
    code = f"""
import sys, tarfile
assert "filter" not in tarfile.TarFile.extractall.__code__.co_varnames, "this Python has filter="
sys.path.insert(0, {str(ROOT)!r})
from runner.adapters.judge import untar
untar.write({str(tmp_path / 'c.tar')!r}, __import__('pathlib').Path({str(src)!r}), ['.venv'])
print(untar.extract({str(tmp_path / 'c.tar')!r}, {str(dst)!r}, ['.venv']))
try:
    untar.extract({str(tmp_path / 'c.tar')!r}, {str(dst)!r}, ['other'])
except untar.Refused as e:
    print('refused', e)
"""
    done = subprocess.run([OLD[0], "-I", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "refused" in done.stdout and "not under a cache path" in done.stdout
    assert os.readlink(dst / ".venv" / "bin" / "python") == "/usr/bin/python3"


# --- run_setup on a real repository -------------------------------------------------------------------------


def _repo(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=M", "-c", "user.email=m@x", "add", "-A")
    git(repo, "-c", "user.name=M", "-c", "user.email=m@x", "commit", "-q", "-m", "base")
    return repo, git(repo, "rev-parse", "HEAD").strip()


def _commit(repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-q", "-am", "agent")
    return git(repo, "rev-parse", "HEAD").strip()


class Place:
    """A fresh checkout of any commit at one path (as the gates' checkout is made), counting them."""

    def __init__(self, repo: Path, path: Path) -> None:
        self.repo, self.path, self.made = repo, path, []

    def __call__(self, sha: str) -> Path:
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir()
        subprocess.run(f"git -C {self.repo} archive {sha} | tar -x -C {self.path}", shell=True, check=True)
        self.made.append(sha)
        return self.path


LOG = "echo ran >> {log}"
BUILD = "mkdir -p .venv && cat builder.txt > .venv/built && python3 -c 'import sys' && " + LOG


def _setup(tmp_path: Path, **kw) -> SetupConfig:
    run = kw.pop("run", (BUILD.format(log=tmp_path / "log"),))
    return SetupConfig(run=run, **kw)


def _go(cfg, repo, place, sha, trusted, tmp_path):
    workdir = place(sha)
    return run_setup(cfg, sha=sha, repo=repo, workdir=workdir, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                     identity=NONE, cache_dir=tmp_path / "cache", trusted_sha=trusted, checkout=place)


def _runs(tmp_path: Path) -> int:
    log = tmp_path / "log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_run_without_cache_runs_every_command_in_order_each_session(tmp_path):
    repo, base = _repo(tmp_path, {"builder.txt": "base\n"})
    cfg = _setup(tmp_path, run=(f"echo one >> {tmp_path}/log", f"echo two >> {tmp_path}/log"))
    place = Place(repo, tmp_path / "gates")
    assert _go(cfg, repo, place, base, base, tmp_path) == ()
    assert _go(cfg, repo, place, base, base, tmp_path) == ()
    assert (tmp_path / "log").read_text().split() == ["one", "two", "one", "two"]


def test_the_cache_is_built_from_the_base_once_and_restored_after(tmp_path):
    """Session 1 builds the cache from the base commit (not the judged one); session 2 only restores it."""
    repo, base = _repo(tmp_path, {"builder.txt": "base\n", "req.txt": "a\n"})
    agent = _commit(repo, {"builder.txt": "AGENT\n"})  # not a key file: the cache is the base's build
    cfg = _setup(tmp_path, cache=(".venv",), key=("req.txt",))
    place = Place(repo, tmp_path / "gates")
    assert _go(cfg, repo, place, agent, base, tmp_path) == ()
    assert place.made == [agent, base, agent] and _runs(tmp_path) == 1
    assert (place.path / ".venv" / "built").read_text() == "base\n"  # the maintainer's code built it
    assert (place.path / "builder.txt").read_text() == "AGENT\n"  # on the judged commit's files
    assert _go(cfg, repo, place, agent, base, tmp_path) == ()
    assert _runs(tmp_path) == 1 and (place.path / ".venv" / "built").read_text() == "base\n"


def test_a_judged_commit_that_changes_a_key_file_sets_up_fresh_and_caches_nothing(tmp_path):
    repo, base = _repo(tmp_path, {"builder.txt": "base\n", "req.txt": "a\n"})
    cfg = _setup(tmp_path, cache=(".venv",), key=("req.txt",))
    place = Place(repo, tmp_path / "gates")
    agent = _commit(repo, {"req.txt": "b\n", "builder.txt": "AGENT\n"})
    assert setup_key(cfg, repo, agent) != setup_key(cfg, repo, base)
    assert _go(cfg, repo, place, agent, base, tmp_path) == ()
    assert (place.path / ".venv" / "built").read_text() == "AGENT\n" and _runs(tmp_path) == 1
    assert not list((tmp_path / "cache").rglob("*.tar")) if (tmp_path / "cache").exists() else True
    assert _go(cfg, repo, place, agent, base, tmp_path) == () and _runs(tmp_path) == 2  # fresh again


def test_a_changed_command_is_another_key(tmp_path):
    repo, base = _repo(tmp_path, {"builder.txt": "base\n"})
    one = _setup(tmp_path, cache=(".venv",))
    two = _setup(tmp_path, cache=(".venv",), run=(BUILD.format(log=tmp_path / "log") + " && true",))
    assert setup_key(one, repo, base) != setup_key(two, repo, base)


def test_a_failed_command_is_a_red_result_and_the_rest_do_not_run(tmp_path):
    """Red only on the judged commit (it sets up on the base): the agent's failure, no set-up problem."""
    repo, base = _repo(tmp_path, {"go.sh": "exit 0\n"})
    agent = _commit(repo, {"go.sh": "echo broken >&2; exit 3\n"})
    cfg = _setup(tmp_path, run=("sh go.sh", f"echo never >> {tmp_path}/log"))
    place = Place(repo, tmp_path / "gates")
    (red,) = _go(cfg, repo, place, agent, base, tmp_path)
    assert not red.passed and red.exit_code == 3 and "setup command: sh go.sh" in red.error
    assert "broken" in red.output_tail and red.setup_problem is None
    assert _runs(tmp_path) == 1  # `echo never` ran once: on the base, where go.sh works; not on the judged commit
    assert place.made == [agent, base, agent]  # tried on the base, then the gates judge the judged commit


def test_a_command_that_fails_on_the_base_too_is_a_set_up_problem_with_the_fix(tmp_path):
    repo, base = _repo(tmp_path, {"x": "1\n"})
    agent = _commit(repo, {"x": "2\n"})
    cfg = _setup(tmp_path, run=(".venv/bin/pip install -e .",))
    place = Place(repo, tmp_path / "gates")
    (red,) = _go(cfg, repo, place, agent, base, tmp_path)
    assert red.exit_code == 127 and red.setup_problem and base[:12] in red.setup_problem
    assert "setup:" in red.setup_problem and "python3 -m venv .venv" in red.setup_problem
    assert place.made[-1] == agent


def test_a_base_whose_setup_fails_builds_no_cache_and_is_a_set_up_problem(tmp_path):
    repo, base = _repo(tmp_path, {"builder.txt": "base\n"})
    cfg = _setup(tmp_path, run=("exit 4",), cache=(".venv",))
    place = Place(repo, tmp_path / "gates")
    (red,) = _go(cfg, repo, place, base, base, tmp_path)
    assert red.exit_code == 4 and red.setup_problem
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.tar"))


def test_timeout_minutes_bounds_each_command(tmp_path):
    repo, base = _repo(tmp_path, {"x": "1\n"})
    cfg = _setup(tmp_path, run=("sleep 30",), timeout_minutes="1s")
    place = Place(repo, tmp_path / "gates")
    (red,) = _go(cfg, repo, place, base, base, tmp_path)
    assert red.timed_out and not red.passed and red.duration_s < 10  # seconds, not read as minutes again


def test_a_cache_that_cannot_be_read_is_dropped_and_set_up_runs_fresh(tmp_path):
    repo, base = _repo(tmp_path, {"builder.txt": "base\n"})
    cfg = _setup(tmp_path, cache=(".venv",))
    place = Place(repo, tmp_path / "gates")
    assert _go(cfg, repo, place, base, base, tmp_path) == () and _runs(tmp_path) == 1
    (archive,) = (tmp_path / "cache").rglob("*.tar")
    _tar(archive, (_info("/etc/evil-from-cache"), b"x"))  # a doctored archive
    assert _go(cfg, repo, place, base, base, tmp_path) == ()
    assert _runs(tmp_path) == 2 and not Path("/etc/evil-from-cache").exists()
    assert not archive.exists()  # never trusted again
