"""A crash of plan-runner has its own outcome (issue 46): an unexpected error of plan-runner's mid-session is
recorded `Crashed`, with the error and where to report it, apart from `Interrupted` (a Ctrl-C, SIGTERM or a
failure plan-runner names); no blame, nothing burned, and the next run does the same session again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner.core.outcome import CRASH_REPORT_URL
from tests.reliability_world import PLAN, cli_env, git, ledger, script, write_calc_project

pytestmark = pytest.mark.integration

STEPS = [{"write": {"path": "calc/mul.py", "content": "def mul(a, b):\n    return a * b\n"}},
         {"commit": "Add mul"}, {"check": "1.1"}, {"commit": "Tick 1.1"}]


def _session(repo: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], cwd=repo,
                          env=cli_env(**env), capture_output=True, text=True, timeout=240)


def test_a_crash_of_plan_runner_is_recorded_crashed_and_the_session_runs_again(tmp_path):
    """An unexpected exception after the agent's work (a fault injected as a bug would be): the session is
    recorded Crashed, blame none, with the error and the report URL; the next run repeats it (the agent's work,
    salvaged, is judged), the stage's attempts untouched."""
    repo = tmp_path / "repo"
    write_calc_project(repo)
    (tmp_path / "agent.yaml").write_text(script(STEPS, STEPS))  # the same work, in the session run again
    (repo / "plans" / "calc.md").write_text(PLAN.format(script=tmp_path / "agent.yaml", agent_extra="", front_extra="",
                                                         gate=f"{sys.executable} -m unittest discover -s tests -q"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")

    crashed = _session(repo, PLAN_RUNNER_FAULT="after-agent:raise")
    assert crashed.returncode not in (0, 3, 130), crashed.stderr
    assert "Traceback" not in crashed.stderr and "fault injected at after-agent" in crashed.stderr
    (record,) = [e for e in ledger(repo) if e["type"] == "session"]
    assert (record["outcome"], record["blame"], record["rule"]) == ("Crashed", "none", 0)
    assert "RuntimeError: fault injected at after-agent" in record["reasons"][0]
    assert CRASH_REPORT_URL in record["reasons"][0] and "Interrupted" not in record["reasons"][0]

    again = _session(repo)
    out = json.loads(again.stdout)
    assert out["outcome"] in ("Advanced", "Progress") and out["blame"] == "none", out  # the salvaged work judged
    sessions = [e for e in ledger(repo) if e["type"] == "session"]
    assert [s["outcome"] for s in sessions] == ["Crashed", out["outcome"]]
    assert sessions[1]["checkpoint"] == sessions[0]["checkpoint"] == "1.1"
    assert out["attempts"]["1"]["used"] == 0
