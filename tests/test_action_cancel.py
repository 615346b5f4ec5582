"""A cancelled or timed-out job: the runner's stop signal reaches plan-runner, which pushes the agent's work
first, then writes the summary and outputs; the next tick reconciles the session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from runner.core.ledger import Dispatched
from runner.adapters.state import GitStateStore, ledger_text
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.test_action_refusals import ONE_STEP_PLAN

pytestmark = pytest.mark.integration
PLAN = "plans/greeter.md"
SLOW_SCRIPT = f"""
sessions:
  - id: s-slow
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_1}"}}
      - commit: "greet says hello"
      - write: {{path: notes.txt, content: "not committed yet"}}
      - sleep: 60
"""


@pytest.mark.parametrize("signum,dispatched", [(signal.SIGTERM, False), (signal.SIGINT, False),
                                               (signal.SIGTERM, True)])
def test_the_stop_signal_pushes_the_session_first_then_writes_summary_and_outputs(tmp_path: Path, signum: int,
                                                                                   dispatched: bool) -> None:
    """SIGTERM or SIGINT mid-session: the agent is stopped, its commits and leftovers are pushed to the session
    ref, the outputs say `cancelled` and the summary says where the work is; the exit code is 128 + signal.
    `dispatched`: the remote holds the intent that dispatched the session, so its start was written locally only;
    the stop signal pushes it after the session ref, and the next tick finds the session as usual."""
    with GitHubServer() as srv:
        bare = w.make_remote(tmp_path, {PLAN: ONE_STEP_PLAN, "plans/greeter.script.yaml": SLOW_SCRIPT})
        srv.branches = w.BareBranches(bare)
        if dispatched:
            seed = w.checkout(bare, tmp_path / "seed-state")
            GitStateStore(seed, remote="origin").append(
                "greeter", [Dispatched(at=datetime.now(timezone.utc), for_session=1, key="greeter#1")], None)
        ws = w.checkout(bare, tmp_path / "job")
        env = {**w.job_env(srv, ws, tmp_path / "runner", "workflow_dispatch", w.dispatch_event(PLAN)),
               "PLAN_RUNNER_MODE": "session", "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
               "GIT_CONFIG_GLOBAL": os.devnull}
        proc = subprocess.Popen([sys.executable, "-P", "-m", "runner", "action"], env=env, cwd=ws,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while not (ws / "notes.txt").exists():  # the agent is sleeping after its commit
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum, out
        outputs = w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
        summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
        assert outputs["outcome"] == "cancelled"
        assert "refs/plan-runner/sessions/greeter/1" in summary
        log = subprocess.run(["git", "log", "--format=%s", "refs/plan-runner/sessions/greeter/1"], cwd=bare,
                             capture_output=True, text=True, check=True).stdout
        assert "greet says hello" in log and "WIP" in log.splitlines()[0]
        shown = subprocess.run(["git", "show", "refs/plan-runner/sessions/greeter/1:notes.txt"], cwd=bare,
                               capture_output=True, text=True, check=True).stdout
        assert shown == "not committed yet"
        kinds = [json.loads(line)["type"] for line in ledger_text(bare, "refs/plan-runner/state/greeter").splitlines()]
        assert kinds == (["dispatch", "started"] if dispatched else ["started"]), kinds
