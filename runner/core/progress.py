"""What a running session shows on GitHub while it runs: folded from its live events, and when to edit it.

A session's events (`Workspace.on_event`: kind and detail, the agent's words among them) fold into one frozen
`Live` record; `edit_due` is the throttle, a function of the last edit's time and now on a clock the caller
passes (docs/github-actions.md, "Watching a session while it runs"). Pure: the driver (runner.drivers.actions.progress) holds the
record, the clock and the GitHub calls. Everything of the agent's here is bounded; it is escaped where it is
rendered (runner.adapters.render.report.render_progress).
"""

from __future__ import annotations

import json

from runner.core.evidence import Record

EDIT_INTERVAL_S = 60.0  # at most one edit of the progress comment a minute while the session runs
TOOL_NAME_LIMIT = 80  # characters of the last tool's name kept
TOOL_INPUT_LIMIT = 400  # characters of the last tool's input kept
PHASES = ("starting", "agent", "judging", "ended")


class Live(Record):
    """A running session as far as its events told: what the progress comment shows."""

    n: int | None = None  # the session's number, once it started
    kind: str = ""  # delivery, repair, ...
    checkpoint: str | None = None
    phase: str = "starting"
    tokens: int = 0  # so far, as the backend counts them live
    tool_calls: int = 0
    last_tool: str | None = None
    last_tool_input: str | None = None
    last_gate: str | None = None
    outcome: str | None = None  # "<Outcome>: <next action>" once decided
    changes: int = 0  # events that changed what is shown: an edit is worth it only when it moved


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_input_text(value: object) -> str:
    """A tool's input as one bounded piece of text (JSON for anything but a string)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    return _cut(text, TOOL_INPUT_LIMIT)


def take_event(live: Live, kind: str, detail: str) -> Live:
    """The record after one event; unchanged for events it does not show."""
    detail = str(detail)
    if kind == "session":  # "<n> <kind> [<checkpoint>]" (runner.drivers.session.phases.run_agent)
        parts = detail.split()
        if not parts or not parts[0].isdigit():
            return live
        return live.evolve(n=int(parts[0]), kind=parts[1] if len(parts) > 1 else "",
                           checkpoint=parts[2] if len(parts) > 2 else None, phase="agent",
                           changes=live.changes + 1)
    if kind == "tool":
        return live.evolve(tool_calls=live.tool_calls + 1, last_tool=_cut(detail, TOOL_NAME_LIMIT) or "?",
                           last_tool_input=None, changes=live.changes + 1)
    if kind == "tool_input":
        return live.evolve(last_tool_input=_cut(detail, TOOL_INPUT_LIMIT), changes=live.changes + 1)
    if kind == "tokens":
        try:
            tokens = int(detail.strip())
        except ValueError:
            return live
        if tokens == live.tokens or tokens < 0:
            return live
        return live.evolve(tokens=tokens, changes=live.changes + 1)
    if kind == "agent":  # the agent ended: "<exit kind>, <n> tokens"; the judge runs now
        return live.evolve(phase="judging", changes=live.changes + 1)
    if kind == "gate":
        return live.evolve(phase="judging", last_gate=_cut(detail, TOOL_NAME_LIMIT), changes=live.changes + 1)
    if kind == "outcome":
        return live.evolve(outcome=_cut(detail, TOOL_INPUT_LIMIT), changes=live.changes + 1)
    return live


def edit_due(last_edit_at: float | None, now: float, interval_s: float = EDIT_INTERVAL_S) -> bool:
    """Whether the progress comment may be edited now: never within `interval_s` of the last edit (a pure
    throttle on the caller's clock, in seconds)."""
    return last_edit_at is None or now - last_edit_at >= interval_s
