"""Issue 48, item 5: `plan-runner logs PLAN [N]` showed a command agent's every session in one undivided file.
Through the real CLI: two sessions of a command agent (the first asks a human, the reply retries, the second
finishes); `logs PLAN 1` shows only the first's output and `logs PLAN` (the last) only the second's; an ANSI
sequence the agent printed is shown as text, never sent to the terminal."""

from __future__ import annotations

import pytest

from tests.e2e.test_first_hour import AGENT, cli, make_repo

pytestmark = pytest.mark.integration


def test_logs_shows_the_session_asked_for_and_no_other(tmp_path):
    agent = tmp_path / "agent.sh"
    agent.write_text(AGENT.format(dump=tmp_path / "env", tmp=tmp_path).replace(
        'echo "Done."', "printf 'Done \\033[31mred\\033[0m.\\n'"))
    agent.chmod(0o755)
    repo = make_repo(tmp_path, agent_extra=f"executable: {agent}")
    assert cli(repo, "run", "plans/calc.md").returncode == 3  # session 1 asks a human
    assert cli(repo, "reply", "plans/calc.md", "retry", "floats too").returncode == 0
    finished = cli(repo, "run", "plans/calc.md")
    assert finished.returncode == 0, finished.stderr
    first = cli(repo, "logs", "plans/calc.md", "1")
    assert first.returncode == 0, first.stderr
    assert "I need a human" in first.stdout and "Done" not in first.stdout, first.stdout
    assert "(this session)" in first.stdout
    last = cli(repo, "logs", "plans/calc.md")
    assert "Done red." in last.stdout and "I need a human" not in last.stdout, last.stdout
    assert "\x1b" not in last.stdout
