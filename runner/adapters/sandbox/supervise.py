"""Run an agent's process under supervision: stall watchdog, hard time limit, stop on demand.

The process itself is run by `runner.adapters.sandbox.proc.run` (the one way plan-runner runs untrusted
code: own process group, sandbox identity, bounded output, limits, everything it started
killed and reaped). This layer is what agent CLIs speak: stdout cut into lines for
`on_line` (a line over `max_line_bytes` is cut, never buffered whole), a bounded stderr
tail, and an account (`ProcessExit`) the backends classify. `on_line` runs in the
caller's thread, so its exceptions (and Ctrl-C) propagate normally, after the group is
killed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.adapters.sandbox import proc
from runner.core.errors import PlanRunnerError
from runner.adapters.sandbox.proc import Controller, reap_leftover
from runner.adapters.sandbox.identity import Identity

__all__ = ["NUDGE_TEXT", "Controller", "ExitReason", "ProcessExit", "TokenMeter", "reap_leftover", "supervise"]

ExitReason = proc.Reason

STDERR_TAIL_BYTES = 8 * 1024
_DRAIN_AFTER_EXIT_S = 2.0  # a grandchild that escaped the group may hold the pipes open


@dataclass(frozen=True)
class ProcessExit:
    returncode: int | None  # None if killed before it exited by itself
    reason: ExitReason
    stop_detail: str  # why controller.stop() was called ("token budget", ...), else ""
    output_bytes: int  # total bytes seen on stdout+stderr
    stdout_lines: int
    stderr_tail: str  # bounded (last STDERR_TAIL_BYTES)
    duration_s: float


class _LineSplitter:
    """Bytes in, whole lines out; a line over `limit` is cut and its rest skipped, never buffered."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.skipping = False
        self.lines = 0

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if self.skipping:
                self.skipping = False
            elif not self.buf:  # the common case: a whole line inside this chunk, one copy
                out.append(data[start:min(nl, start + self.limit)])
            else:
                self.buf += data[start:nl]
                out.append(bytes(self.buf[: self.limit]))
            self.buf.clear()
            start = nl + 1
        if not self.skipping:
            self.buf += data[start:]
            if len(self.buf) >= self.limit:
                out.append(bytes(self.buf[: self.limit]))
                self.buf.clear()
                self.skipping = True
        self.lines += len(out)
        return out

    def flush(self) -> list[bytes]:
        if self.buf and not self.skipping:
            self.lines += 1
            line = bytes(self.buf)
            self.buf.clear()
            return [line]
        return []


def _decode(line: bytes) -> str:
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.decode("utf-8", errors="replace")


def _start_error(exc: OSError, argv: list[str], cwd: Path) -> PlanRunnerError | None:
    """A missing or non-executable program is a user error with a fix."""
    if isinstance(exc, FileNotFoundError):
        missing = exc.filename if exc.filename and str(exc.filename) != str(cwd) else argv[0]
        if not Path(cwd).is_dir():
            return PlanRunnerError(
                what=f"cannot start {argv[0]!r}: working directory {cwd} does not exist",
                why="the work tree was removed or never checked out",
                fix="check the repository checkout step runs before plan-runner",
            )
        return PlanRunnerError(
            what=f"cannot start the agent: executable {missing!r} not found",
            why="it is not installed, or not on the PATH given to the agent",
            fix="install it, or set `agent.executable` in the plan's front matter to its full path",
        )
    if isinstance(exc, PermissionError):
        return PlanRunnerError(
            what=f"cannot start the agent: {argv[0]!r} is not executable",
            why="the file exists but lacks execute permission (or is a directory)",
            fix=f"chmod +x {argv[0]}, or point `agent.executable` at the real binary",
        )
    return None


def supervise(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stall_s: float,
    time_limit_s: float,
    on_line: Callable[[str, Controller], None],
    stdin_text: str | None = None,
    keep_stdin_open: bool = False,
    max_line_bytes: int = 16 * 2**20,
    on_start: Callable[[Controller], None] | None = None,
    kill_grace_s: float = 2.0,
    on_stderr_line: Callable[[str], None] | None = None,
    pid_file: Path | None = None,
    identity: Identity | None = None,
) -> ProcessExit:
    """Run `argv` with exactly `env` and feed each stdout line to `on_line` until the process ends.

    Any output on stdout or stderr resets the stall watchdog. The process group is
    killed on stall, time limit, `Controller.stop()`, any exception, and also after
    a normal exit (so nothing the agent started outlives its session). With `pid_file`,
    the group is recorded there while it runs, so that if this process is killed outright
    the next plan-runner can stop it (`reap_leftover`). With an isolated `identity`, the process
    runs as that user and every process of that uid is killed when the leader exits (daemons that
    left the group with `setsid` included).
    """
    splitter = _LineSplitter(max(1, max_line_bytes))
    err_splitter = _LineSplitter(64 * 1024) if on_stderr_line else None
    stderr_tail = bytearray()
    controller: list[Controller] = []

    def started(ctl: Controller) -> None:
        controller.append(ctl)
        if on_start is not None:
            on_start(ctl)

    def out(data: bytes) -> None:
        for line in splitter.feed(data):
            on_line(_decode(line), controller[0])

    def err(data: bytes) -> None:
        stderr_tail.extend(data)
        if len(stderr_tail) > STDERR_TAIL_BYTES:
            del stderr_tail[: len(stderr_tail) - STDERR_TAIL_BYTES]
        if err_splitter is not None and on_stderr_line is not None:
            for line in err_splitter.feed(data):
                on_stderr_line(_decode(line))

    try:
        finished = proc.run(
            argv, cwd=cwd, env=env, time_limit_s=time_limit_s, stall_s=stall_s, on_output=out, on_stderr=err,
            identity=identity, stdin_text=stdin_text, keep_stdin_open=keep_stdin_open, on_start=started,
            term_grace_s=kill_grace_s, drain_s=_DRAIN_AFTER_EXIT_S, pid_file=pid_file)
    except proc.StartFailed as exc:
        error = _start_error(exc.error, argv, cwd)
        if error is None:
            raise exc.error from None
        raise error from None
    for line in splitter.flush():
        on_line(_decode(line), controller[0])
    if err_splitter is not None and on_stderr_line is not None:
        for line in err_splitter.flush():
            on_stderr_line(_decode(line))
    return ProcessExit(
        returncode=None if finished.killed else finished.returncode,
        reason=finished.reason,
        stop_detail=finished.stop_detail,
        output_bytes=finished.output_bytes,
        stdout_lines=splitter.lines,
        stderr_tail=stderr_tail.decode("utf-8", errors="replace"),
        duration_s=finished.duration_s,
    )


# --- token meter shared by the CLI backends -------------------------------------------------

NUDGE_TEXT = (
    "plan-runner: your token budget for this session is nearly spent. Stop opening new work now. "
    "Commit what is coherent (tests green where you can), write your handoff to the handoff file "
    "named in your instructions (what is done, what is next, anything a human must decide), and finish."
)

MeterVerdict = Literal["ok", "nudge", "stop"]


class TokenMeter:
    """Counts tokens against a session budget: nudge at `nudge_ratio`, again every `renudge_every`, stop at 100 %.

    A single nudge is known to be ignored, so it repeats while the budget runs down.
    """

    def __init__(self, budget: int, nudge_ratio: float = 0.8, renudge_every: float = 0.05) -> None:
        if budget <= 0:
            raise ValueError("token budget must be positive")
        self.budget = budget
        self.nudge_ratio = nudge_ratio
        self.renudge_every = renudge_every
        self.used = 0
        self.nudges = 0
        self._next_nudge = self._threshold(0)

    def _threshold(self, n: int) -> int:
        return math.ceil(self.budget * (self.nudge_ratio + n * self.renudge_every) - 1e-6)

    def add(self, tokens: int) -> MeterVerdict:
        return self.set_used(self.used + max(0, int(tokens)))

    def set_used(self, total: int) -> MeterVerdict:
        """For backends that report a running total rather than increments."""
        self.used = max(self.used, int(total))
        if self.used >= self.budget:
            return "stop"
        if self.used >= self._next_nudge:
            self.nudges += 1
            n = 0
            while self._threshold(n) <= self.used:
                n += 1
            self._next_nudge = self._threshold(n)
            return "nudge"
        return "ok"

    @property
    def fraction(self) -> float:
        return self.used / self.budget
