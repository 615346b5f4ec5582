"""Local runs in a workspace of plan-runner's own (issue 20): the user's HEAD, branch, index and work tree are
never read or written; the work branch moves as a ref, forward only, never under a work tree that has it checked
out; different plans run at once in one repository. Through the real CLI, a scripted agent and real git."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner.adapters.store.state import ledger_text
from tests.reliability_world import git, write_calc_project

pytestmark = pytest.mark.integration

PLAN_RUNNER = str(Path(sys.executable).parent / "plan-runner")

PLAN = """\
---
agent:
  backend: script
  script: {script}
  stall_minutes: 1.5s
  time_limit_minutes: 30s
  session_tokens: 10000
gates:
  - name: tests
    run: {python} -m unittest discover -s tests -q
budget:
  max_sessions: 6
---
# {name}

## Stage 1: Work <!-- sessions: 2 -->
- [ ] 1.1 {name}
"""


def _work(name: str, sleep: float = 0.0) -> str:
    """One session that adds `calc/<name>.py` with its test and ticks 1.1 (after `sleep` seconds)."""
    module = f"def {name}():\\n    return 1\\n"
    test = f"import unittest\\nfrom calc.{name} import {name}\\n\\n\\nclass T(unittest.TestCase):\\n    def test(self):\\n        self.assertEqual({name}(), 1)\\n"
    return textwrap.dedent(f"""\
        sessions:
          - - sleep: {sleep}
            - write: {{path: calc/{name}.py, content: "{module}"}}
            - write: {{path: tests/test_{name}.py, content: "{test}"}}
            - commit: "Add {name}"
            - check: "1.1"
            - commit: "Tick 1.1"
        """)


def add_plan(repo: Path, tmp: Path, name: str, sleep: float = 0.0, commit: bool = True) -> None:
    script = tmp / f"{name}.yaml"
    script.write_text(_work(name, sleep))
    (repo / "plans").mkdir(exist_ok=True)
    (repo / "plans" / f"{name}.md").write_text(PLAN.format(script=script, python=sys.executable, name=name))
    if commit:
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"Add plan {name}")


def make_repo(tmp: Path, *names: str, sleep: float = 0.0) -> Path:
    repo = tmp / "repo"
    write_calc_project(repo)
    git(repo, "init", "-q", "-b", "main")
    for name in names:
        add_plan(repo, tmp, name, sleep, commit=False)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def cli(repo: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    proc = subprocess.run([PLAN_RUNNER, *args], cwd=repo, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def ledger(repo: Path, plan: str) -> list[dict]:
    return [json.loads(x) for x in ledger_text(repo, f"refs/plan-runner/state/{plan}").splitlines()]


def user_view(repo: Path) -> dict:
    """Everything of the user's that plan-runner must leave alone."""
    return {"branch": git(repo, "symbolic-ref", "--quiet", "HEAD", check=False),
            "head": git(repo, "rev-parse", "HEAD"), "index": git(repo, "ls-files", "--stage"),
            "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
            "branches": [line for line in git(repo, "for-each-ref", "refs/heads/").splitlines()
                         if "refs/heads/plan-runner/" not in line]}


def test_user_switching_branch_and_editing_during_a_session_is_left_alone(tmp_path):
    """The user switches branch, stages a file and breaks calc/add in their work tree while the agent works:
    none of it is committed or judged (the verdict is the agent's: Advanced, gates green on its work), and
    their HEAD, branch, index and work tree are exactly as they left them."""
    repo = make_repo(tmp_path, "mul", sleep=4)
    git(repo, "switch", "-q", "-c", "feature")
    git(repo, "commit", "-q", "--allow-empty", "-m", "my feature")
    git(repo, "switch", "-q", "main")
    proc = subprocess.Popen([PLAN_RUNNER, "session", "plans/mul.md", "--json"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not git(repo, "rev-parse", "--verify", "--quiet", "refs/plan-runner/state/mul", check=False):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    # The session has started: the user goes on with their own work.
    git(repo, "switch", "-q", "feature")
    (repo / "notes.txt").write_text("staged by me\n")
    git(repo, "add", "notes.txt")
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a - b  # my experiment\n")
    (repo / "scratch.txt").write_text("untracked\n")
    before = user_view(repo)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "Traceback" not in err, err
    result = json.loads(out)
    assert result["outcome"] == "Advanced" and result["gates"][0]["passed"], result
    assert user_view(repo) == before
    assert (repo / "calc" / "__init__.py").read_text().endswith("# my experiment\n")
    assert git(repo, "log", "--format=%s", "feature") == "my feature\ninit"
    work = git(repo, "log", "--format=%s", "plan-runner/mul")
    assert work.splitlines()[:2] == ["Tick 1.1", "Add mul"] and "WIP" not in work
    assert git(repo, "show", "plan-runner/mul:calc/__init__.py") == "def add(a, b):\n    return a + b"
    assert git(repo, "show", "plan-runner/mul:notes.txt", check=False) == ""


def test_two_plans_run_at_once_in_one_repository_and_both_finish(tmp_path):
    """Two `run`s of different plans at the same time: both finish, each session Advanced, no false GatesRed
    and no false tampering; each work branch holds its own plan's work only; the user's side is untouched."""
    repo = make_repo(tmp_path, "one", "two", sleep=1.5)
    (repo / "mine.txt").write_text("uncommitted\n")
    before = user_view(repo)
    procs = [subprocess.Popen([PLAN_RUNNER, "run", f"plans/{name}.md"], cwd=repo, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for name in ("one", "two")]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0 and "Traceback" not in err, err
    for name, other in (("one", "two"), ("two", "one")):
        sessions = [e for e in ledger(repo, name) if e["type"] == "session"]
        assert [s["outcome"] for s in sessions] == ["Advanced"], sessions
        assert not any("rewritten" in r or "tamper" in r for s in sessions for r in s["reasons"])
        files = git(repo, "ls-tree", "-r", "--name-only", f"plan-runner/{name}").split()
        assert f"calc/{name}.py" in files and f"calc/{other}.py" not in files
    assert user_view(repo) == before


def test_a_user_on_a_finished_work_branch_starts_a_new_plan(tmp_path):
    """plan-runner never leaves the user on a work branch. A user who checks a finished one out and commits
    the next plan there is told it is not on its base branch (no session, no park blaming an agent); once it is
    committed on main, the plan runs to the end while they stay on the finished branch."""
    repo = make_repo(tmp_path, "first")
    proc = cli(repo, "run", "plans/first.md")
    assert proc.returncode == 0, proc.stderr
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main" and git(repo, "status", "--porcelain") == ""
    git(repo, "switch", "-q", "plan-runner/first")  # the user looks at the result
    add_plan(repo, tmp_path, "second")  # ... and commits the next plan on the work branch
    proc = cli(repo, "run", "plans/second.md")
    assert proc.returncode == 2, proc.stderr
    assert "not committed on the base branch 'main'" in proc.stderr and "fix" in proc.stderr.lower()
    assert not git(repo, "rev-parse", "--verify", "--quiet", "refs/plan-runner/state/second", check=False)
    assert not git(repo, "rev-parse", "--verify", "--quiet", "refs/heads/plan-runner/second", check=False)
    # The fix: the plan on main (here by a merge of the finished work, as the finish message says).
    git(repo, "switch", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "plan-runner/first")
    git(repo, "switch", "-q", "plan-runner/first")
    proc = cli(repo, "run", "plans/second.md")
    assert proc.returncode == 0, proc.stderr
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/plan-runner/first"
    assert "calc/second.py" in git(repo, "ls-tree", "-r", "--name-only", "plan-runner/second")


def test_a_work_branch_checked_out_by_the_user_is_never_moved_under_them(tmp_path):
    """The work branch checked out in the user's work tree, or in a linked one of theirs: the next session
    refuses with what/why/fix before it starts, and the branch and their files stay as they are."""
    repo = make_repo(tmp_path, "mul")
    (tmp_path / "mul.yaml").write_text("sessions:\n  - - write: {path: calc/wip.py, content: 'x = 1'}\n")
    proc = cli(repo, "session", "plans/mul.md")
    assert proc.returncode == 0, proc.stderr
    head, entries = git(repo, "rev-parse", "plan-runner/mul"), len(ledger(repo, "mul"))
    for where in (repo, tmp_path / "mine"):
        if where == repo:
            git(repo, "switch", "-q", "plan-runner/mul")
        else:
            git(repo, "switch", "-q", "main")
            git(repo, "worktree", "add", "-q", str(where), "plan-runner/mul")
        proc = cli(repo, "session", "plans/mul.md")
        assert proc.returncode == 2 and "is checked out in" in proc.stderr, proc.stderr
        assert str(where) in proc.stderr and "switch" in proc.stderr
        assert len(ledger(repo, "mul")) == entries, "no session started"
        assert git(repo, "rev-parse", "plan-runner/mul") == head
        assert git(where, "status", "--porcelain") == ""
