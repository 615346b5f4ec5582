"""The README's first command: `plan-runner demo` runs a whole plan offline and shows every kind of session."""

from __future__ import annotations

import subprocess
import sys


def test_the_demo_runs_its_plan_to_the_end(tmp_path):
    """The demo finishes its plan (exit 0), and on the way meets what the README promises: a red gate and its
    fix, a rate limit waited out, a rollover with a handoff, a claim with nothing behind it, a stall resumed,
    a crash fixed."""
    proc = subprocess.run([sys.executable, "-m", "runner", "demo", "--dir", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "Traceback" not in text
    for outcome in ("GatesRed", "LimitBackoff", "RolledOver", "NoProgress", "Stalled", "AgentError"):
        assert outcome in text, outcome
    assert "finished: every checkpoint is done" in text
    assert list(tmp_path.glob("*/.git/plan-runner/reports/*-finished.md")), "the finished plan's report"
