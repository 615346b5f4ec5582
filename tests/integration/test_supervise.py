"""Supervision of real child processes: watchdogs, stop, process groups, bounded memory."""

from __future__ import annotations

import os
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from runner.core.errors import PlanRunnerError
from runner.adapters.sandbox.supervise import NUDGE_TEXT, Controller, TokenMeter, supervise

PY = sys.executable


def _env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _run(code: str, tmp_path: Path, **kw):
    lines: list[str] = []
    on_line = kw.pop("on_line", lambda line, ctl: lines.append(line))
    kw.setdefault("stall_s", 5.0)
    kw.setdefault("time_limit_s", 20.0)
    kw.setdefault("kill_grace_s", 0.5)
    result = supervise([PY, "-c", code], cwd=tmp_path, env=kw.pop("env", _env()), on_line=on_line, **kw)
    return result, lines


def _alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie (PID 1 in a container may never reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _wait_dead(pid: int, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


SPAWN_GRANDCHILD = (
    "import subprocess, sys, time\n"
    "p = subprocess.Popen(['sleep', '60'])\n"
    "print(p.pid, flush=True)\n"
)


@pytest.mark.integration
def test_normal_exit_reports_lines_stderr_and_code(tmp_path):
    """A process that exits by itself yields its lines, return code, stderr tail and byte count."""
    code = "import sys\nprint('one')\nprint('two')\nsys.stderr.write('oops\\n')\nsys.exit(3)"
    result, lines = _run(code, tmp_path)
    assert lines == ["one", "two"]
    assert result.reason == "exited"
    assert result.returncode == 3
    assert result.stderr_tail == "oops\n"
    assert result.output_bytes == len("one\ntwo\noops\n")
    assert result.stdout_lines == 2
    assert result.stop_detail == ""


@pytest.mark.integration
def test_silence_triggers_stall(tmp_path):
    """No output for stall_s kills the process and reports 'stalled' with no return code."""
    result, lines = _run("import time\nprint('hi', flush=True)\ntime.sleep(30)", tmp_path, stall_s=0.8)
    assert result.reason == "stalled"
    assert result.returncode is None
    assert lines == ["hi"]
    assert 0.75 < result.duration_s < 4


@pytest.mark.integration
def test_stderr_output_resets_stall_watchdog(tmp_path):
    """Output on stderr alone keeps a process from being considered stalled."""
    code = "import sys, time\nfor _ in range(20):\n    sys.stderr.write('.\\n'); sys.stderr.flush(); time.sleep(0.1)\n"
    result, _ = _run(code, tmp_path, stall_s=0.8)
    assert result.reason == "exited"
    assert result.returncode == 0


@pytest.mark.integration
def test_time_limit_kills_a_chatty_process(tmp_path):
    """A process that keeps printing is still killed at the hard time limit."""
    code = "import time\nwhile True:\n    print('x', flush=True); time.sleep(0.05)"
    result, lines = _run(code, tmp_path, stall_s=3, time_limit_s=1.0)
    assert result.reason == "time_limit"
    assert result.returncode is None
    assert len(lines) > 3
    assert 0.95 < result.duration_s < 4


@pytest.mark.integration
def test_stop_from_on_line_reports_detail(tmp_path):
    """controller.stop() from the line callback kills the process with reason 'stopped' and the detail."""
    code = "import time\nwhile True:\n    print('tick', flush=True); time.sleep(0.05)"
    seen: list[str] = []

    def on_line(line: str, ctl: Controller) -> None:
        seen.append(line)
        if len(seen) == 3:
            ctl.stop("token budget")

    result, _ = _run(code, tmp_path, on_line=on_line)
    assert result.reason == "stopped"
    assert result.stop_detail == "token budget"
    assert result.returncode is None
    assert result.duration_s < 3


@pytest.mark.integration
def test_stall_kills_grandchildren(tmp_path):
    """A stall kills the whole process group, including a grandchild the agent started."""
    result, lines = _run(SPAWN_GRANDCHILD + "time.sleep(30)", tmp_path, stall_s=1.0)
    grandchild = int(lines[0])
    assert result.reason == "stalled"
    assert _wait_dead(grandchild)


@pytest.mark.integration
def test_normal_exit_kills_leftover_background_processes(tmp_path):
    """Background processes the agent left running do not outlive its session."""
    result, lines = _run(SPAWN_GRANDCHILD, tmp_path)
    assert result.reason == "exited"
    assert result.returncode == 0
    assert _wait_dead(int(lines[0]))


@pytest.mark.integration
def test_exception_in_callback_kills_group_and_propagates(tmp_path):
    """A KeyboardInterrupt raised while supervising kills the group (no orphans) and is re-raised."""
    pids: list[int] = []

    def on_line(line: str, ctl: Controller) -> None:
        pids.append(int(line))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(SPAWN_GRANDCHILD + "time.sleep(30)", tmp_path, on_line=on_line)
    assert _wait_dead(pids[0])


@pytest.mark.integration
def test_huge_output_keeps_memory_flat(tmp_path):
    """~50 MB of output is streamed line by line without growing the supervisor's memory."""
    code = (
        "import sys\nline = b'y' * 999 + b'\\n'\nblock = line * 1000\n"
        "for _ in range(50):\n    sys.stdout.buffer.write(block)\n"
    )
    count = 0

    def on_line(line: str, ctl: Controller) -> None:
        nonlocal count
        count += 1

    tracemalloc.start()
    try:
        result, _ = _run(code, tmp_path, on_line=on_line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.reason == "exited"
    assert count == 50_000 == result.stdout_lines
    assert result.output_bytes == 50_000_000
    assert peak < 4 * 2**20


@pytest.mark.integration
def test_overlong_line_is_truncated_not_buffered(tmp_path):
    """A 20 MB line without newline breaks is cut to max_line_bytes; the next line arrives intact."""
    code = "import sys\nsys.stdout.buffer.write(b'z' * 20_000_000 + b'\\nafter\\n')"
    tracemalloc.start()
    try:
        result, lines = _run(code, tmp_path, max_line_bytes=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == ["z" * 1000, "after"]
    assert result.output_bytes == 20_000_007
    assert peak < 4 * 2**20


@pytest.mark.integration
def test_invalid_utf8_is_replaced(tmp_path):
    """Bytes that are not UTF-8 are decoded with replacement characters, not an exception."""
    _, lines = _run("import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')", tmp_path)
    assert lines == ["ok \ufffd\ufffd end"]


@pytest.mark.integration
def test_stdin_nudges_reach_the_child(tmp_path):
    """Text sent through the controller arrives on the child's stdin, and close_stdin ends its input."""
    code = (
        "import sys\nprint('ready', flush=True)\n"
        "for line in sys.stdin:\n    print('got ' + line.strip(), flush=True)\n"
        "print('eof', flush=True)\n"
    )
    sent: list[bool] = []

    def on_line(line: str, ctl: Controller) -> None:
        if line == "ready":
            sent.append(ctl.send("nudge 1\n"))
            sent.append(ctl.send("nudge 2\n"))
        elif line == "got nudge 2":
            ctl.close_stdin()
            sent.append(ctl.send("too late\n"))

    result, _ = _run(code, tmp_path, on_line=on_line, keep_stdin_open=True, stdin_text="prompt\n")
    assert result.reason == "exited"
    assert sent == [True, True, False]


@pytest.mark.integration
def test_stdin_closed_unless_kept_open(tmp_path):
    """Without keep_stdin_open the prompt is written, stdin closed, and later sends return False."""
    got: list[bool] = []
    seen: list[str] = []

    def on_line(line: str, ctl: Controller) -> None:
        got.append(ctl.send("x"))
        seen.append(line)

    _run("import sys\nprint(len(sys.stdin.read()))", tmp_path, stdin_text="abc", on_line=on_line)
    assert seen == ["3"]
    assert got == [False]


@pytest.mark.integration
def test_child_that_ignores_a_large_stdin_does_not_deadlock(tmp_path):
    """A big prompt the child never reads cannot block the supervisor."""
    code = "print('not reading', flush=True)"
    result, lines = _run(code, tmp_path, stdin_text="p" * 5_000_000, time_limit_s=10)
    assert result.reason == "exited"
    assert lines == ["not reading"]
    assert result.duration_s < 5


@pytest.mark.integration
def test_child_gets_exactly_the_given_environment(tmp_path):
    """The child sees exactly `env`, nothing inherited from the supervisor."""
    lines: list[str] = []
    result = supervise(
        ["/usr/bin/env"], cwd=tmp_path, env={"ONLY": "this"}, stall_s=5, time_limit_s=10,
        on_line=lambda line, ctl: lines.append(line),
    )
    assert result.returncode == 0
    assert lines == ["ONLY=this"]


@pytest.mark.integration
def test_on_start_can_send_first_message(tmp_path):
    """on_start runs once the process exists, before any line, and may write to stdin."""
    code = "import sys\nprint('echo ' + sys.stdin.readline().strip(), flush=True)"
    _, lines = _run(code, tmp_path, keep_stdin_open=True, on_start=lambda ctl: ctl.send("hello\n"))
    assert lines == ["echo hello"]


def test_missing_executable_raises_user_error(tmp_path):
    """An executable that does not exist is a PlanRunnerError naming it, with a fix."""
    with pytest.raises(PlanRunnerError) as info:
        supervise(["no-such-agent-cli-xyz"], cwd=tmp_path, env=_env(), stall_s=1, time_limit_s=1,
                  on_line=lambda line, ctl: None)
    assert "no-such-agent-cli-xyz" in info.value.what
    assert "agent.executable" in info.value.fix


def test_token_meter_nudges_repeatedly_then_stops():
    """The meter nudges at 80 % and every further 5 %, and says stop at 100 %."""
    meter = TokenMeter(1000)
    verdicts = [meter.add(50) for _ in range(20)]
    nudge_at = [(i + 1) * 50 for i, v in enumerate(verdicts) if v == "nudge"]
    assert nudge_at == [800, 850, 900, 950]
    assert verdicts[-1] == "stop"
    assert verdicts[:15] == ["ok"] * 15
    assert meter.nudges == 4


def test_token_meter_large_jump_nudges_once():
    """Jumping from 0 to 92 % gives one nudge, the next comes at 95 %."""
    meter = TokenMeter(1000)
    assert meter.add(920) == "nudge"
    assert meter.add(10) == "ok"
    assert meter.add(20) == "nudge"
    assert meter.add(49) == "ok"
    assert meter.add(1) == "stop"


def test_token_meter_running_totals():
    """set_used takes a running total and never goes backwards."""
    meter = TokenMeter(100)
    assert meter.set_used(79) == "ok"
    assert meter.set_used(81) == "nudge"
    assert meter.set_used(10) == "ok"
    assert meter.used == 81
    assert meter.set_used(100) == "stop"


def test_nudge_text_asks_to_commit_and_hand_off():
    """The nudge tells the agent to stop new work, commit, and write the handoff."""
    text = NUDGE_TEXT.lower()
    assert "commit" in text and "handoff" in text and "stop" in text


def test_non_executable_file_raises_user_error(tmp_path):
    """A program file without execute permission is a PlanRunnerError suggesting chmod."""
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(PlanRunnerError) as info:
        supervise([str(script)], cwd=tmp_path, env=_env(), stall_s=1, time_limit_s=1, on_line=lambda line, ctl: None)
    assert "not executable" in info.value.what
    assert "chmod +x" in info.value.fix


def test_an_unwritable_group_record_does_not_stop_the_supervision(tmp_path):
    """The pid file is a convenience for a later run: when it cannot be written the agent is still supervised."""
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    result = supervise([sys.executable, "-c", "print('hi')"], cwd=tmp_path, env=dict(os.environ), stall_s=10,
                       time_limit_s=20, on_line=lambda line, ctl: None, pid_file=blocked / "agent.pid")
    assert result.returncode == 0 and result.stdout_lines == 1


def test_a_late_stdin_writer_never_closes_a_descriptor_it_does_not_own(monkeypatch):
    """The stdin writer not yet scheduled when the supervisor stops waiting for it (a loaded machine): the
    supervisor once closed the pipe's descriptor under the writer's file object, and the writer's own close then
    closed that number again, by then another thread's (a test's GitHub server lost its listening socket so).
    A descriptor opened meanwhile stays open."""
    import os
    import subprocess as sp
    import time as _time

    from runner.adapters.sandbox import proc as proc_mod

    original = proc_mod.Controller._write_loop

    def late(self) -> None:
        _time.sleep(3.0)
        original(self)

    monkeypatch.setattr(proc_mod.Controller, "_write_loop", late)
    child = sp.Popen(["sleep", "30"], stdin=sp.PIPE)
    try:
        ctl = proc_mod.Controller(child, _time.monotonic())
        ctl._shutdown_writer()  # waits at most its timeout; the writer is still asleep
        mine_r, mine_w = os.pipe()  # the lowest free numbers: the stdin pipe's, had it been closed
        try:
            assert ctl._writer is not None
            ctl._writer.join(timeout=10)
            assert not ctl._writer.is_alive()
            os.fstat(mine_r)
            os.fstat(mine_w)  # EBADF here if the writer closed a number it no longer owned
        finally:
            os.close(mine_r)
            os.close(mine_w)
    finally:
        child.kill()
        child.wait()
