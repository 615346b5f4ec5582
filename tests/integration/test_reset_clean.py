"""`plan-runner reset PLAN` (start over, the old state kept under a backup ref) and `plan-runner clean [PLAN]`
(agent areas, plan-runner's own work trees, finished demo folders; never a ref), through the real CLI."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from runner.adapters.sandbox.agent_clone import area_for
from tests.reliability_world import git
from tests.integration.test_own_workspace import PLAN_RUNNER, cli, ledger, make_repo

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _own_sandbox_root(tmp_path, monkeypatch):
    """Each test's agent areas under its own root: `plan-runner clean` without a plan also sweeps every area of
    this machine user whose repository is gone (runner/adapters/sandbox/sweep.py), and on the machine's shared root
    that was every area the suite (and the runs before it) left: 97-123 s of removing in one test, beside the
    other workers' sessions."""
    root = tmp_path / "sandbox"
    root.mkdir()
    monkeypatch.setenv("PLAN_RUNNER_SANDBOX_ROOT", str(root))


IDLE = "sessions:\n  - - write: {path: calc/wip.py, content: 'x = 1'}\n"  # NoProgress: the plan goes on


def _idle_session(repo: Path, tmp: Path, name: str = "mul") -> None:
    (tmp / f"{name}.yaml").write_text(IDLE)
    proc = cli(repo, "session", f"plans/{name}.md")
    assert proc.returncode == 0, proc.stderr


def _ref(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", "--verify", "--quiet", ref, check=False)


def test_reset_keeps_the_old_state_under_a_backup_ref_and_the_plan_starts_over(tmp_path):
    repo = make_repo(tmp_path, "mul")
    _idle_session(repo, tmp_path)
    state, branch = _ref(repo, "refs/plan-runner/state/mul"), _ref(repo, "refs/heads/plan-runner/mul")
    area = area_for(repo, "mul").root
    assert state and branch and area.is_dir() and (repo / ".git/plan-runner/mul/tree").is_dir()
    proc = cli(repo, "reset", "plans/mul.md")
    assert proc.returncode == 0, proc.stderr
    [backup] = {line.rsplit("/", 1)[0] for line in git(repo, "for-each-ref", "--format=%(refname)",
                                                        "refs/plan-runner/backup/mul/").splitlines()}
    assert f"kept under {backup}/" in proc.stderr.replace("\n", " ")
    assert _ref(repo, f"{backup}/state") == state and _ref(repo, f"{backup}/branch") == branch
    assert not _ref(repo, "refs/plan-runner/state/mul") and not _ref(repo, "refs/heads/plan-runner/mul")
    assert not area.exists() and not (repo / ".git/plan-runner/mul/tree").exists()
    assert "tree" not in git(repo, "worktree", "list")
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main" and git(repo, "status", "--porcelain") == ""
    _idle_session(repo, tmp_path)  # starts over: session 1 again
    assert [e["n"] for e in ledger(repo, "mul") if e["type"] == "started"] == [1]
    assert cli(repo, "reset", "plans/mul.md").returncode == 0  # a second reset: a second backup, both kept
    assert len({line.rsplit("/", 1)[0] for line in git(repo, "for-each-ref", "--format=%(refname)",
                                                        "refs/plan-runner/backup/mul/").splitlines()}) == 2


def test_reset_refuses_while_the_work_branch_is_checked_out_or_the_plan_runs(tmp_path):
    repo = make_repo(tmp_path, "mul")
    _idle_session(repo, tmp_path)
    state = _ref(repo, "refs/plan-runner/state/mul")
    git(repo, "switch", "-q", "plan-runner/mul")
    proc = cli(repo, "reset", "plans/mul.md")
    assert proc.returncode == 2 and "is checked out in" in proc.stderr and "switch" in proc.stderr
    assert _ref(repo, "refs/plan-runner/state/mul") == state and _ref(repo, "refs/heads/plan-runner/mul")
    git(repo, "switch", "-q", "main")
    lock = repo / ".git/plan-runner/mul/run.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a `run` of the plan holds it
        proc = cli(repo, "reset", "plans/mul.md")
    finally:
        os.close(fd)
    assert proc.returncode == 2 and "already running" in proc.stderr
    assert _ref(repo, "refs/plan-runner/state/mul") == state


def test_reset_with_a_remote_forgets_the_plan_there_too(tmp_path):
    """With `origin`, the state ref and work branch go on the remote as well (kept under the backup ref there),
    else the next run would fetch them back."""
    repo = make_repo(tmp_path, "mul")
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    _idle_session(repo, tmp_path)
    state = git(bare, "rev-parse", "--verify", "--quiet", "refs/plan-runner/state/mul", check=False)
    assert state, "the session pushed its state"
    assert cli(repo, "reset", "plans/mul.md").returncode == 0
    assert not git(bare, "rev-parse", "--verify", "--quiet", "refs/plan-runner/state/mul", check=False)
    assert not git(bare, "rev-parse", "--verify", "--quiet", "refs/heads/plan-runner/mul", check=False)
    kept = git(bare, "for-each-ref", "--format=%(objectname) %(refname)", "refs/plan-runner/backup/mul/")
    assert f"{state} refs/plan-runner/backup/mul/" in kept
    _idle_session(repo, tmp_path)
    assert [e["n"] for e in ledger(repo, "mul") if e["type"] == "started"] == [1]


def test_clean_removes_the_agent_area_and_keeps_every_ref(tmp_path):
    """The agent area (files of plan-runner's own uid: the room runs as it) and plan-runner's work tree go; the
    state and the work branch stay, and the next session runs as before."""
    repo = make_repo(tmp_path, "mul")
    _idle_session(repo, tmp_path)
    area = area_for(repo, "mul").root
    owners = {p.lstat().st_uid for p in area.rglob("*")}
    refs = git(repo, "for-each-ref")
    proc = cli(repo, "clean", "plans/mul.md")
    assert proc.returncode == 0 and f"removed the agent area {area}" in proc.stderr, proc.stderr
    assert not area.exists() and not (repo / ".git/plan-runner/mul/tree").exists()
    assert git(repo, "for-each-ref") == refs
    assert owners == {os.geteuid()}, owners  # no other uid's files: no pooled user wrote them
    _idle_session(repo, tmp_path)
    assert [e["n"] for e in ledger(repo, "mul") if e["type"] == "started"] == [1, 2]


def test_clean_without_a_plan_cleans_every_plan_and_finished_demo_folders_only(tmp_path):
    repo = make_repo(tmp_path, "one", "two")
    for name in ("one", "two"):
        _idle_session(repo, tmp_path, name)
    temp = tmp_path / "temp"
    temp.mkdir()
    finished = temp / "plan-runner-demo-done"
    (finished / "repo").mkdir(parents=True)
    running = temp / "plan-runner-demo-running"
    (running / "repo/.git/plan-runner/demo").mkdir(parents=True)
    other = temp / "someone-else"
    other.mkdir()
    fd = os.open(running / "repo/.git/plan-runner/demo/run.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        env = {**os.environ, "TMPDIR": str(temp)}  # the areas stay under the test's own root (the fixture)
        proc = subprocess.run([PLAN_RUNNER, "clean"], cwd=repo / "calc", capture_output=True, text=True, env=env,
                              timeout=120)
    finally:
        os.close(fd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert not area_for(repo, "one").root.exists() and not area_for(repo, "two").root.exists()
    assert not finished.exists() and running.is_dir() and other.is_dir()
    assert "its demo is running" in proc.stderr
    assert _ref(repo, "refs/plan-runner/state/one") and _ref(repo, "refs/plan-runner/state/two")


def test_clean_outside_a_repository_cleans_the_finished_demo_folders_only(tmp_path):
    temp = tmp_path / "temp"
    finished = temp / "plan-runner-demo-done"
    (finished / "repo").mkdir(parents=True)
    nowhere = tmp_path / "not-a-repository"
    nowhere.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    proc = subprocess.run([PLAN_RUNNER, "clean"], cwd=nowhere, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "cleaning the demo folders only" in proc.stderr
    assert not finished.exists()
    named = subprocess.run([PLAN_RUNNER, "clean", "plans/x.md"], cwd=nowhere, capture_output=True, text=True,
                           env=env, timeout=120)
    assert named.returncode == 2 and "error:" in named.stderr and "Traceback" not in named.stderr  # named: an error


def test_clean_and_reset_leave_a_running_session_alone(tmp_path):
    """`plan-runner session` holds no run lock: its open session, by a live process, is what tells clean and reset
    that its agent works in the area. Both refuse (exit 2) and the area stays; afterwards clean works. The agent
    sleeps 15 s, longer than the two CLI runs take on a loaded machine (with 6 s it failed once at a load of 14)."""
    import time

    repo = make_repo(tmp_path, "mul")
    (tmp_path / "mul.yaml").write_text("sessions:\n  - - sleep: 15\n")
    proc = subprocess.Popen([PLAN_RUNNER, "session", "plans/mul.md"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not area_for(repo, "mul").work.is_dir():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        for verb in ("clean", "reset"):
            got = cli(repo, verb, "plans/mul.md")
            assert got.returncode == 2 and "is running" in got.stderr, got.stderr
            assert area_for(repo, "mul").work.is_dir() and _ref(repo, "refs/plan-runner/state/mul")
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert cli(repo, "clean", "plans/mul.md").returncode == 0 and not area_for(repo, "mul").root.exists()


def test_a_finished_plans_area_is_removed_in_the_background(tmp_path):
    """Once a plan is finished nothing of its agent's area is used again: it is removed (detached, off the
    session's path) without a `clean`."""
    repo = make_repo(tmp_path, "done")
    area = area_for(repo, "done").root
    proc = cli(repo, "run", "plans/done.md")
    assert proc.returncode == 0, proc.stderr
    assert [e["type"] for e in ledger(repo, "done")][-1] == "finish"
    for _ in range(200):
        if not area.exists():
            break
        __import__("time").sleep(0.1)
    assert not area.exists(), sorted(p.name for p in area.iterdir())


def test_clean_names_the_pooled_users_an_older_version_made_and_creates_none(monkeypatch):
    """Issue 49: nothing makes pooled agent users now; `clean` names the ones an older plan-runner made (system
    users, home /nonexistent) with the `userdel` to run, and nobody else (a user that only shares the prefix)."""
    import pwd

    from runner.drivers.cli import cleanup

    def user(name, home="/nonexistent", uid=990):
        return pwd.struct_passwd((name, "x", uid, uid, "", home, "/bin/sh"))
    monkeypatch.setattr(pwd, "getpwall", lambda: [user("plan-runner-agent"), user("plan-runner-agent-u1001-2"),
                                                 user("plan-runner-agent-x"), user("plan-runner-agentx"),
                                                 user("plan-runner-agent-3", home="/home/someone"),
                                                 user("alice", home="/home/alice", uid=1000)])
    assert cleanup.old_pool_users() == ["plan-runner-agent", "plan-runner-agent-u1001-2"]
    (line,) = cleanup.remove_old_pool_users()
    assert "plan-runner-agent, plan-runner-agent-u1001-2" in line and "sudo userdel" in line
    monkeypatch.setattr(pwd, "getpwall", lambda: [user("alice", home="/home/alice", uid=1000)])
    assert cleanup.remove_old_pool_users() == []


# What a Go module cache (folders 0555) and a build that drops its own rights (a folder 000) leave: in the agent's
# HOME and, under a path its clone ignores, in the clone itself.
LOCKED = ("sessions:\n  - - run: >-\n"
          "        echo build/ >> .git/info/exclude &&\n"
          "        mkdir -p build/mod/x \"$HOME/go/pkg/mod/y\" && touch build/mod/x/f \"$HOME/go/pkg/mod/y/g\" &&\n"
          "        chmod 555 build/mod/x \"$HOME/go/pkg/mod/y\" \"$HOME/go/pkg\" && chmod 000 build/mod\n"
          "    - write: {path: calc/wip.py, content: 'x = 1'}\n")


# Root reads and writes through any mode (CAP_DAC_OVERRIDE): only an ordinary user, as CI runs, meets the fault.
_AS_USER = pytest.mark.skipif(os.geteuid() == 0, reason="root is not refused by a folder's mode")


@_AS_USER
@pytest.mark.parametrize("command", ["reset", "clean"])
def test_folders_the_agent_made_unwritable_do_not_stop_reset_or_clean(tmp_path, command):
    """Before, `reset` and `clean` died on a PermissionError (rmtree cannot empty a 0555 folder, even its
    owner's), and the detached removals left such areas on disk for good."""
    repo = make_repo(tmp_path, "mul")
    (tmp_path / "mul.yaml").write_text(LOCKED)
    proc = cli(repo, "session", "plans/mul.md")
    assert proc.returncode == 0, proc.stderr
    area = area_for(repo, "mul").root
    locked = [p for p in (area / "work/build/mod", area / "home/go/pkg") if os.path.lexists(p)]
    assert locked, "the agent's unwritable folders are in its area"
    proc = cli(repo, command, "plans/mul.md")
    assert proc.returncode == 0, proc.stderr
    assert not os.path.lexists(area), list(area.rglob("*"))


@_AS_USER
def test_a_detached_removal_empties_folders_the_agent_made_unwritable(tmp_path):
    from runner.adapters.sandbox import agent_clone

    tree = tmp_path / "area"
    (tree / "a/b/c").mkdir(parents=True)
    (tree / "a/b/c/f").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "g").write_text("y")
    outside.chmod(0o555)
    (tree / "a/b/link").symlink_to(outside)
    (tree / "a/b/c").chmod(0)
    (tree / "a/b").chmod(0o555)
    agent_clone._remove_trees([tree], wait=True)
    assert not os.path.lexists(tree)
    assert outside.stat().st_mode & 0o777 == 0o555 and (outside / "g").read_text() == "y"  # no link followed
    outside.chmod(0o755)
