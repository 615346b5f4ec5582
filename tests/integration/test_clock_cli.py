"""plan-runner's testing clock for a CLI subprocess (`PLAN_RUNNER_TEST_CLOCK`, runner/adapters/clock.py): a rate
limit's reset is dated on plan-runner's clock, a later run with the clock past it runs the next session, and
`plan-runner run` waits out a ten-minute reset in no time. Real CLI, real git, scripted sessions."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest

from runner.adapters import clock
from tests.integration.test_session_local import MUL, make_repo, session
from tests.reliability_world import ledger

pytestmark = pytest.mark.integration

DIV = "{path: calc/div.py, content: \"def div(a, b):\\n    return a / b\\n\"}"

LIMIT_THEN_WORK = f"""
    sessions:
      - - rate_limit: {{reset_in: 600}}
      - - write: {MUL}
        - commit: "Add mul"
        - check: "1.1"
        - commit: "Tick 1.1"
      - - write: {DIV}
        - commit: "Add div"
        - check: "1.2"
        - commit: "Tick 1.2"
      - - write: {{path: README.md, content: "calc\\n"}}
        - commit: "README"
        - check: "2.1"
        - commit: "Tick 2.1"
    """


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != clock.ENV}
    return {**env, **extra}


def test_a_session_after_the_reset_on_the_testing_clock_runs_the_next_session(tmp_path):
    """The reset is dated on the CLI's clock (ten minutes on); a run before it runs nothing; a run whose clock is
    eleven minutes on runs the next session, and the ledger's times are that clock's."""
    repo = make_repo(tmp_path, LIMIT_THEN_WORK)
    _, out, _ = session(repo, env=_env())
    assert out["outcome"] == "LimitBackoff", out
    until = datetime.fromisoformat(out["next_action"]["until"])
    assert timedelta(minutes=9) < until - clock.REAL.now() <= timedelta(minutes=10, seconds=5), until
    code, again, _ = session(repo, env=_env())
    assert code == 0 and again["status"] == "waiting" and again["outcome"] is None, again
    code, later, err = session(repo, env=_env(**{clock.ENV: "+11m"}))
    assert code == 0 and later["outcome"] == "Advanced", (later, err[-2000:])
    started = [e for e in ledger(repo) if e["type"] == "session"][-1]["started_at"]
    assert datetime.fromisoformat(started) > until, (started, until)  # recorded on the moved clock


def test_plan_runner_run_waits_out_a_ten_minute_reset_in_no_time_on_the_testing_clock(tmp_path):
    """`plan-runner run` sleeps until a reset on plan-runner's clock: on the testing clock the wait moves the clock
    instead, so the plan finishes in seconds, its later sessions dated after the reset."""
    repo = make_repo(tmp_path, LIMIT_THEN_WORK)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runner", "run", "plans/calc.md", "--max-wait", "900"], cwd=repo,
                          capture_output=True, text=True, env=_env(**{clock.ENV: "+0s"}), timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert time.monotonic() - started < 100, "the wait was slept, not moved"
    sessions = [e for e in ledger(repo) if e["type"] == "session"]
    assert [s["outcome"] for s in sessions] == ["LimitBackoff", "Advanced", "Advanced", "Advanced"], sessions
    until = datetime.fromisoformat(sessions[0]["next_action"]["until"])
    assert datetime.fromisoformat(sessions[1]["started_at"]) >= until


def test_a_testing_clock_that_names_no_time_is_a_clear_error(tmp_path):
    repo = make_repo(tmp_path, LIMIT_THEN_WORK)
    proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md"], cwd=repo,
                          capture_output=True, text=True, env=_env(**{clock.ENV: "soon"}), timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"{clock.ENV}='soon' names no time" in proc.stderr and "fix:" in proc.stderr
