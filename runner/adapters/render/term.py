"""Human output of the local commands: rich on a terminal, plain lines in logs and pipes.

Nothing printed here is ever read as rich markup: the text quotes agents, gates and plan
files, and `[x]` in a tracker line or a stray `[/bold]` in an agent's words must come out
as written (markup would eat the first and crash on the second). Styles are passed apart
from the text. Off a terminal rich is not even imported: a `plan-runner session` in a job
or a pipe prints plain lines and starts faster.
"""

from __future__ import annotations

from runner.core.inert import defang, strip_control

import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any


_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class Terminal:
    """The terminal the outputs print to: its live status line, if any (at most one), kept below whatever any of
    them prints."""

    def __init__(self) -> None:
        self.statuses: list[_Status] = []


class Output:
    def __init__(self, stream: str, terminal: Terminal | None = None) -> None:
        self._stream_name = stream  # looked up on every call: tests and callers may swap sys.stdout/stderr
        self.terminal = terminal or Terminal()
        self._console: Any = None
        self._console_for: IO[str] | None = None

    @property
    def stream(self) -> IO[str]:
        return getattr(sys, self._stream_name)

    def is_terminal(self) -> bool:
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def console(self) -> Any:
        stream = self.stream
        if self._console is None or self._console_for is not stream:
            from rich.console import Console

            width = None if self.is_terminal() else 120  # logs and pipes: no need to squeeze tables
            self._console = Console(file=stream, highlight=False, soft_wrap=True, markup=False, emoji=False,
                                    width=width)
            self._console_for = stream
        return self._console

    def say(self, text: str, style: str | None = None) -> None:
        """One message; `style` (e.g. "bold red") only colours it on a terminal. Control sequences in it
        (an agent's words, a gate's output) are removed: they would drive the user's terminal. A live
        status line is cleared first and drawn again below the message, so the two never share a line.
        Off a terminal the line may be a CI job's log (a `plan-runner session` in a step): no workflow command
        either."""
        if self.is_terminal():
            text = strip_control(text)
            with _above_status(self.terminal):
                self.console().print(text, style=style, markup=False, emoji=False)
        else:
            print(defang(text), file=self.stream, flush=True)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[str]],
              no_wrap: Iterable[str] = ()) -> None:
        from rich.table import Table
        from rich.text import Text

        keep = set(no_wrap)
        table = Table(title=Text(title))
        for col in columns:
            table.add_column(Text(col), no_wrap=col in keep)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        with _above_status(self.terminal):
            self.console().print(table)

    def status(self, text: str) -> Any:
        """A live status line on a terminal (an object with update/stop), or None elsewhere."""
        if not self.is_terminal():
            return None
        status = _Status(self.stream, self.terminal)
        self.terminal.statuses.append(status)
        status.update(text)
        return status


class _above_status:
    """Around a print on the terminal: the status line is erased before and drawn again after."""

    def __init__(self, terminal: Terminal) -> None:
        self.terminal = terminal

    def __enter__(self) -> None:
        for status in self.terminal.statuses:
            status.lock.acquire()
            status.erase()

    def __exit__(self, *exc: object) -> None:
        for status in self.terminal.statuses:
            status.draw()
            status.lock.release()


class _Status:
    """One line at the bottom of the terminal, redrawn in place (carriage return, erase line).

    Written directly, not through rich's Live: Live swaps sys.stdout/sys.stderr for proxies, and
    a message printed through another console then lands after the spinner's text on the same
    line. The line is cut to the terminal's width, so it never wraps (a wrapped line cannot be
    erased with a carriage return). Every write holds `lock`: the progress thread redraws while
    the main thread prints."""

    def __init__(self, stream: IO[str], terminal: Terminal) -> None:
        import threading

        self.stream = stream
        self.terminal = terminal
        self.lock = threading.RLock()
        self.text = ""
        self.frame = 0
        self.stopped = False

    def _width(self) -> int:
        import shutil

        return max(10, shutil.get_terminal_size((80, 24)).columns)

    def draw(self) -> None:
        if self.stopped or not self.text:
            return
        self.frame = (self.frame + 1) % len(_SPINNER)
        line = f"{_SPINNER[self.frame]} {self.text}"[: self._width() - 1]
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()

    def erase(self) -> None:
        if not self.stopped:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()

    def update(self, text: str) -> None:
        with self.lock:
            self.text = " ".join(strip_control(text).split())  # one line of plain text, whatever the text held
            self.draw()

    def stop(self) -> None:
        with self.lock:
            self.erase()
            self.stopped = True
            if self in self.terminal.statuses:
                self.terminal.statuses.remove(self)


err = Output("stderr")
out = Output("stdout", err.terminal)  # one terminal: a status line on either stays below what the other prints
