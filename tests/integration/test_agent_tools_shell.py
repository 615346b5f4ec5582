"""The built-in agent's shell tool against commands that leave processes behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from runner.backends.anthropic.tools import OUTPUT_LIMIT, Workspace


def _kill_escaped(pid_file: Path) -> None:
    deadline = time.monotonic() + 5
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_shell_returns_within_timeout_when_a_grandchild_escapes_holding_stdout(tmp_path: Path) -> None:
    """A command whose grandchild escapes with setsid and holds stdout returns within timeout + 2 s, and the output before the timeout is kept."""
    pid_file = tmp_path / "escaped.pid"
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"]}, shell_timeout_s=300)
    command = f"echo before; setsid sh -c 'echo $$ > {pid_file}; exec sleep 20' & sleep 20"
    try:
        t0 = time.monotonic()
        outcome = ws.run("run_shell", {"command": command, "timeout_s": 1})
        elapsed = time.monotonic() - t0
    finally:
        _kill_escaped(pid_file)
    assert elapsed < 1 + 2, f"took {elapsed:.1f}s against a 1s timeout"
    assert not outcome.ok
    assert outcome.text.startswith("killed after 1s (timeout)\n") and "before" in outcome.text


def test_shell_that_exits_leaving_an_escaped_writer_returns_its_exit_code(tmp_path: Path) -> None:
    """A command that exits at once but leaves an escaped grandchild writing to stdout returns promptly with its exit code and bounded output."""
    pid_file = tmp_path / "escaped.pid"
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"]}, shell_timeout_s=300)
    command = f"echo first; setsid sh -c 'echo $$ > {pid_file}; exec yes' & exit 4"
    try:
        t0 = time.monotonic()
        outcome = ws.run("run_shell", {"command": command, "timeout_s": 5})
        elapsed = time.monotonic() - t0
    finally:
        _kill_escaped(pid_file)
    assert elapsed < 5
    assert not outcome.ok and outcome.text.startswith("exit code 4\nfirst\n")
    assert "omitted" in outcome.text and len(outcome.text.encode()) < OUTPUT_LIMIT + 100
