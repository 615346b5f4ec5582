"""Run an agent's process under supervision: stall watchdog, hard time limit, stop on demand.

The child runs in its own process group so that a kill reaches everything it
started (shells, test servers, grandchildren). One thread (the caller's) reads
stdout and stderr through a selector: no pipe can fill up and deadlock, memory
stays bounded however much the child prints, and `on_line` runs in the
caller's thread so its exceptions (and Ctrl-C) propagate normally, after the
group is killed. Writes to stdin go through a writer thread because a child
that does not read its stdin must never block the supervisor.
"""

from __future__ import annotations

import json
import math
import os
import queue
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.errors import PlanRunnerError
from runner.sandbox import Identity

ExitReason = Literal["exited", "stalled", "time_limit", "stopped"]

STDERR_TAIL_BYTES = 8 * 1024
_READ_CHUNK = 1024 * 1024
_TICK_S = 0.05  # how often the watchdog looks at the clock when the child is quiet
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


_CLOSE = object()  # sentinel for the stdin writer


class Controller:
    """Handed to `on_line`/`on_start`; thread-safe."""

    def __init__(self, proc: subprocess.Popen[bytes], started: float) -> None:
        self._proc = proc
        self._started = started
        self._lock = threading.Lock()
        self._stop_detail: str | None = None
        self._stdin_open = proc.stdin is not None
        self._queue: queue.Queue[object] = queue.Queue()
        self._writer: threading.Thread | None = None
        if proc.stdin is not None:
            self._writer = threading.Thread(target=self._write_loop, name="supervise-stdin", daemon=True)
            self._writer.start()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    @property
    def stop_detail(self) -> str | None:
        with self._lock:
            return self._stop_detail

    def send(self, text: str) -> bool:
        """Queue `text` for the child's stdin; False if stdin is closed (or was never kept open)."""
        with self._lock:
            if not self._stdin_open:
                return False
            self._queue.put(text.encode("utf-8"))
            return True

    def close_stdin(self) -> None:
        with self._lock:
            if self._stdin_open:
                self._stdin_open = False
                self._queue.put(_CLOSE)

    def stop(self, detail: str) -> None:
        """Ask the supervisor to kill the process group; the first reason given wins."""
        with self._lock:
            if self._stop_detail is None:
                self._stop_detail = detail or "stopped"

    def _write_loop(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            while True:
                item = self._queue.get()
                if item is _CLOSE:
                    break
                assert isinstance(item, bytes)
                stdin.write(item)
                stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the child closed its stdin or died: further sends are dropped
        finally:
            with self._lock:
                self._stdin_open = False
            try:
                stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def _shutdown_writer(self) -> None:
        self.close_stdin()
        if self._writer is not None:
            self._writer.join(timeout=1.0)
            if self._writer.is_alive() and self._proc.stdin is not None:
                # the writer is blocked on a full pipe of a dead child; closing unblocks it
                try:
                    os.close(self._proc.stdin.fileno())
                except OSError:
                    pass
                self._writer.join(timeout=1.0)


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


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the group, give the leader `grace_s` to exit, then SIGKILL whatever is left."""
    pgid = proc.pid  # start_new_session: the child leads its own group
    if _killpg(pgid, signal.SIGTERM):
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _killpg(pgid, signal.SIGKILL)


def _start(argv: list[str], cwd: Path, env: dict[str, str], want_stdin: bool,
           identity: Identity | None = None) -> subprocess.Popen[bytes]:
    """Popen in a new session, as `identity` when given; a missing or non-executable program is a
    user error with a fix."""
    full_argv, extra = (identity or Identity()).command(argv, env, cwd)
    try:
        return subprocess.Popen(
            full_argv,
            env=env,
            **extra,
            stdin=subprocess.PIPE if want_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            bufsize=0,
        )
    except FileNotFoundError as exc:
        missing = exc.filename if exc.filename and str(exc.filename) != str(cwd) else argv[0]
        if not Path(cwd).is_dir():
            raise PlanRunnerError(
                what=f"cannot start {argv[0]!r}: working directory {cwd} does not exist",
                why="the work tree was removed or never checked out",
                fix="check the repository checkout step runs before plan-runner",
            ) from None
        raise PlanRunnerError(
            what=f"cannot start the agent: executable {missing!r} not found",
            why="it is not installed, or not on the PATH given to the agent",
            fix="install it, or set `agent.executable` in the plan's front matter to its full path",
        ) from None
    except PermissionError:
        raise PlanRunnerError(
            what=f"cannot start the agent: {argv[0]!r} is not executable",
            why="the file exists but lacks execute permission (or is a directory)",
            fix=f"chmod +x {argv[0]}, or point `agent.executable` at the real binary",
        ) from None


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
    identity = identity or Identity()
    proc = _start(argv, cwd, env, stdin_text is not None or keep_stdin_open, identity)
    if pid_file is not None:
        _record_group(pid_file, proc.pid)
    started = time.monotonic()
    ctl = Controller(proc, started)
    splitter = _LineSplitter(max(1, max_line_bytes))
    stderr_tail = bytearray()
    err_splitter = _LineSplitter(64 * 1024) if on_stderr_line else None
    output_bytes = 0
    last_output = started
    reason: ExitReason = "exited"
    killed = False
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    open_fds = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    for fd, name in open_fds.items():
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, name)

    def kill(why: ExitReason) -> None:
        nonlocal reason, killed
        if not killed:
            killed = True
            reason = why
            _kill_group(proc, kill_grace_s)
            identity.kill_all()

    try:
        if stdin_text is not None:
            ctl.send(stdin_text)
        if not keep_stdin_open:
            ctl.close_stdin()
        if on_start is not None:
            on_start(ctl)
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                if not killed:
                    # the agent is done; whatever it left running in its group goes too
                    _killpg(proc.pid, signal.SIGTERM)
                identity.kill_all()  # and whatever left the group: nothing of its uid outlives it
            if exited_at is None and not killed:
                if ctl.stop_detail is not None:
                    kill("stopped")
                elif now - started >= time_limit_s:
                    kill("time_limit")
                elif now - last_output >= stall_s:
                    kill("stalled")
                continue_checks = not killed
            else:
                continue_checks = False
            if exited_at is not None and (not open_fds or now - exited_at > _DRAIN_AFTER_EXIT_S):
                break  # done; or an escaped grandchild (new session) holds the pipes open
            timeout = _TICK_S
            if continue_checks:
                deadline = min(started + time_limit_s, last_output + stall_s)
                timeout = max(0.0, min(_TICK_S, deadline - now))
            if not open_fds:
                time.sleep(timeout)  # pipes closed but the process lives on: keep watching it
                continue
            for key, _ in sel.select(timeout):
                fd = key.fd
                try:
                    data = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                    del open_fds[fd]
                    continue
                output_bytes += len(data)
                last_output = time.monotonic()
                if key.data == "err":
                    stderr_tail += data
                    if len(stderr_tail) > STDERR_TAIL_BYTES:
                        del stderr_tail[: len(stderr_tail) - STDERR_TAIL_BYTES]
                    if err_splitter is not None and on_stderr_line is not None:
                        for line in err_splitter.feed(data):
                            on_stderr_line(_decode(line))
                    continue
                for line in splitter.feed(data):
                    on_line(_decode(line), ctl)
                # time spent in on_line is ours, not the child's silence
                last_output = time.monotonic()
        for line in splitter.flush():
            on_line(_decode(line), ctl)
        if err_splitter is not None and on_stderr_line is not None:
            for line in err_splitter.flush():
                on_stderr_line(_decode(line))
    except BaseException:
        killed = True
        _kill_group(proc, min(kill_grace_s, 0.5))
        raise
    finally:
        _killpg(proc.pid, signal.SIGKILL)  # leftovers that ignored SIGTERM
        identity.kill_all()
        sel.close()
        ctl._shutdown_writer()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
            pass
        if pid_file is not None:
            _forget_group(pid_file)

    stop_detail = ctl.stop_detail or ""
    if reason == "exited" and killed:
        reason = "stopped"
    return ProcessExit(
        returncode=None if killed else proc.returncode,
        reason=reason,
        stop_detail=stop_detail if reason == "stopped" else "",
        output_bytes=output_bytes,
        stdout_lines=splitter.lines,
        stderr_tail=stderr_tail.decode("utf-8", errors="replace"),
        duration_s=time.monotonic() - started,
    )


# --- an agent left running by a plan-runner that was killed outright -------------------------


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (Linux /proc); None when there is no such process or no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22, counted after the command name


def _record_group(pid_file: Path, pgid: int) -> None:
    """Best effort: the record only helps a later run clean up; failing to write it (a full or read-only
    disk) must not leave the just-started agent unsupervised."""
    try:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = pid_file.with_name(pid_file.name + ".tmp")
        tmp.write_text(json.dumps({"pgid": pgid, "start": _start_time(pgid), "by": os.getpid()}))
        tmp.replace(pid_file)
    except OSError:
        pass


def _forget_group(pid_file: Path) -> None:
    try:
        pid_file.unlink(missing_ok=True)
    except OSError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap_leftover(pid_file: Path, grace_s: float = 2.0) -> int | None:
    """Stop the agent process group recorded in `pid_file` if it still runs; its pgid, else None.

    Only the group plan-runner recorded is touched: its leader must still have the recorded
    start time (a reused pid is left alone), or, the leader gone, its group must still have
    members (Linux never hands out a pid that is some live group's id).
    """
    try:
        record = json.loads(pid_file.read_text())
        pgid, start = int(record["pgid"]), record.get("start")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        _forget_group(pid_file)  # unreadable: written by no plan-runner that finished it
        return None
    if start is None or pgid <= 1:
        _forget_group(pid_file)
        return None
    now = _start_time(pgid)
    ours = now == start if now is not None else _group_alive(pgid)
    if not ours or not _group_alive(pgid):
        _forget_group(pid_file)
        return None
    _killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.05)
    _killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _group_alive(pgid):  # the kernel takes a moment to reap
        time.sleep(0.02)
    _forget_group(pid_file)
    return pgid


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
