"""Human output of the local commands: rich on a terminal, plain lines in logs and pipes.

Nothing printed here is ever read as rich markup: the text quotes agents, gates and plan
files, and `[x]` in a tracker line or a stray `[/bold]` in an agent's words must come out
as written (markup would eat the first and crash on the second). Styles are passed apart
from the text. Off a terminal rich is not even imported: a `plan-runner session` in a job
or a pipe prints plain lines and starts faster.
"""

from __future__ import annotations

from runner.inert import strip_control

import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any


class Output:
    def __init__(self, stream: str) -> None:
        self._stream_name = stream  # looked up on every call: tests and callers may swap sys.stdout/stderr
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
        (an agent's words, a gate's output) are removed: they would drive the user's terminal."""
        text = strip_control(text)
        if self.is_terminal():
            self.console().print(text, style=style, markup=False, emoji=False)
        else:
            print(text, file=self.stream, flush=True)

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
        self.console().print(table)

    def status(self, text: str) -> Any:
        """A live status line on a terminal (an object with update/stop), or None elsewhere."""
        if not self.is_terminal():
            return None
        from rich.text import Text

        status = self.console().status(Text(text))
        status.start()
        return _Status(status)


class _Status:
    def __init__(self, status: Any) -> None:
        self._status = status

    def update(self, text: str) -> None:
        from rich.text import Text

        self._status.update(Text(text))

    def stop(self) -> None:
        self._status.stop()


err = Output("stderr")
out = Output("stdout")
