"""Human output: text that quotes agents, gates and plans comes out as written, on a terminal and off it."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from runner.core.errors import PlanRunnerError
from runner.adapters.render.term import Output

TRICKY = "- [x] 1.1 done [/bold] [red]not red[/red] :smile: $(touch x)"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_markup_in_the_text_is_printed_as_written(monkeypatch, tty):
    stream = _Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    err = Output("stderr")
    err.say(TRICKY, "bold")
    err.table("plan [x]", ("a [/b]", "b"), [(TRICKY, "[ ] 2.1")])
    text = stream.getvalue()
    assert TRICKY in text
    assert "plan [x]" in text and "a [/b]" in text and "[ ] 2.1" in text


def test_the_status_line_takes_any_text(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Tty())
    status = Output("stderr").status("starting [/x]")
    status.update("tool [/bold] ran")
    status.stop()


def test_off_a_terminal_the_session_commands_do_not_load_rich():
    code = "import sys, runner.drivers.cli.local_commands, runner.adapters.render.term; runner.adapters.render.term.err.say('x'); assert 'rich' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr


def test_the_demo_refuses_a_directory_that_holds_a_demo_already(tmp_path):
    from runner.drivers.cli.demo import create_demo_repo

    create_demo_repo(tmp_path)
    with pytest.raises(PlanRunnerError) as err:
        create_demo_repo(tmp_path)
    assert "exists already" in err.value.render() and "--dir" in err.value.render()


def test_the_status_line_moves_while_the_agent_is_quiet(monkeypatch):
    """On a terminal the elapsed time is redrawn every second, with no event from the agent."""
    from runner.drivers.cli import progress as progress_module

    monkeypatch.setattr(sys, "stderr", _Tty())
    progress = progress_module.Progress()
    drawn: list[str] = []
    progress.status.update = drawn.append  # the redraws, as text
    import time

    try:
        progress.event("session", "1 delivery 1.1")
        deadline = time.monotonic() + 15  # one redraw a second; a loaded machine may be slower
        while len(drawn) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        progress.stop()
    assert len(drawn) >= 3 and all(t.startswith("session 1 delivery 1.1 ·") for t in drawn), drawn
