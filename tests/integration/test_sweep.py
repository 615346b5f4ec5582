"""The agent areas and seed stores of repositories that are gone are removed in the background
(runner.adapters.sandbox.sweep): never an area a session holds or a store being filled, never one whose
repository still exists; at most once an hour after a session, and at once by `plan-runner clean`."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.adapters.judge.base import BaseTree
from runner.adapters.sandbox import agent_clone, sweep
from runner.adapters.sandbox.origin import ORIGIN
from runner.adapters.sandbox.identity import Identity, judge_dir
from tests.integration.test_session_local import make_repo

pytestmark = pytest.mark.integration

BRANCH = "plan-runner/p"


def _repo(path: Path) -> Path:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x.invalid"}
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "base"], ["branch", BRANCH]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, env=env)
    return path


@pytest.fixture
def sandbox_root(tmp_path, monkeypatch):
    root = tmp_path / "sandbox"
    root.mkdir()
    monkeypatch.setenv("PLAN_RUNNER_SANDBOX_ROOT", str(root))
    return root


def _prepare(area: agent_clone.AgentArea, who: Identity, repo: Path, scratch: Path) -> None:
    """A session's start: the base at the work branch (the agent's tree lies on it), then the agent's area."""
    sha = subprocess.run(["git", "rev-parse", BRANCH], cwd=repo, capture_output=True, text=True, check=True).stdout
    BaseTree(area, repo).at(sha.strip())
    agent_clone.prepare(area, who, repo, BRANCH, None, scratch)


def _used(repo: Path, plan: str, scratch: Path) -> agent_clone.AgentArea:
    """An area and a seed store a finished session of `plan` in `repo` leaves behind."""
    area = agent_clone.area_for(repo, plan)
    me = Identity()
    _prepare(area, me, repo, scratch)
    agent_clone.seed_store(repo, BRANCH)
    agent_clone.discard_trash(area, me, wait=True)  # the session's end: the area released
    return area


def _stores() -> list[str]:
    return sorted(n for n in os.listdir(judge_dir("seeds")) if not n.endswith((".lock", ".name", ".origin")))


def test_the_areas_and_store_of_a_gone_repository_are_removed_and_nothing_else(sandbox_root, tmp_path):
    """A deleted repository's area and seed store go (with the store's name and record); a living one's stay."""
    living, gone = _repo(tmp_path / "living"), _repo(tmp_path / "gone")
    keep, lose = _used(living, "p", tmp_path / "s1"), _used(gone, "p", tmp_path / "s2")
    assert (lose.root / ORIGIN).read_text() == f"{os.path.realpath(gone)}\n"
    assert len(_stores()) == 2
    assert sweep.sweep() == []  # both repositories exist: nothing to do
    shutil.rmtree(gone)
    removed = sweep.sweep()
    assert lose.root in removed and not os.path.lexists(lose.root)
    assert keep.root.is_dir() and (keep.root / "work" / ".git").is_dir()
    assert len(_stores()) == 1 and len([n for n in os.listdir(judge_dir("seeds")) if n.endswith(".origin")]) == 1
    assert not [n for n in os.listdir(judge_dir("agents")) + os.listdir(judge_dir("seeds"))
                if n.startswith(".removing-")]
    # The living repository's next session still finds its store and area.
    _prepare(keep, Identity(), living, tmp_path / "s1")
    assert (keep.work / ".git").is_dir()


def test_an_area_a_session_holds_and_a_store_being_filled_stay_when_their_repository_is_gone(sandbox_root,
                                                                                             tmp_path):
    """The in-use lock of an area and the fill lock of a store win over a repository that is gone."""
    repo = _repo(tmp_path / "repo")
    area = agent_clone.area_for(repo, "busy")
    me = Identity()
    _prepare(area, me, repo, tmp_path / "scratch")  # holds the area until its end
    agent_clone.seed_store(repo, BRANCH)
    (lock_name,) = [n for n in os.listdir(judge_dir("seeds")) if n.endswith(".lock")]
    fill = os.open(judge_dir("seeds") / lock_name, os.O_RDWR)
    fcntl.flock(fill, fcntl.LOCK_EX)  # a session filling the store
    shutil.rmtree(repo)
    try:
        assert sweep.sweep() == [] and (area.work / ".git").is_dir() and len(_stores()) == 1
    finally:
        os.close(fill)
    agent_clone.discard_trash(area, me, wait=True)
    removed = sweep.sweep()
    assert area.root in removed and not os.path.lexists(area.root) and _stores() == []


def test_an_area_without_a_record_goes_only_after_two_weeks_unused(sandbox_root, tmp_path):
    """Areas made before records were kept: by age only, and only when nobody used them for two weeks."""
    agents = judge_dir("agents")
    old, recent = agents / "old-0123456789ab", agents / "recent-0123456789ab"
    for root in (old, recent):
        (root / "work").mkdir(parents=True)
    now = time.time()
    os.utime(old, (now - sweep.UNRECORDED_AFTER_S - 60,) * 2)
    os.utime(recent, (now - sweep.UNRECORDED_AFTER_S + 3600,) * 2)
    assert sweep.sweep(now=now) == [old]
    assert recent.is_dir() and not os.path.lexists(old)


def test_a_session_end_starts_one_detached_sweep_an_hour(sandbox_root, tmp_path):
    """The real CLI: after a session, a stale area of a deleted repository is removed by a detached process;
    a second session within the hour starts none (one stat at its end)."""
    stale = _used(_repo(tmp_path / "gone-1"), "p", tmp_path / "s1")
    shutil.rmtree(tmp_path / "gone-1")
    repo = make_repo(tmp_path, """
        sessions:
          - - say: "nothing"
          - - say: "nothing again"
        """)
    env = {**os.environ, "PLAN_RUNNER_ISOLATION": "none"}

    def session() -> None:
        proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], cwd=repo,
                              capture_output=True, text=True, env=env, timeout=120)
        assert "Traceback" not in proc.stderr and proc.stdout.strip(), proc.stderr

    session()
    deadline = time.monotonic() + 30
    while os.path.lexists(stale.root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.lexists(stale.root), "no sweep removed the gone repository's area"
    plan_area = agent_clone.area_for(repo, "calc")
    assert (plan_area.root / ORIGIN).read_text() == f"{os.path.realpath(repo)}\n"
    assert plan_area.root.is_dir()
    stale = _used(_repo(tmp_path / "gone-2"), "p", tmp_path / "s2")
    shutil.rmtree(tmp_path / "gone-2")
    session()
    time.sleep(2)
    assert stale.root.is_dir(), "a second sweep ran within the hour"


def test_clean_removes_the_areas_of_gone_repositories_at_once(sandbox_root, tmp_path):
    """`plan-runner clean` (here outside any repository) sweeps now and says what it removed."""
    stale = _used(_repo(tmp_path / "gone"), "p", tmp_path / "s")
    shutil.rmtree(tmp_path / "gone")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    proc = subprocess.run([sys.executable, "-m", "runner", "clean"], cwd=outside, capture_output=True, text=True,
                          env=dict(os.environ), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"removed {stale.root} (its repository is gone)" in proc.stderr.replace("\n", "")
    assert not os.path.lexists(stale.root)


def test_a_repository_that_cannot_be_looked_at_may_still_exist_and_keeps_its_areas(sandbox_root, tmp_path,
                                                                                     monkeypatch):
    """Only a path that is not there (ENOENT, ENOTDIR) is gone: a record the sweeping user cannot look at (a
    folder on the way it may not search, a failing disk) may name a repository that still exists."""
    area = _used(_repo(tmp_path / "private" / "repo"), "p", tmp_path / "s")
    real = os.lstat
    hidden = str(tmp_path / "private")

    def lstat(path, *args, **kwargs):  # what an ordinary user meets at another user's 0750 home
        if str(path).startswith(hidden + "/"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(sweep.os, "lstat", lstat)
    assert sweep.sweep() == [] and area.root.is_dir()
    monkeypatch.setattr(sweep.os, "lstat", real)
    shutil.rmtree(tmp_path / "private")
    assert area.root in sweep.sweep()  # gone now: its area goes (and its seed store)
