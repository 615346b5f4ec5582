"""`codex exec --json` output, folded into the facts a session's signals need. Pure: no I/O, no clock.

The stream is JSON lines (`ThreadEvent`s):
`thread.started {thread_id}`, `turn.started`, `item.started|updated|completed {item}`,
`turn.completed {usage}`, `turn.failed {error: {message}}`, `error {message}`.
Items: `agent_message {text}`, `reasoning`, `command_execution {command, aggregated_output,
exit_code, status}`, `file_change {changes, status}`, `mcp_tool_call {server, tool, status, error}`,
`web_search`, `todo_list {items}`, `error {message}` (a warning; the turn goes on).

An `error` event whose message starts with "Reconnecting..." is Codex retrying by
itself; only `turn.failed` (or a last `error` with no completed turn) ends a session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runner.backends.common.limits import read_signal
from runner.backends.common.meter import token_count
from runner.core.evidence import ExitKind
from runner.backends.common import jsonline

_RECONNECTING = re.compile(r"^\s*(?:Reconnecting|Re-connecting)\.\.\.", re.IGNORECASE)
# Codex's own words for a request it could not complete (codex-rs/core/src/error.rs)
_TRANSIENT_EXTRA = (r"\berror sending request\b", r"\btimed? ?out\b", r"\bexceeded retry limit\b")
_TEXT_LIMIT = 4000


@dataclass
class CodexFold:
    """Feed lines in order; read the fields. Unknown events and item types are counted, not fatal."""

    thread_id: str | None = None
    turns_started: int = 0
    turns_completed: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    turn_failed: bool = False
    failure: str | None = None  # the error that ended the turn
    last_error: str | None = None  # the last `error` event that was not a reconnect notice
    warnings: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    tool_calls: int = 0
    tool_failures: int = 0
    last_tool: str | None = None
    file_changes: int = 0
    plan_items: int | None = None  # items of the last todo list, if the agent made one
    # bytes of `item.*` events: the agent's work; not Codex's thread/turn bookkeeping or its reconnect notices
    work_bytes: int = 0
    events: int = 0
    unparsable: int = 0
    _seen_items: set[str] = field(default_factory=set)

    def feed(self, line: str) -> dict[str, Any] | None:
        """Fold one line; returns the event (None for a blank or unparsable line)."""
        line = line.strip()
        if not line:
            return None
        try:
            event = jsonline.loads(line)
        except ValueError:
            self.unparsable += 1
            return None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self.unparsable += 1
            return None
        self.events += 1
        kind = event["type"]
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self.thread_id = event["thread_id"]
        elif kind == "turn.started":
            self.turns_started += 1
        elif kind == "turn.completed":
            self.turns_completed += 1
            self._usage(event.get("usage"))
        elif kind == "turn.failed":
            self.turn_failed = True
            self.failure = _message(event.get("error")) or self.last_error or "turn failed"
            self._usage(event.get("usage"))
        elif kind == "error":
            text = _message(event) or "error"
            if _RECONNECTING.match(text):
                self.warnings.append(text[:_TEXT_LIMIT])
            else:
                self.last_error = text[:_TEXT_LIMIT]
        elif kind in ("item.started", "item.updated", "item.completed") and isinstance(event.get("item"), dict):
            self.work_bytes += len(line)
            self._item(kind, event["item"])
        return event

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        self.input_tokens += token_count(usage.get("input_tokens"))
        self.cached_input_tokens += token_count(usage.get("cached_input_tokens"))
        self.output_tokens += token_count(usage.get("output_tokens"))
        self.reasoning_tokens += token_count(usage.get("reasoning_output_tokens"))

    def _item(self, kind: str, item: dict[str, Any]) -> None:
        item_type = item.get("type")
        item_id = str(item.get("id", ""))
        if kind == "item.started":
            if item_type in ("command_execution", "file_change", "mcp_tool_call", "web_search"):
                self.last_tool = _tool_name(item)
            return
        if kind != "item.completed":
            return
        if item_id and item_id in self._seen_items:
            return  # a replayed completion must not count twice
        self._seen_items.add(item_id)
        if item_type == "agent_message":
            text = item.get("text")
            if isinstance(text, str):
                self.messages.append(text[-_TEXT_LIMIT:])
        elif item_type == "error":
            self.warnings.append(str(item.get("message", ""))[:_TEXT_LIMIT])
        elif item_type == "todo_list":
            items = item.get("items")
            self.plan_items = len(items) if isinstance(items, list) else 0
        elif item_type in ("command_execution", "file_change", "mcp_tool_call", "web_search"):
            self.tool_calls += 1
            self.last_tool = _tool_name(item)
            if item_type == "file_change" and item.get("status") != "failed":
                changes = item.get("changes")
                self.file_changes += len(changes) if isinstance(changes, list) else 1
            if _item_failed(item):
                self.tool_failures += 1

    @property
    def error(self) -> str | None:
        """The error that ended the session, if one did."""
        if self.turn_failed:
            return self.failure
        if self.last_error and not self.turns_completed:
            return self.last_error
        return None

    @property
    def final_text(self) -> str:
        return self.messages[-1] if self.messages else ""


def _message(obj: object) -> str | None:
    if isinstance(obj, dict):
        msg = obj.get("message")
        if isinstance(msg, str) and msg.strip():
            return msg.strip()
    if isinstance(obj, str) and obj.strip():
        return obj.strip()
    return None


def _tool_name(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "command_execution":
        return "shell"
    if kind == "file_change":
        return "apply_patch"
    if kind == "mcp_tool_call":
        return f"mcp:{item.get('server', '?')}/{item.get('tool', '?')}"
    return str(kind)


def _item_failed(item: dict[str, Any]) -> bool:
    status = item.get("status")
    if status in ("failed", "declined"):
        return True
    if item.get("type") == "command_execution":
        code = item.get("exit_code")
        return isinstance(code, int) and code != 0
    if item.get("type") == "mcp_tool_call":
        return bool(item.get("error"))
    return False


def parse_codex_stream(lines: list[str] | tuple[str, ...]) -> CodexFold:
    fold = CodexFold()
    for line in lines:
        fold.feed(line)
    return fold


def classify_codex_error(text: str, now: datetime) -> tuple[ExitKind, datetime | None]:
    """The exit kind an error text means, and the reset time it gives ("try again at 3:28 PM"): the shared
    reader (`limits.read_signal`), plus Codex's own words for a retry it gave up on."""
    signal = read_signal(text, now)
    if signal is not None:
        return signal.exit_kind, signal.reset_at
    if re.search("|".join(_TRANSIENT_EXTRA), text, re.IGNORECASE):
        return ExitKind.TRANSIENT, None
    return ExitKind.CRASHED, None


# USD per million tokens: (input, cached input, output). Longest key first, so "gpt-5-mini" beats "gpt-5".
_PRICES: tuple[tuple[str, float, float, float], ...] = (
    ("gpt-5-nano", 0.05, 0.005, 0.40),
    ("gpt-5-mini", 0.25, 0.025, 2.00),
    ("codex-mini", 1.50, 0.375, 6.00),
    ("gpt-5", 1.25, 0.125, 10.00),
    ("gpt-4.1-mini", 0.40, 0.10, 1.60),
    ("gpt-4.1", 2.00, 0.50, 8.00),
    ("o4-mini", 1.10, 0.275, 4.40),
    ("o3", 2.00, 0.50, 8.00),
)


def estimate_cost(model: str | None, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float | None:
    """A list-price estimate (input includes cached input, as OpenAI counts it); None for an unknown model."""
    name = (model or "").lower()
    for key, price_in, price_cached, price_out in _PRICES:
        if key in name:
            cached = min(cached_input_tokens, input_tokens)
            total = (input_tokens - cached) * price_in + cached * price_cached + output_tokens * price_out
            return round(total / 1e6, 6)
    return None
