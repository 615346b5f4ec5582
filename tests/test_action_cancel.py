"""A cancelled or timed-out job: the runner's stop signal reaches plan-runner, which pushes the agent's work
first, then writes the summary and outputs; the next tick reconciles the session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from runner.core.ledger import Dispatched
from runner.adapters.store.state import GitStateStore, ledger_text
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
# The stop comes while a gate runs, as the sandbox user, a test that ignores SIGTERM (the agent wrote it).
STUBBORN_TEST = ("import signal, time, unittest\\n\\n\\nclass T(unittest.TestCase):\\n"
                 "    def test_slow(self):\\n        signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                 "        print('gate up', flush=True)\\n        time.sleep(60)\\n")
GATE_SCRIPT = f"""
sessions:
  - id: s-gate
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_1}"}}
      - write: {{path: test_slow.py, content: "{STUBBORN_TEST}"}}
      - commit: "greet says hello"
      - write: {{path: notes.txt, content: "not committed yet"}}
"""


def _wait_for(proc: subprocess.Popen, line_says: str, times: int) -> tuple[list[str], threading.Thread]:
    """Wait until the job's output has said `line_says` `times` times. The list returned keeps filling with
    the rest of the output (read to the end, so the job never blocks on a full pipe)."""
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if sum(line_says in s for s in seen) >= times:
                found.set()
        found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert found.wait(60) and sum(line_says in s for s in seen) >= times, "".join(seen)
    return seen, reader


@pytest.mark.parametrize("signum,dispatched,during", [(signal.SIGTERM, False, "agent"), (signal.SIGINT, False, "agent"),
                                                      (signal.SIGTERM, True, "agent"), (signal.SIGTERM, True, "gates")])
def test_the_stop_signal_pushes_the_session_first_then_writes_summary_and_outputs(tmp_path: Path, signum: int,
                                                                                   dispatched: bool,
                                                                                   during: str) -> None:
    """SIGTERM or SIGINT mid-session: the agent (or the gate) is stopped, the agent's commits and leftovers are
    pushed to the session ref, the outputs say `cancelled` and the summary says where the work is; the exit code
    is 128 + signal. `dispatched`: the remote holds the intent that dispatched the session, so its start was
    written locally only; the stop signal pushes it after the session ref, and the next tick finds the session
    as usual. `during`: the agent sleeping after its commit, or a gate (as the sandbox user) ignoring SIGTERM."""
    script = SLOW_SCRIPT if during == "agent" else GATE_SCRIPT
    with GitHubServer() as srv:
        bare = w.make_remote(tmp_path, {PLAN: ONE_STEP_PLAN, "plans/greeter.script.yaml": script})
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
        started = time.monotonic()
        if during == "agent":
            seen, reader = _wait_for(proc, "plan-runner tool: write", 2)  # the agent wrote its leftover and sleeps
            time.sleep(0.5)
        else:
            seen, reader = _wait_for(proc, "plan-runner gate: start tests", 1)
            time.sleep(1.0)  # the test is up and ignores SIGTERM
        assert proc.poll() is None, "".join(seen)
        proc.send_signal(signum)
        rc = proc.wait(timeout=30)
        reader.join(10)  # the last lines
        assert proc.stdout is not None
        proc.stdout.close()
        out = "".join(seen)
        assert rc == 128 + signum, out
        assert time.monotonic() - started < 30  # stopped mid-way: neither the sleep (60 s) nor the time limit (40 s)
        if during == "agent":  # the agent was still running when the stop came: it reached no end of its own
            assert "plan-runner agent:" not in out and "plan-runner gate:" not in out, out
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
