"""What a local run shows on the terminal: live progress, a line per session result, the sessions table.

Shared by `plan-runner run`/`session` (runner.drivers.cli.local_commands) and the demo (runner.drivers.cli.demo)."""

from __future__ import annotations

import threading
import time

from runner.core.actions import Wait, short
from runner.adapters.render.term import err, out


class StepLine:
    """A live line for work that prints nothing of its own (the preflight's fresh checkout of the base, each
    `setup:` command): what runs and for how long, redrawn every second on a terminal, and a line for each
    finished step above it. Off a terminal it prints nothing (the events print what they printed before)."""

    def __init__(self, label: str, first: str) -> None:
        self.label, self.what, self.since = label, first, time.monotonic()
        self.status = err.status(self._text())
        self._stopped = threading.Event()
        if self.status:
            threading.Thread(target=self._tick, name=f"{label}-line", daemon=True).start()

    def _text(self) -> str:
        return f"{self.label}: {self.what} · {time.monotonic() - self.since:.0f}s"

    def _tick(self) -> None:
        while not self._stopped.wait(1.0):
            if self.status and not self._stopped.is_set():
                self.status.update(self._text())

    def _done(self) -> None:
        if self.status:
            err.say(f"  {self.label}: {self.what} ({time.monotonic() - self.since:.0f}s)")

    def step(self, what: str) -> None:
        self._done()
        self.what, self.since = what, time.monotonic()
        if self.status:
            self.status.update(self._text())

    def event(self, kind: str, detail: str) -> None:
        """A session's event hook (`ws.on_event`) while the step line shows."""
        if kind == "setup" and not detail.startswith(("cache ", "building the cache", "the key files")):
            self.step(f"setup: {detail}")
        elif kind in ("warning", "isolation"):
            err.say(f"  {kind}: {detail}", "yellow")

    def stop(self) -> None:
        self._stopped.set()
        if self.status:
            self.status.stop()


class Progress:
    """Live progress on the terminal: session, kind, elapsed, tokens, last tool, gates, outcomes.

    On a terminal the status line is redrawn every second (the elapsed time moves while a quiet
    agent thinks); event lines are printed above it, never on it (runner.adapters.render.term). Elsewhere only
    the events are printed, one line each. The status line names plan-runner's session (number,
    kind, checkpoint) for the whole session: the agent's own session id is not a session of ours."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.session = ""
        self.tokens = "0"
        self.tool = "-"
        self.retry = ""
        self.waiting: str | None = None
        self.step: tuple[str, float] | None = None  # a `setup:` command running now, and since when
        self.status = err.status("starting")
        self._stopped = threading.Event()
        if self.status:
            threading.Thread(target=self._tick, name="progress", daemon=True).start()

    def _tick(self) -> None:
        while not self._stopped.wait(1.0):
            if self.session and self.waiting is None:
                self._redraw()

    def _redraw(self) -> None:
        if self.status and not self._stopped.is_set():
            elapsed = time.monotonic() - self.started
            retry = f" · API retry {self.retry}" if self.retry else ""
            if self.step is not None:
                command, since = self.step
                self.status.update(f"session {self.session} · {elapsed:5.0f}s · setup: {command} · "
                                   f"{time.monotonic() - since:.0f}s")
                return
            self.status.update(f"session {self.session} · {elapsed:5.0f}s · {self.tokens} tokens · "
                               f"last tool {self.tool}{retry}")

    def event(self, kind: str, detail: str) -> None:
        self.waiting = None
        self.step = None
        if kind == "setup" and not detail.startswith(("cache ", "building the cache", "the key files")):
            self.step = (detail, time.monotonic())
        if kind == "session":
            self.started, self.session, self.tokens, self.tool, self.retry = time.monotonic(), detail, "0", "-", ""
            err.say(f"session {detail}", "bold")
        elif kind == "tokens":
            self.tokens, self.retry = detail, ""
        elif kind == "tool":
            self.tool, self.retry = detail, ""
        elif kind == "retry":  # the agent CLI's own API retry: shown as it happens
            self.retry = detail
            err.say(f"  API retry by the agent: {detail}", "yellow")
        elif kind == "unreachable":  # the agent's API calls get no answer: the session ends at once
            self.retry = f"model endpoint unreachable ({detail})"
            err.say(f"  the model endpoint cannot be reached: {detail}", "red")
        elif kind == "gate":
            err.say(f"  gate {detail}")
        elif kind in ("outcome", "agent", "advisor", "reconciled", "isolation", "warning", "setup"):
            err.say(f"  {kind}: {detail}")
        self._redraw()

    def result(self, result) -> None:
        """A session's result line (run's `on_result`): printed above the status line."""
        print_result(result)

    def wait(self, action: Wait, left: float) -> None:
        text = f"waiting {left:5.0f}s: {action.reason} (Ctrl-C stops; state is saved)"
        self.waiting = text
        if self.status:
            self.status.update(text)
        elif int(left) % 10 == 0 or left < 1:
            err.say(text)

    def stop(self) -> None:
        self._stopped.set()
        if self.status:
            self.status.stop()


def print_result(result) -> None:
    if result.record is None:
        err.say(result.message)
        return
    r = result.record
    err.say(f"session {r.n}: {r.outcome.value} (blame {r.blame.value}) → {result.message}", "bold")
    for reason in r.reasons:
        err.say(f"  - {reason}")


def print_sessions_table(state_entries, title: str) -> None:
    from runner.core.ledger import SessionRecord

    from runner.core.ledger import Summary

    rows = []
    for e in state_entries:
        if isinstance(e, Summary) and e.sessions:  # a compacted ledger: one row for the sessions it stands for
            counts = ", ".join(f"{n} {o}" for o, n in sorted(e.outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
            rows.append((f"{e.first_session}-{e.last_session}", "compacted", f"{e.credited_count} credited", counts,
                         "-", str(e.tokens), cost_text(e.cost_usd, e.cost_lower_bound) if e.cost_known else "-",
                         "-", "-"))
        if isinstance(e, SessionRecord):
            red = [g.name for g in e.gates if g.required and not g.passed]
            gates = ("red: " + ", ".join(red)) if red else ("green" if e.gates else "-")
            rows.append((str(e.n), e.kind.value, e.checkpoint or "-", e.outcome.value, e.blame.value,
                         str(e.tokens), cost_text(e.cost_usd, e.cost_lower_bound), gates, short(e.next_action) if e.next_action else "-"))
    out.table(title, ("#", "kind", "checkpoint", "outcome", "blame", "tokens", "cost", "gates", "next"), rows,
              no_wrap=("outcome", "kind"))


def cost_text(cost_usd: float | None, lower_bound: bool = False) -> str:
    """`$0.0123`, `≥ $0.0123` when the session ended before the backend's final account (at least that much
    was spent), or `-` when the backend reported no cost."""
    if cost_usd is None:
        return "-"
    text = f"${cost_usd:.2f}" if cost_usd >= 1 else f"${cost_usd:.4f}"
    return f"≥ {text}" if lower_bound else text
