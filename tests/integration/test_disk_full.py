"""Issue 22: an agent fills a file system plan-runner shares (bytes, or the inode table). The session ends in a
clear error (no `unexpected error: OSError`), nothing is lost, and once space is back the next session records
what happened and runs. Real small file systems: a tmpfs mounted for the test, which takes privilege: the tests run
where the user has passwordless sudo (`sudo_user`: .ci/run's second step)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from runner.drivers.session import space
from tests.attack_world import Arena
from tests.reliability_world import git, ledger

pytestmark = [pytest.mark.integration, pytest.mark.sudo_user]
SUDO = [] if os.geteuid() == 0 else ["sudo", "-n"]


@pytest.fixture
def small_fs(tmp_path):
    """A 48 MB tmpfs with 3000 inodes at tmp_path/small, unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    owner = f"uid={os.getuid()},gid={os.getgid()}"  # the user's own, as a disk it works on is
    subprocess.run([*SUDO, "mount", "-t", "tmpfs", "-o", f"size=48m,nr_inodes=3000,mode=0755,{owner}", "tmpfs",
                    str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run([*SUDO, "umount", "-l", str(mount)], check=False)


def _session(a: Arena) -> subprocess.CompletedProcess:
    return subprocess.run([os.sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], cwd=a.repo,
                          capture_output=True, text=True, env=a.env(), timeout=300, errors="replace")


def _sessions(repo: Path) -> list[dict]:
    return [e for e in ledger(repo) if e.get("type") == "session"]


@pytest.mark.parametrize("mode", ["bytes", "inodes"])
def test_a_full_file_system_ends_clearly_and_the_next_session_runs_once_space_is_back(small_fs, mode):
    """The agent commits its work, then fills the judge's temp folder's file system (48 MB, or its 3000 inodes;
    the repository is on it too). The session ends with a clear error (exit 2, what is full, the fix), recorded
    as Interrupted with the agent's commit saved on the work branch; while the disk stays full the next run
    stops before it starts anything; once the filler is gone it runs and credits the saved work."""
    shared = small_fs / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: the judge's temp folder, writable by the agent's user too
    a = Arena(small_fs, "disk_fill", env={"TMPDIR": str(shared)}, controls={"fill-mode": mode})
    try:
        first = _session(a)
        text = first.stdout + first.stderr
        assert "Traceback" not in text and "unexpected error" not in text, text[-3000:]
        # positive control: the attack really exhausted the file system plan-runner writes
        assert (a.loot / "filled").read_text() == mode
        vfs = os.statvfs(small_fs)
        assert (vfs.f_favail < space.RESERVE_INODES if mode == "inodes"
                else vfs.f_bavail * vfs.f_frsize < space.RESERVE_BYTES), "the filler did not fill the disk"
        assert first.returncode == 2, text[-3000:]
        assert "error: no space left during the session: " + str(small_fs) in first.stderr, first.stderr[-3000:]
        assert ("0 bytes free" if mode == "bytes" else f"of {3000} inodes free") in first.stderr
        assert "Session 1 was recorded as Interrupted" in first.stderr and "df -h" in first.stderr
        records = _sessions(a.repo)
        assert [r["outcome"] for r in records] == ["Interrupted"], records
        assert "was full during the session" in records[0]["reasons"][0]
        saved = git(a.repo, "show", "plan-runner/calc:calc/mul.py", check=False)
        assert saved.startswith("def mul"), "the agent's commit was lost"
        again = _session(a)  # still full: refused before anything starts, nothing recorded
        assert again.returncode == 2 and "no space left before the session" in again.stderr, again.stderr[-3000:]
        assert "Traceback" not in again.stderr and len(_sessions(a.repo)) == 1
        for p in [*shared.glob("fill-*"), *a.loot.glob("fill-*")]:  # the filler, wherever the agent could put it
            p.unlink()
        second = _session(a)
        assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
        out = json.loads(second.stdout)
        assert out["outcome"] in ("Advanced", "Progress"), out["reasons"]
        assert [r["outcome"] for r in _sessions(a.repo)] == ["Interrupted", out["outcome"]]
        a.assert_no_survivors()
    finally:
        a.close()
