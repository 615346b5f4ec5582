"""Issue 48, item 3: the local park report, read in a terminal, was GitHub-escaped Markdown
(`plan\\-runner parked calc\\:`). Through the real CLI: `plan-runner session` that parks prints the report as
plain text, as `run` does; the file it names stays Markdown, its untrusted text escaped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_first_hour import cli, make_repo

pytestmark = pytest.mark.integration


def test_a_parked_session_prints_its_report_as_plain_text(tmp_path):
    repo = make_repo(tmp_path)
    done = cli(repo, "session", "plans/calc.md")
    assert done.returncode == 3, done.stdout + done.stderr
    shown = done.stdout
    assert "plan-runner parked calc: the session needs a human" in shown, shown
    assert "\\-" not in shown and "\\:" not in shown and "<!--" not in shown and "**" not in shown
    report = next(line for line in done.stderr.splitlines() if line.startswith("report: "))[len("report: "):]
    assert "plan\\-runner parked calc\\:" in Path(report).read_text()  # the file: Markdown, escaped
