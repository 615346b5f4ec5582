"""The one way plan-runner runs a process it does not trust: the agent, its shell tool, gates, `verify:`, `setup:`.

`run` starts the process in a session (so in a process group) of its own, as the sandbox
identity when one is given, and reads its output in the caller's thread through a
selector: no pipe can fill up and deadlock, and nothing is buffered here, each chunk
goes to a sink the caller chose (`BoundedTail`, `HeadTail`, a line splitter), so memory
stays bounded however much the process prints. It enforces a wall-clock limit and an
optional stall limit (no output for so long), and `Controller.stop()` ends it on demand.

Everything it started is killed, however it ends: on a limit or a stop, SIGTERM to the
group, SIGKILL `term_grace_s` later; when the leader exits, SIGTERM to the group at
once (what it left running in the background goes with it; gates and the shell tool
instead let it finish writing until the drain ends), and after a drain of at most
`drain_s` (a grandchild that escaped with `setsid` may hold the pipe open forever)
SIGKILL to the group. With an isolated identity the process is bwrap, whose PID namespace
holds everything it started (escaped daemons included): when bwrap's child exits, or bwrap is
killed, the kernel kills the rest (runner.adapters.sandbox.room). The leader is always reaped. So a call
returns at most about `time_limit_s + term_grace_s + drain_s` after it started,
whatever the process does.

The result says truthfully how it ended: `reason` is "exited" only when the process
ended by itself, and `returncode` is what the OS reported (negative: killed by that
signal), so a process plan-runner killed is never a success.

With `pid_file`, the group is recorded while it runs, so that if plan-runner itself is
killed outright, the next plan-runner stops the leftover group (`reap_leftover`). That
needs Linux's /proc (to tell a reused pid from the recorded one): elsewhere it cannot
be done, and `run` warns once instead of silently skipping it.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.adapters.sandbox.identity import Identity, Launch
from runner.core.tail import BoundedTail

Reason = Literal["exited", "stalled", "time_limit", "stopped"]

_READ_CHUNK = 256 * 1024
_TICK_S = 0.05  # how often the watchdogs look at the clock while the process is quiet
_REAP_S = 5.0  # after SIGKILL, how long to wait for the kernel to let the leader go
_PROC = Path("/proc")  # Linux: start times of processes (telling a reused pid from ours)


@dataclass(frozen=True)
class Finished:
    """How a process ended."""

    returncode: int | None  # as the OS reported it: >= 0 its exit status, < 0 killed by signal -N; None: not reaped
    reason: Reason  # "exited": it ended by itself; otherwise plan-runner killed it, and this is why
    stop_detail: str  # why Controller.stop() was called ("token budget", ...), else ""
    output_bytes: int  # everything it printed, stdout and stderr
    duration_s: float

    @property
    def killed(self) -> bool:
        """plan-runner ended it (a limit, a stop): whatever exit status it had is not its own verdict."""
        return self.reason != "exited"

    @property
    def succeeded(self) -> bool:
        return self.reason == "exited" and self.returncode == 0

    @property
    def shell_code(self) -> int | None:
        """The exit status the way a shell reports it: 128 + N for "killed by signal N"."""
        code = self.returncode
        return 128 - code if code is not None and code < 0 else code

    def status(self) -> str:
        """`exit code 3`, `killed by signal 9 (SIGKILL)`, ...: what the OS said, never dressed up."""
        code = self.returncode
        if code is None:
            return "no exit status (the process could not be reaped)"
        if code >= 0:
            return f"exit code {code}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"


class StartFailed(Exception):
    """The process could not be started at all (no such program or directory, not executable): nothing runs."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


_CLOSE = object()  # sentinel for the stdin writer


class Controller:
    """The running process as its caller sees it (handed to `on_start`); thread-safe."""

    def __init__(self, proc: subprocess.Popen[bytes], started: float) -> None:
        self._proc = proc
        self._started = started
        self._lock = threading.Lock()
        self._stop_detail: str | None = None
        self._stdin_open = proc.stdin is not None
        self._queue: queue.Queue[object] = queue.Queue()
        self._writer: threading.Thread | None = None
        if proc.stdin is not None:
            # a writer thread: a child that does not read its stdin must never block the supervisor
            self._writer = threading.Thread(target=self._write_loop, name="proc-stdin", daemon=True)
            self._writer.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    @property
    def stop_detail(self) -> str | None:
        with self._lock:
            return self._stop_detail

    def send(self, text: str | bytes) -> bool:
        """Queue `text` for the child's stdin; False if stdin is closed (or was never kept open)."""
        with self._lock:
            if not self._stdin_open:
                return False
            self._queue.put(text.encode("utf-8") if isinstance(text, str) else bytes(text))
            return True

    def close_stdin(self) -> None:
        with self._lock:
            if self._stdin_open:
                self._stdin_open = False
                self._queue.put(_CLOSE)

    def stop(self, detail: str) -> None:
        """Ask for the process (and everything it started) to be killed; the first reason given wins."""
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
            # The writer ends on its own: at the queue's close, or when a write blocked on a full pipe fails once the
            # pipe's last reader is gone. Its descriptor is never closed here under its file object: closing it does
            # not wake a blocked write (the write holds the pipe), and the writer's own close (or the file object's
            # collection) would then close that number a second time, by then another thread's (a socket of this
            # process: a test's GitHub server lost its listening socket to it, under load, when the writer had not
            # yet been scheduled within the join's timeout). A writer still blocked is a daemon thread, left.
            self._writer.join(timeout=2.0)


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill_everything(pgid: int) -> None:
    """SIGKILL the group (in a room: bwrap, whose PID namespace then ends with all it holds, `setsid` escapes
    included)."""
    _signal_group(pgid, signal.SIGKILL)


def run(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    time_limit_s: float,
    on_output: Callable[[bytes], None] | None = None,
    on_stderr: Callable[[bytes], None] | None = None,
    merge_stderr: bool = False,
    stall_s: float | None = None,
    identity: Identity | None = None,
    stdin_text: str | bytes | None = None,
    keep_stdin_open: bool = False,
    on_start: Callable[[Controller], None] | None = None,
    term_grace_s: float = 2.0,
    drain_s: float = 2.0,
    stop_leftovers_at_exit: bool = True,
    pid_file: Path | None = None,
) -> Finished:
    """Run `argv` in `cwd` with exactly `env` until it ends; kill everything it started; say how it ended.

    Output goes chunk by chunk to `on_output` (stdout; stderr too with `merge_stderr`) and
    `on_stderr`; a sink left None discards (the bytes are still counted). Any output resets
    the stall watchdog. When the leader exits, what it left running is stopped at once
    (`stop_leftovers_at_exit`: an agent's daemons), or else may go on writing to the pipe for
    up to `drain_s` (a gate's background job finishing its output) before it is killed.
    A callback that raises (Ctrl-C included) kills the group and the exception propagates. Raises `StartFailed` when the process cannot be started at all.
    """
    identity = identity or Identity()
    if identity.isolated:
        _check_startable(argv, env)
    launch = identity.launch(list(argv), dict(env), cwd)
    supervisor = Supervisor(time_limit_s=time_limit_s, stall_s=stall_s, term_grace_s=term_grace_s, drain_s=drain_s,
                            stop_leftovers_at_exit=stop_leftovers_at_exit, pid_file=pid_file)
    supervisor.start(launch, want_stdin=stdin_text is not None or keep_stdin_open,
                     merge_stderr=merge_stderr)
    try:
        supervisor.attach(on_output, on_stderr, stdin_text=stdin_text, keep_stdin_open=keep_stdin_open,
                          on_start=on_start)
        supervisor.watch()
    except BaseException:
        supervisor.abandon()
        raise
    finally:
        supervisor.kill_group_and_reap()
    return supervisor.collect()


class Supervisor:
    """One process `run` started, in the steps of its life: `start`, `attach` the sinks and stdin, `watch` the
    output, the limits and the deadline, kill the group (`abandon` when the caller's side raised,
    `kill_group_and_reap` always), `collect` how it ended. Used once, by `run`, in that order."""

    def __init__(self, *, time_limit_s: float, stall_s: float | None, term_grace_s: float, drain_s: float,
                 stop_leftovers_at_exit: bool, pid_file: Path | None) -> None:
        self._time_limit_s = time_limit_s
        self._stall_s = stall_s
        self._term_grace_s = term_grace_s
        self._drain_s = drain_s
        self._stop_leftovers_at_exit = stop_leftovers_at_exit
        self._pid_file = pid_file
        self._ctl: Controller | None = None
        self._sel = selectors.DefaultSelector()
        self._sinks: dict[int, Callable[[bytes], None] | None] = {}
        self._ending: Reason | None = None  # set once plan-runner decided to kill it
        self._sigkill_at = float("inf")
        self._exited_at: float | None = None
        self._output_bytes = 0

    def start(self, launch: Launch, *, want_stdin: bool, merge_stderr: bool) -> None:
        """Start the process in a session of its own; `StartFailed` when it cannot start at all."""
        self._started = time.monotonic()  # before the child exists: its duration is never shorter than what it did
        self._last_output = self._started
        try:
            self._proc = subprocess.Popen(
                launch.argv,
                **launch.popen,
                stdin=subprocess.PIPE if want_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                start_new_session=True,  # its own process group: a kill reaches everything it started
                bufsize=0,
            )
        except OSError as exc:
            raise StartFailed(exc) from exc
        self._pgid = self._proc.pid  # start_new_session: the child leads its own group
        self._streams = [s for s in (self._proc.stdout, self._proc.stderr) if s is not None]

    def attach(self, on_output: Callable[[bytes], None] | None, on_stderr: Callable[[bytes], None] | None, *,
               stdin_text: str | bytes | None, keep_stdin_open: bool,
               on_start: Callable[[Controller], None] | None) -> None:
        """Record the group, route each stream to its sink, feed stdin, hand the `Controller` to `on_start`."""
        proc = self._proc
        if self._pid_file is not None:
            _record_group(self._pid_file, self._pgid)
        assert proc.stdout is not None
        self._sinks[proc.stdout.fileno()] = on_output
        if proc.stderr is not None:
            self._sinks[proc.stderr.fileno()] = on_stderr
        for fd in self._sinks:
            os.set_blocking(fd, False)
            self._sel.register(fd, selectors.EVENT_READ)
        self._ctl = ctl = Controller(proc, self._started)
        if stdin_text is not None:
            ctl.send(stdin_text)
        if not keep_stdin_open:
            ctl.close_stdin()
        if on_start is not None:
            on_start(ctl)

    def watch(self) -> None:
        """Read its output until it has exited and its pipes are drained (or `drain_s` is over), killing it on a
        limit or a stop on the way."""
        while True:
            now = time.monotonic()
            self._notice_exit(now)
            if self._exited_at is None:
                self._enforce_limits(now)
            elif not self._sinks or now - self._exited_at >= self._drain_s:
                return  # done; or an escaped grandchild (new session) holds the pipe open
            timeout = self._quiet_for(now)
            if not self._sinks:  # pipes closed but the process lives on: keep watching it
                try:
                    self._proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
                continue
            self._read_output(timeout)

    def _notice_exit(self, now: float) -> None:
        if self._exited_at is not None or self._proc.poll() is None:
            return
        self._exited_at = now
        if self._ending is None:
            if self._stop_leftovers_at_exit:
                _signal_group(self._pgid, signal.SIGTERM)  # what it left running goes too (a chance to clean up)
        else:
            _kill_everything(self._pgid)  # it was being killed: no second grace

    def _enforce_limits(self, now: float) -> None:
        """The deadline, the stall and a stop: SIGTERM first (test runners clean up), SIGKILL a grace later."""
        if self._ending is None:
            self._ending = self._limit_reached(now)
            if self._ending is not None:
                _signal_group(self._pgid, signal.SIGTERM)
                self._sigkill_at = now + self._term_grace_s
        elif now >= self._sigkill_at:
            _kill_everything(self._pgid)  # it ignored SIGTERM
            self._sigkill_at = float("inf")

    def _limit_reached(self, now: float) -> Reason | None:
        assert self._ctl is not None
        if self._ctl.stop_detail is not None:
            return "stopped"
        if now - self._started >= self._time_limit_s:
            return "time_limit"
        if self._stall_s is not None and now - self._last_output >= self._stall_s:
            return "stalled"
        return None

    def _quiet_for(self, now: float) -> float:
        """How long to wait for output before looking at the clock again: never past a limit."""
        if self._exited_at is not None or self._ending is not None:
            return _TICK_S
        deadline = self._started + self._time_limit_s
        if self._stall_s is not None:
            deadline = min(deadline, self._last_output + self._stall_s)
        return max(0.0, min(_TICK_S, deadline - now))

    def _read_output(self, timeout: float) -> None:
        for key, _ in self._sel.select(timeout):
            fd = key.fd
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                continue
            if not data:
                self._sel.unregister(fd)
                del self._sinks[fd]
                continue
            self._output_bytes += len(data)
            sink = self._sinks[fd]
            if sink is not None:
                sink(data)
            self._last_output = time.monotonic()  # time spent in the sink is ours, not the child's silence

    def abandon(self) -> None:
        """The caller's side raised (a sink, `on_start`, Ctrl-C): a short chance to clean up, then the kill."""
        if self._exited_at is None:
            _signal_group(self._pgid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=min(self._term_grace_s, 0.5))
            except subprocess.TimeoutExpired:
                pass

    def kill_group_and_reap(self) -> None:
        """However it ended: SIGKILL to the group, pipes and stdin closed, the leader reaped, the record gone."""
        proc = self._proc
        _kill_everything(self._pgid)  # leftovers that ignored SIGTERM, or held the pipe
        self._sel.close()
        if self._ctl is not None:
            self._ctl._shutdown_writer()
        elif proc.stdin is not None:
            proc.stdin.close()
        for stream in self._streams:
            stream.close()
        try:
            proc.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent; stuck in the kernel
            pass
        if self._pid_file is not None:
            _forget_group(self._pid_file)

    def collect(self) -> Finished:
        ctl, ending = self._ctl, self._ending
        return Finished(
            returncode=self._proc.returncode,
            reason=ending or "exited",
            stop_detail=(ctl.stop_detail or "") if ending == "stopped" and ctl is not None else "",
            output_bytes=self._output_bytes,
            duration_s=time.monotonic() - self._started,
        )


def _check_startable(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """A program named without a folder that is on none of `env`'s PATH folders cannot start: say so now (bwrap,
    in the room, could only exit 127)."""
    name = argv[0] if argv else ""
    if name and "/" not in name and shutil.which(name, path=env.get("PATH", os.defpath)) is None:
        raise StartFailed(FileNotFoundError(2, "No such file or directory", name))


# --- bounded sinks ---------------------------------------------------------------------------------


def head_tail_text(head: bytes, tail: bytes, omitted: int) -> str:
    head_text = head.decode("utf-8", errors="ignore")
    tail_text = tail.decode("utf-8", errors="ignore")
    return f"{head_text}\n[... {omitted} bytes omitted ...]\n{tail_text}"


def bound_text(text: str, limit: int) -> str:
    """Head and tail of `text` within about `limit` bytes: errors tend to be at the end, context at the start."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    return head_tail_text(data[:half], data[-half:], len(data) - 2 * half)


class HeadTail:
    """The first and last `limit` bytes of a stream, and its size: memory stays flat however much is fed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head = bytearray()
        self._tail = BoundedTail(limit)

    @property
    def total_bytes(self) -> int:
        return self._tail.total_bytes

    def feed(self, chunk: bytes) -> None:
        if len(self._head) < self.limit:
            self._head += chunk[: self.limit - len(self._head)]
        self._tail.feed(chunk)

    def whole(self) -> bytes | None:
        """Everything fed, when head and tail still hold all of it; else None."""
        total = self._tail.total_bytes
        if total > 2 * self.limit:
            return None
        tail = self._tail.bytes()
        return bytes(self._head) + tail[len(tail) - (total - len(self._head)):]

    def bytes(self) -> bytes:
        """Everything fed, or its head and tail with a marker of how much was left out between them."""
        whole = self.whole()
        if whole is not None:
            return whole
        omitted = self._tail.total_bytes - 2 * self.limit
        return bytes(self._head) + f"\n[... {omitted} bytes omitted ...]\n".encode() + self._tail.bytes()

    def bounded(self, prefix: str = "") -> str:
        """`bound_text(prefix + everything fed, limit)`, without ever holding everything fed."""
        whole = self.whole()
        if whole is not None:  # head and tail overlap or touch: the whole stream is here
            return bound_text(prefix + whole.decode("utf-8", errors="replace"), self.limit)
        start = prefix.encode("utf-8", errors="replace")
        half = self.limit // 2
        return head_tail_text((start + bytes(self._head))[:half], self._tail.bytes()[-half:],
                              len(start) + self._tail.total_bytes - 2 * half)


@dataclass(frozen=True)
class Captured:
    finished: Finished
    stdout: bytes  # bounded: head and tail of at most `limit` bytes each
    stderr: bytes


def capture(argv: Sequence[str], *, cwd: Path | str, env: Mapping[str, str], time_limit_s: float,
            identity: Identity | None = None, limit: int = 64 * 1024) -> Captured:
    """`run` with stdout and stderr kept, each bounded to its first and last `limit` bytes."""
    out, err = HeadTail(limit), HeadTail(limit)
    finished = run(argv, cwd=cwd, env=env, time_limit_s=time_limit_s, identity=identity,
                   on_output=out.feed, on_stderr=err.feed)
    return Captured(finished, out.bytes(), err.bytes())


# --- a process group left running by a plan-runner that was killed outright ------------------------

_warned_no_proc = False


def _have_proc() -> bool:
    return (_PROC / "self" / "stat").exists()


def _warn_no_proc() -> None:
    global _warned_no_proc
    if not _warned_no_proc:
        _warned_no_proc = True
        warnings.warn(
            "plan-runner cannot reap leftovers on this system (no Linux /proc to tell a recorded process from "
            "a reused pid): if plan-runner is killed outright, the agent it started keeps running and must be "
            "stopped by hand", RuntimeWarning, stacklevel=3)


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (Linux /proc); None when there is no such process or no /proc."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22, counted after the command name


def _record_group(pid_file: Path, pgid: int) -> None:
    """Best effort: the record only helps a later run clean up; failing to write it (a full or read-only
    disk) must not leave the just-started process unsupervised."""
    if not _have_proc():
        _warn_no_proc()
        return
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
    """Stop the process group recorded in `pid_file` if it still runs; its pgid, else None.

    Only the group plan-runner recorded is touched: its leader must still have the recorded
    start time (a reused pid is left alone), or, the leader gone, its group must still have
    members (Linux never hands out a pid that is some live group's id). Without /proc
    (not Linux) nothing can be checked: a warning says so, nothing is killed.
    """
    if not _have_proc():
        _warn_no_proc()
        return None
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
    _signal_group(pgid, signal.SIGTERM)
    _wait_group_gone(pgid, grace_s)
    _signal_group(pgid, signal.SIGKILL)
    _wait_group_gone(pgid, _REAP_S)  # the kernel takes a moment to reap
    _forget_group(pid_file)
    return pgid


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.02)
