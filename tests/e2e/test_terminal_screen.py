"""What a person sees on a real terminal: `plan-runner run` in a pseudo-terminal, its bytes replayed
through a small terminal model (carriage return, erase line, wrapping), then the screen read back."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.e2e.test_first_hour import AGENT_IDENTITY, make_repo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 100
SLOW_AGENT = """\
#!/bin/sh
sleep 3
printf 'def mul(a, b):\\n    return a * b\\n' > calc/mul.py
git add calc/mul.py && git commit -q -m 'Add mul'
printf 'HUMAN: floats?\\n' > plans/calc.handoff.md
git add plans/calc.handoff.md && git commit -q -m 'Ask'
"""
_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(\x07|\x1b\\)")


def screen(data: str, width: int = WIDTH) -> list[str]:
    """The lines a terminal `width` columns wide shows after `data` (all of them: scrollback included)."""
    data = _OSC.sub("", data)
    lines: list[list[str]] = [[]]
    col = 0
    i = 0
    while i < len(data):
        m = _CSI.match(data, i)
        if m:
            params, final = m.groups()
            if final == "K":  # erase in line: 2 = whole line, 0/empty = to the end
                if params == "2":
                    lines[-1] = []
                else:
                    del lines[-1][col:]
            elif final == "G":  # cursor to column
                col = max(0, int(params or 1) - 1)
            i = m.end()
            continue
        ch = data[i]
        i += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append([])
            col = 0
        elif ch == "\b":
            col = max(0, col - 1)
        elif ch == "\x1b" or ord(ch) < 32:
            continue
        else:
            if col >= width:  # auto-wrap
                lines.append([])
                col = 0
            line = lines[-1]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    return ["".join(line).rstrip() for line in lines]


def run_in_pty(args: list[str], cwd: Path, timeout: float = 120) -> tuple[int, str]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, WIDTH, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", COLUMNS=str(WIDTH), LINES="40", **AGENT_IDENTITY)
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(args, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    code = proc.wait(timeout=30)
    os.close(master)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def test_screen_model_erases_and_overwrites_like_a_terminal():
    """The terminal model: a carriage return and an erase-line leave only what was written after them."""
    assert screen("⠋ status text\r\x1b[2Ksession 1: Advanced\n⠙ status") == ["session 1: Advanced", "⠙ status"]
    assert screen("abc\rX\n") == ["Xbc", ""]


def test_live_progress_never_shares_a_line_with_event_lines(tmp_path):
    """On a terminal, `plan-runner run` shows each event on a line of its own; the status line (spinner,
    elapsed, tokens, last tool) is erased before every event and gone at the end; the park report has no
    HTML or Markdown markers."""
    agent = tmp_path / "slow.sh"
    agent.write_text(SLOW_AGENT)
    agent.chmod(0o755)
    repo = make_repo(tmp_path, agent_extra=f"executable: {agent}")
    code, raw = run_in_pty([sys.executable, "-m", "runner", "run", "plans/calc.md"], repo)
    shown = screen(raw)
    text = "\n".join(shown)
    assert code == 3, text
    assert "last tool" in raw  # the status line was drawn while the agent worked...
    assert not [line for line in shown if "last tool" in line], text  # ...and never left on screen
    for expected in ("session 1 delivery 1.1", "  gate start tests", "  gate finish tests",
                     "session 1: NeedsHuman (blame none) → parked: the session needs a human"):
        assert expected in shown, (expected, text)
    assert not any(line.startswith(("⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏")) for line in shown), text
    assert "<details>" not in text and "<!--" not in text and "**" not in text
    assert "parked: parked" not in text
    assert any(line.startswith("answer it here: plan-runner reply plans/calc.md") for line in shown), text


def test_the_status_line_keeps_naming_plan_runners_session(monkeypatch):
    """The agent's own session id (Claude Code's init line) never replaces plan-runner's session on the status line."""
    import io

    from runner.drivers.cli import progress as progress_module

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Tty())
    progress = progress_module.Progress()
    drawn: list[str] = []
    progress.status.update = drawn.append
    try:
        progress.event("session", "2 delivery 1.1")
        progress.event("agent_session", "1a7ad00a-983e-46d2-ad06-7c80ff842a16")
        progress.event("retry", "429 rate_limit, attempt 1/10, next try in 40s")
    finally:
        progress.stop()
    assert drawn and all(t.startswith("session 2 delivery 1.1 ·") for t in drawn), drawn
    assert "API retry 429 rate_limit, attempt 1/10, next try in 40s" in drawn[-1]
    assert "API retry by the agent: 429 rate_limit" in sys.stderr.getvalue()
