"""Through the real CLI on a real repository: the docs' own advice (fix the plan on the base
branch mid-run, then `reply retry`) used to leave a finish whose printed merge command conflicted on the plan
file and carried the handoff's answered `HUMAN:` line. Now the work branch's plan follows the base's (its ticks
kept) and the answered lines are gone: the printed command merges cleanly."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.e2e.test_first_hour import cli, make_repo
from tests.reliability_world import git

pytestmark = pytest.mark.e2e


def test_the_printed_merge_merges_cleanly_after_a_fix_on_the_base(tmp_path):
    repo = make_repo(tmp_path)
    parked = cli(repo, "run", "plans/calc.md")  # session 1 asks `HUMAN: should mul accept floats?`
    assert parked.returncode == 3, parked.stderr
    assert "HUMAN:" in git(repo, "show", "plan-runner/calc:plans/calc.handoff.md")

    # the maintainer fixes the plan on main mid-run (front matter and the stage's sessions), then retries
    plan = (repo / "plans" / "calc.md").read_text()
    fixed = plan.replace("max_sessions: 10", "max_sessions: 9").replace("<!-- sessions: 2 -->", "<!-- sessions: 3 -->")
    assert fixed != plan
    (repo / "plans" / "calc.md").write_text(fixed)
    git(repo, "commit", "-q", "-am", "plan: fix mid-run")
    assert cli(repo, "reply", "plans/calc.md", "retry", "floats", "are", "fine").returncode == 0
    done = cli(repo, "run", "plans/calc.md")
    assert done.returncode == 0, done.stderr

    (command,) = re.findall(r"^\s*(git switch \S+ && git merge --no-ff \S+)$", done.stderr, re.M)
    merged = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert git(repo, "status", "--porcelain") == ""
    result = (repo / "plans" / "calc.md").read_text()
    assert "max_sessions: 9" in result and "<!-- sessions: 3 -->" in result  # the base's fix
    assert "- [x] 1.1 Multiplication" in result  # the agent's tick
    assert "<<<<<<<" not in result
    handoff = repo / "plans" / "calc.handoff.md"
    assert not handoff.exists() or "HUMAN:" not in handoff.read_text()
    assert (repo / "calc" / "mul.py").exists() and (repo / "tests" / "test_mul.py").exists()  # the work merged
