"""Issue 48, item 2: no blank minute. On a terminal, `plan-runner run`'s preflight shows a live line (what runs,
its elapsed time) while it checks out the base and runs each `setup:` command, and a line per finished step;
off a terminal it prints nothing new. A failing `setup:` command's last lines are in the preflight's error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.test_first_hour import cli, git, make_repo
from tests.e2e.test_terminal_screen import SLOW_AGENT, run_in_pty, screen

pytestmark = pytest.mark.integration


def _with_setup(tmp_path, commands: list[str]):
    agent = tmp_path / "slow.sh"
    agent.write_text(SLOW_AGENT)
    agent.chmod(0o755)
    repo = make_repo(tmp_path, agent_extra=f"executable: {agent}")
    plan = repo / "plans" / "calc.md"
    listed = ", ".join(f'"{c}"' for c in commands)
    plan.write_text(plan.read_text().replace("gates:\n", f"setup:\n  run: [{listed}]\ngates:\n", 1))
    git(repo, "commit", "-q", "-am", "set-up")
    return repo


def test_the_preflight_shows_each_setup_command_live_on_a_terminal(tmp_path):
    repo = _with_setup(tmp_path, ["sleep 3", "true"])
    code, raw = run_in_pty([sys.executable, "-m", "runner", "run", "plans/calc.md"], repo)
    shown = screen(raw)
    text = "\n".join(shown)
    assert code == 3, text
    assert "preflight: a fresh checkout of the base commit · " in raw  # the live line, before any set-up
    assert "preflight: setup: sleep 3 · 2s" in raw, raw[-3000:]  # redrawn while the command runs
    assert "  preflight: setup: sleep 3 (3s)" in shown, text  # a line for the finished step
    assert not [line for line in shown if " · " in line and line.lstrip().startswith("preflight")], text


def test_off_a_terminal_the_preflight_prints_nothing_new(tmp_path):
    repo = _with_setup(tmp_path, ["true"])
    proc = cli(repo, "run", "plans/calc.md")
    assert proc.returncode == 3, proc.stderr
    assert "preflight" not in proc.stdout + proc.stderr


def test_a_failing_setup_command_shows_its_last_lines(tmp_path):
    repo = _with_setup(tmp_path, ["sh -c 'echo building; echo \\\"error: no module named frobnicate\\\" >&2; exit 3'"])
    proc = cli(repo, "run", "plans/calc.md")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert "`setup:` fails on a fresh checkout of the base commit" in err, err
    assert "| error: no module named frobnicate" in err and "| building" in err, err
    assert "nothing was run or recorded" in err
    assert subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", "refs/plan-runner/state/calc"],
                          capture_output=True).returncode != 0  # nothing recorded
