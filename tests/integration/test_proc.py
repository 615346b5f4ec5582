"""The one process runner (runner/adapters/sandbox/proc.py) against real processes that misbehave: no mocks.

Timings are only upper bounds that prove "does not hang" (about 10x the limit), never exact.
"""

from __future__ import annotations

import os
import signal
import time
import tracemalloc
import warnings
from pathlib import Path

import pytest

from runner.adapters.sandbox import proc

from runner.adapters.sandbox import identity as sandbox
from runner.backends.anthropic.tools import Workspace

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _sh(script: str, tmp_path: Path, **kw) -> tuple[proc.Finished, bytes]:
    out = bytearray()
    kw.setdefault("time_limit_s", 20.0)
    kw.setdefault("term_grace_s", 0.5)
    kw.setdefault("drain_s", 1.0)
    finished = proc.run(["sh", "-c", script], cwd=tmp_path, env=ENV, on_output=out.extend, merge_stderr=True, **kw)
    return finished, bytes(out)


def _alive(pid: int) -> bool:
    """Runs and is not a zombie (PID 1 in a container may never reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _dead_soon(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.02)
    return not _alive(pid)


def _kill(pid_file: Path) -> None:
    try:
        os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


# --- hangs: nothing the process leaves behind may hold the runner ----------------------------------


def test_an_escaped_grandchild_holding_the_pipe_does_not_hold_a_timed_out_run(tmp_path: Path) -> None:
    """A leader past its limit whose grandchild left the group with setsid and keeps stdout open: the run
    still ends soon after the limit, reports the time limit, and keeps what was printed before."""
    pid_file = tmp_path / "escaped.pid"
    script = f"echo before; setsid sh -c 'echo $$ > {pid_file}; exec sleep 60' & sleep 60"
    t0 = time.monotonic()
    try:
        finished, out = _sh(script, tmp_path, time_limit_s=1.0)
    finally:
        _kill(pid_file)
    assert time.monotonic() - t0 < 10
    assert finished.reason == "time_limit" and finished.killed and not finished.succeeded
    assert out.startswith(b"before\n")


def test_an_escaped_writer_does_not_hold_a_leader_that_exited(tmp_path: Path) -> None:
    """The leader exits at once; an escaped grandchild writes forever on its stdout. The run returns with
    the leader's own exit code, and the sink saw a bounded amount."""
    pid_file = tmp_path / "escaped.pid"
    sink = proc.HeadTail(1024)
    t0 = time.monotonic()
    try:
        finished = proc.run(["sh", "-c", f"echo first; setsid sh -c 'echo $$ > {pid_file}; exec yes' & exit 4"],
                            cwd=tmp_path, env=ENV, time_limit_s=5, on_output=sink.feed, merge_stderr=True,
                            term_grace_s=0.5, drain_s=1.0)
    finally:
        _kill(pid_file)
    assert time.monotonic() - t0 < 50
    assert finished.reason == "exited" and finished.returncode == 4 and finished.status() == "exit code 4"
    assert sink.bytes().startswith(b"first\n") and len(sink.bytes()) < 3 * 1024


def test_run_shell_with_an_escaped_grandchild_returns_near_its_own_timeout(tmp_path: Path) -> None:
    """The built-in agent's shell tool (the old bug: 8 s against a 1 s timeout) stays bounded by its timeout."""
    pid_file = tmp_path / "escaped.pid"
    ws = Workspace(tmp_path, ENV, shell_timeout_s=300)
    t0 = time.monotonic()
    try:
        outcome = ws.run("run_shell", {"command": f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 60' & sleep 60",
                                       "timeout_s": 1})
    finally:
        _kill(pid_file)
    assert time.monotonic() - t0 < 10
    assert not outcome.ok and outcome.text.startswith("killed after 1s (timeout)")


def test_everything_left_in_the_group_dies_with_the_leader(tmp_path: Path) -> None:
    """A background child that closed its output and outlives the leader is killed: nothing outlives a run."""
    finished, out = _sh("sleep 60 >/dev/null 2>&1 & echo $!", tmp_path)
    assert finished.succeeded
    assert _dead_soon(int(out.split()[0]))


def test_a_background_job_may_finish_writing_within_the_drain_then_dies(tmp_path: Path) -> None:
    """Gates and the shell tool: a job the shell left in the background gets the drain to finish its output
    (kept), and is killed when the drain ends."""
    finished, out = _sh("(sleep 0.2; echo late; exec sleep 60) & echo $!", tmp_path, drain_s=5,
                        stop_leftovers_at_exit=False)
    assert finished.succeeded and out.endswith(b"late\n")
    assert _dead_soon(int(out.split()[0]))


def test_a_leader_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    """SIGTERM first, then SIGKILL: a process that traps TERM cannot outlast its limit."""
    t0 = time.monotonic()
    finished, _ = _sh("trap '' TERM; while :; do sleep 0.1; done", tmp_path, time_limit_s=0.5)
    assert time.monotonic() - t0 < 10
    assert finished.reason == "time_limit" and finished.returncode == -signal.SIGKILL


def test_a_stall_fires_on_silence(tmp_path: Path) -> None:
    """No output for stall_s ends the run as stalled, long before its time limit."""
    t0 = time.monotonic()
    finished, out = _sh("echo hi; sleep 60", tmp_path, stall_s=0.5, time_limit_s=60)
    assert time.monotonic() - t0 < 10
    assert finished.reason == "stalled" and finished.killed and not finished.succeeded
    assert out == b"hi\n"


def test_output_keeps_the_stall_watchdog_quiet(tmp_path: Path) -> None:
    """A process that keeps printing is not stalled (the watchdog measures silence, not run time)."""
    finished, out = _sh("for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.1; done", tmp_path, stall_s=3)
    assert finished.reason == "exited" and finished.succeeded and out.count(b"\n") == 10


# --- truth: how it ended -----------------------------------------------------------------------------


def test_exit_codes_are_reported_as_they_are(tmp_path: Path) -> None:
    finished, _ = _sh("exit 3", tmp_path)
    assert (finished.reason, finished.returncode, finished.shell_code) == ("exited", 3, 3)
    assert not finished.succeeded and finished.status() == "exit code 3"


def test_a_process_killed_by_a_signal_is_reported_as_killed(tmp_path: Path) -> None:
    """Killed by a signal it did not choose: a negative return code and the signal's name, never success."""
    finished, _ = _sh("kill -KILL $$", tmp_path)
    assert finished.returncode == -signal.SIGKILL and finished.shell_code == 128 + signal.SIGKILL
    assert not finished.succeeded and finished.status() == "killed by signal 9 (SIGKILL)"


def test_run_shell_says_when_its_shell_was_killed_by_a_signal(tmp_path: Path) -> None:
    """The model is told the truth: not `exit code -9`, and never a success."""
    outcome = Workspace(tmp_path, ENV).run("run_shell", {"command": "echo partial; kill -KILL $$"})
    assert not outcome.ok and outcome.text.startswith("killed by signal 9 (SIGKILL)\npartial")


def test_a_process_that_exits_0_when_killed_is_not_a_success(tmp_path: Path) -> None:
    """A process that traps SIGTERM and exits 0 on the time limit: its 0 is reported, and it is no success."""
    finished, out = _sh("trap 'echo caught; exit 0' TERM; echo ready; while :; do sleep 0.1; done", tmp_path,
                        time_limit_s=0.5, term_grace_s=5)
    assert b"ready" in out
    assert finished.reason == "time_limit" and finished.killed and not finished.succeeded


def test_a_gate_that_exits_0_when_killed_is_red(tmp_path: Path) -> None:
    """The same through the gate runner: timed out and red whatever the exit status."""
    from runner.adapters.judge.gates import run_command_gate
    from runner.core.plan import GateConfig

    gate = GateConfig.model_validate({"name": "sneaky", "run": "trap 'exit 0' TERM; while :; do sleep 0.1; done",
                                     "timeout_minutes": "0.5s"})
    result = run_command_gate(gate, workdir=tmp_path, env=ENV)
    assert result.timed_out and not result.passed


def test_a_program_that_cannot_start_is_a_start_failure(tmp_path: Path) -> None:
    with pytest.raises(proc.StartFailed) as info:
        proc.run(["/no/such/program-xyz"], cwd=tmp_path, env=ENV, time_limit_s=5)
    assert isinstance(info.value.error, FileNotFoundError)


# --- bounded output --------------------------------------------------------------------------------


def test_output_over_the_cap_keeps_head_and_tail_in_bounded_memory(tmp_path: Path) -> None:
    """~50 MB through a HeadTail of 4 KiB: the start and the end are kept, the middle counted, memory flat."""
    script = "echo HEAD-MARK; head -c 50000000 /dev/zero | tr '\\0' 'x'; echo; echo TAIL-MARK"
    sink = proc.HeadTail(4096)
    tracemalloc.start()
    try:
        finished = proc.run(["sh", "-c", script], cwd=tmp_path, env=ENV, time_limit_s=60, on_output=sink.feed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert finished.succeeded and finished.output_bytes == sink.total_bytes > 50_000_000
    kept = sink.bytes()
    assert kept.startswith(b"HEAD-MARK\n") and kept.endswith(b"TAIL-MARK\n")
    assert b"bytes omitted" in kept and len(kept) < 2 * 4096 + 100
    text = sink.bounded("exit code 0\n")
    assert text.startswith("exit code 0\nHEAD-MARK") and text.endswith("TAIL-MARK\n")
    assert len(text.encode()) < 4096 + 100
    assert peak < 4 * 2**20, f"peak {peak} bytes"


def test_capture_bounds_stdout_and_stderr_separately(tmp_path: Path) -> None:
    script = "echo out-start; head -c 300000 /dev/zero | tr '\\0' 'o'; echo out-end; echo err >&2; exit 2"
    done = proc.capture(["sh", "-c", script], cwd=tmp_path, env=ENV, time_limit_s=30, limit=1000)
    assert done.finished.returncode == 2
    assert done.stdout.startswith(b"out-start") and done.stdout.endswith(b"out-end\n") and len(done.stdout) < 2200
    assert done.stderr == b"err\n"


def test_a_small_output_is_kept_whole() -> None:
    sink = proc.HeadTail(10)
    for chunk in (b"abc", b"defghij", b"klmnop"):
        sink.feed(chunk)
    assert sink.bytes() == b"abcdefghijklmnop"


# --- isolation: the room's PID namespace --------------------------------------------------------------


def _left(marker: str) -> str:
    import subprocess

    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.strip()


def test_an_isolated_daemon_that_escaped_with_setsid_is_killed() -> None:
    """In the room, a daemon that left the group (setsid) dies with the run: the room's PID namespace ends with its
    first process (issue 49; it was the uid-wide kill of a pooled user)."""
    with sandbox.leased("auto") as identity:
        finished = proc.run(["sh", "-c", "setsid sh -c 'exec sleep 61.25' </dev/null >/dev/null 2>&1 & sleep 0.5"],
                            cwd="/", env=ENV, time_limit_s=20, identity=identity, drain_s=0.5)
        assert finished.reason == "exited"
        deadline = time.monotonic() + 5
        while _left("sleep 61.25") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _left("sleep 61.25") == ""


def test_an_isolated_run_cut_short_by_an_exception_kills_its_leader_and_raises_that_exception() -> None:
    """The runner's stop signal arrives while a gate runs in the room and ignores SIGTERM: the leader is killed
    and the stop propagates as it is, not as a kill failure; nothing of the room is left."""

    class Stop(BaseException):
        pass

    def stop_after_start(out: bytes) -> None:
        raise Stop

    with sandbox.leased("auto") as identity:
        with pytest.raises(Stop):
            proc.run(["sh", "-c", "trap '' TERM; echo up; exec sleep 61.5"], cwd="/", env=ENV, time_limit_s=20,
                     on_output=stop_after_start, identity=identity, term_grace_s=0.2)
        deadline = time.monotonic() + 5
        while _left("sleep 61.5") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _left("sleep 61.5") == ""


# --- leftovers of a killed plan-runner, off Linux ------------------------------------------------------


def test_without_proc_reaping_leftovers_warns_once_instead_of_doing_nothing_silently(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    """Where there is no /proc (not Linux) the group cannot be recorded safely: a warning says so, once."""
    monkeypatch.setattr(proc, "_PROC", tmp_path / "no-proc")
    monkeypatch.setattr(proc, "_warned_no_proc", False)
    pid_file = tmp_path / "agent.pid"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, _ = _sh("true", tmp_path, pid_file=pid_file)
        second, _ = _sh("true", tmp_path, pid_file=pid_file)
        assert proc.reap_leftover(pid_file) is None
    assert first.succeeded and second.succeeded and not pid_file.exists()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "cannot reap leftovers" in messages[0]
