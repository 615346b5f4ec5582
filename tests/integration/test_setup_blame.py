"""Set-up is nobody's fault (issue 46): a required gate red on the base commit before the agent's first work is
GatesRed blamed on nobody (no attempt burned), with the base's failing line in the reasons; the next session is a
fix session shown the failure, and the same failure there is the agent's, so the circuit breaker parks the plan
with the failing line in the report. A plan that starts from a failing test (a bug to fix) is not parked for it.
The same gate red only after the agent's work is the agent's (GatesRed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability_world import PLAN, cli_env, git, ledger, script, write_calc_project

pytestmark = pytest.mark.integration

WORK = script([{"write": {"path": "calc/mul.py", "content": "def mul(a, b):\n    return a * b\n"}},
               {"commit": "Add mul"}, {"check": "1.1"}, {"commit": "Tick 1.1"}])


def _repo(tmp: Path, gate: str) -> Path:
    repo = tmp / "repo"
    write_calc_project(repo)
    (tmp / "agent.yaml").write_text(WORK)
    (repo / "plans" / "calc.md").write_text(PLAN.format(script=tmp / "agent.yaml", gate=gate, agent_extra="",
                                                         front_extra=""))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def _session(repo: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], cwd=repo,
                          env=cli_env(), capture_output=True, text=True, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def test_a_gate_red_on_the_base_commit_before_any_work_blames_nobody(tmp_path):
    """A gate that exits 1 on the base (its test runner is not installed: `No module named ...`): session 1 is
    GatesRed, blame none, no attempt burned, the base's failing line in the reasons, a fix session next (the same
    failure in that session is the agent's, and twice in a row the circuit breaker's: tests/unit/test_policy.py)."""
    repo = _repo(tmp_path, f"{sys.executable} -c 'import not_installed_test_runner_xyz'")
    out = _session(repo)
    assert (out["outcome"], out["blame"], out["rule"]) == ("GatesRed", "none", 8), out
    reasons = " ".join(out["reasons"])
    assert "red on a fresh checkout of the base commit" in reasons and "setup:" in reasons
    assert "No module named 'not_installed_test_runner_xyz'" in reasons
    assert out["next_action"]["kind"] == "fix-gates", out["next_action"]
    (record,) = [e for e in ledger(repo) if e["type"] == "session"]
    assert record["blame"] == "none"


def test_a_gate_green_on_the_base_and_red_after_the_work_is_the_agents(tmp_path):
    """The same kind of failure, but only after the agent's work (its code breaks the gate): GatesRed, on the
    agent."""
    gate = f"{sys.executable} -c 'import os, sys; sys.exit(os.path.exists(\"calc/mul.py\"))'"
    out = _session(_repo(tmp_path, gate))
    assert (out["outcome"], out["blame"]) == ("GatesRed", "agent"), out
