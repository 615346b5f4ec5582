"""A session cut short keeps the agent's work (issue 20, item 2), through the real CLI: the agent commits,
then plan-runner is stopped (Ctrl-C, SIGTERM); its commit, and what it left uncommitted, are on the work
branch, on the remote too where there is one, and the session is recorded Interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent_helpers import interruptible
from tests.reliability_world import git, ledger
from tests.e2e.test_first_hour import AGENT_IDENTITY, ROOT, make_repo

pytestmark = pytest.mark.integration

# Commits, leaves a file uncommitted, says so outside the repository, then waits to be stopped.
AGENT = """\
#!/bin/sh
printf 'def mul(a, b):\\n    return a * b\\n' > calc/mul.py
git add calc/mul.py && git commit -q -m 'Add mul'
git rev-parse HEAD > {out}/sha
printf 'half done\\n' > calc/notes.txt
echo waiting > {out}/working
sleep 60
"""


def _started(tmp_path: Path, repo: Path, *args: str) -> subprocess.Popen:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    e.update(PYTHONPATH=str(ROOT), **AGENT_IDENTITY)
    proc = subprocess.Popen([sys.executable, "-m", "runner", *args, "plans/calc.md"], cwd=repo, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while not (tmp_path / "working").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the agent never reached its wait"
        time.sleep(0.05)
    return proc


def _repo(tmp_path: Path, *, remote: bool) -> Path:
    agent = tmp_path / "agent.sh"
    agent.write_text(AGENT.format(out=tmp_path))
    agent.chmod(0o755)
    repo = make_repo(tmp_path, agent_extra=f"executable: {agent}")
    if remote:
        bare = tmp_path / "origin.git"
        git(tmp_path, "init", "-q", "--bare", str(bare))
        git(repo, "remote", "add", "origin", str(bare))
        git(repo, "push", "-q", "origin", "main")
    return repo


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "ctrl-c-with-remote"])
def test_an_interrupted_agents_commit_and_leftovers_are_on_the_work_branch(tmp_path, how):
    repo = _repo(tmp_path, remote=how.endswith("remote"))
    proc = _started(tmp_path, repo, "run")
    proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode in (130, 143), stderr
    sha = (tmp_path / "sha").read_text().strip()
    for where in [repo] + ([tmp_path / "origin.git"] if how.endswith("remote") else []):
        ok = subprocess.run(["git", "merge-base", "--is-ancestor", sha, "refs/heads/plan-runner/calc"], cwd=where)
        assert ok.returncode == 0, f"the agent's commit {sha[:12]} is not on the work branch in {where}"
        assert git(where, "show", "plan-runner/calc:calc/notes.txt") == "half done"
        assert "Plan-Runner-WIP: true" in git(where, "log", "-1", "--format=%B", "plan-runner/calc")
    records = [x for x in ledger(repo) if x["type"] == "session"]
    assert [(r["outcome"], r["blame"]) for r in records] == [("Interrupted", "none")]
    assert "was saved on plan-runner/calc" in records[0]["reasons"][0]
    assert git(repo, "status", "--porcelain") == "", "nothing was committed or left in the user's work tree"
    if how != "sigterm":  # what the person who pressed Ctrl-C reads: the work is kept, and how to go on
        assert "The work is kept" in stderr and "continue: plan-runner run plans/calc.md" in stderr, stderr


def test_a_second_run_of_the_same_plan_refuses_with_what_why_fix(tmp_path):
    """While `run` works on a plan, a second `run` of it in the same repository refuses at once (exit 2,
    what/why/fix naming the first one's process) and changes nothing; the first one is undisturbed."""
    repo = _repo(tmp_path, remote=False)
    first = _started(tmp_path, repo, "run")
    try:
        e = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
        e.update(PYTHONPATH=str(ROOT), **AGENT_IDENTITY)
        before = ledger(repo)
        second = subprocess.run([sys.executable, "-m", "runner", "run", "plans/calc.md"], cwd=repo, env=e,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert "already running" in second.stderr and f"process {first.pid}" in second.stderr
        assert "fix:" in second.stderr and "Traceback" not in second.stderr
        assert ledger(repo) == before and first.poll() is None
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert [x["outcome"] for x in ledger(repo) if x["type"] == "session"] == ["Interrupted"]
