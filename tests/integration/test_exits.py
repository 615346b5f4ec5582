"""Exit codes: one module defines them, each meaning has its own code, docs/usage.md lists them all."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import runner.core.errors as errors
from runner.core.exits import Exit

ROOT = Path(__file__).resolve().parents[2]


def _error_classes() -> list[type[errors.PlanRunnerError]]:
    return [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.PlanRunnerError)]


def test_service_unavailable_does_not_look_like_parked():
    """A GitHub or model API outage exits with its own code, never 3 (a script would think a human is needed)."""
    assert errors.ServiceUnavailable("down").exit_code == Exit.SERVICE_UNAVAILABLE
    assert Exit.SERVICE_UNAVAILABLE != Exit.PARKED


def test_every_error_class_exits_with_a_code_of_the_exits_module():
    """Each user-facing error class's exit code is a member of `Exit` (no code defined anywhere else)."""
    codes = {c.__name__: c.exit_code for c in _error_classes()}
    assert codes["PlanRunnerError"] == Exit.USER_ERROR and codes["StateConflict"] == Exit.OK
    assert all(isinstance(code, Exit) for code in codes.values()), codes


def test_usage_documents_every_exit_code_and_no_other():
    """docs/usage.md's exit-code table has one row per `Exit` member, with its number."""
    readme = (ROOT / "docs" / "usage.md").read_text()
    table = readme.split("Exit codes", 1)[1].split("\n\n", 2)[1]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", table, re.M))
    assert sorted(int(code) for code in rows) == sorted(int(e) for e in Exit)
    assert "parked" in rows[str(int(Exit.PARKED))] and "unavailable" in rows[str(int(Exit.SERVICE_UNAVAILABLE))]


def test_cli_exits_with_user_error_code_for_a_broken_plan():
    """A real `plan-runner validate` on a broken plan exits with Exit.USER_ERROR and says what is wrong."""
    done = subprocess.run([sys.executable, "-m", "runner", "validate", str(ROOT / "tests/broken_plans/bad-branch.md")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == Exit.USER_ERROR, done.stderr
    assert "bad-branch.md" in done.stdout + done.stderr
