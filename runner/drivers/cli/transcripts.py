"""`plan-runner logs`: what the agent did, as text a person reads.

The state keeps each plan's transcripts (the backends' own logs, packed into the state and
unpacked into a directory for the next session). This module reads that directory and renders
the agent's words, its tool calls and their results, bounded: one tool result is cut to a few
lines, the whole to the last `max_lines`. Everything shown is the agent's or a tool's output:
data, never a verdict (the verdict is in the sessions table).

Per backend:
* claude-code: `claude-stream.jsonl` (stream-json lines; each names its `session_id`)
* codex: `codex-events.jsonl` (`thread.started` names the thread; items follow)
* anthropic: `<session id>.json` (the saved Messages conversation)
* script: `script-<n>.jsonl` (its `start` line names the session)
* command: `command-output.log` (the CLI's own output, as it printed it)
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

from runner.adapters.sandbox import fsafe
from runner.core.bounds import bound_cost
from runner.core.backend_spec import BACKENDS
from runner.core.errors import PlanRunnerError

RESULT_LINES = 8  # lines of one tool result shown
TEXT_CHARS = 2000  # characters of one message shown
# ANSI sequences whole (the sequence first: ESC alone is a control character too, and removing only it left
# `[31m` in the text), and bare CR: data, not terminal commands
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


def _clean(text: str) -> str:
    return _CONTROL.sub("", text)


def _cut(text: str, lines: int = RESULT_LINES) -> str:
    text = _clean(str(text)).rstrip()
    if len(text) > TEXT_CHARS:
        text = text[:TEXT_CHARS] + " …"
    parts = text.splitlines()
    if len(parts) > lines:
        parts = parts[:lines] + [f"… ({len(parts) - lines} more lines)"]
    return "\n".join(parts)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


_READ_LIMIT = 256 * 2**20  # a transcript bigger than this is not shown


def _read(path: Path) -> str:
    """The text of a transcript file, read without following a link at any component below the folder being
    rendered (the agent's saved state lands there: runner.adapters.sandbox.fsafe); "" when it is not a
    regular file."""
    below = path.parent.parent if path.parent.name == "agent-state" else path.parent
    data = fsafe.read_bytes(path, below=below, limit=_READ_LIMIT)
    return "" if data is None else data.decode("utf-8", errors="replace")


def _json_lines(path: Path) -> Iterator[dict]:
    for line in _read(path).splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _tool_input(name: str, data: object) -> str:
    if isinstance(data, dict):
        for key in ("command", "file_path", "path", "pattern", "url"):
            if key in data:
                return _cut(str(data[key]), 3)
        return _cut(json.dumps(data, ensure_ascii=False), 3)
    return _cut(str(data), 3)


def _result_text(content: object) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content)


# --- per backend ------------------------------------------------------------------------------


def _claude(path: Path, session_id: str | None) -> list[str]:
    lines: list[str] = []
    for msg in _json_lines(path):
        if session_id and msg.get("session_id") not in (None, session_id):
            continue
        kind = msg.get("type")
        if kind == "system" and msg.get("subtype") == "init":
            lines.append(f"— Claude Code session {msg.get('session_id', '?')} ({msg.get('model', '?')})")
        elif kind == "system" and msg.get("subtype") == "api_retry":
            lines.append(f"! API retry {msg.get('attempt', '?')}/{msg.get('max_retries', '?')}: "
                         f"{msg.get('error_status') or msg.get('error') or ''}")
        elif kind in ("assistant", "user"):
            for block in (msg.get("message") or {}).get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text", "").strip():
                    lines.append(("agent: " if kind == "assistant" else "user: ") + _cut(block["text"], 20))
                elif block.get("type") == "tool_use":
                    lines.append(f"tool {block.get('name')}: {_tool_input(block.get('name', ''), block.get('input'))}")
                elif block.get("type") == "tool_result":
                    mark = "error" if block.get("is_error") else "result"
                    lines.append(_indent(f"{mark}: {_cut(_result_text(block.get('content')))}"))
        elif kind == "result":
            lines.append(f"— result: {msg.get('subtype')}" + (" (error)" if msg.get("is_error") else "")
                         + _reported_cost(msg.get("total_cost_usd")))
    return lines


def _reported_cost(value: object) -> str:
    """`, $0.0123` for the cost a result line reports; bounded as the record bounds it (an int of 400 digits
    cannot even be formatted as a float), saying so."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return ""
    cost, note = bound_cost(value)
    return "" if cost is None else f", ${cost:.4f}" + (" (bounded: the line said more)" if note else "")


def _codex(path: Path, thread_id: str | None) -> list[str]:
    lines: list[str] = []
    keep = thread_id is None
    for msg in _json_lines(path):
        kind = msg.get("type")
        if kind == "thread.started":
            keep = thread_id is None or msg.get("thread_id") == thread_id
            if keep:
                lines.append(f"— Codex thread {msg.get('thread_id', '?')}")
            continue
        if not keep:
            continue
        raw_item = msg.get("item")
        item: dict = raw_item if isinstance(raw_item, dict) else {}
        if kind == "item.completed" and item.get("type") == "agent_message":
            lines.append("agent: " + _cut(item.get("text", ""), 20))
        elif kind == "item.completed" and item.get("type") == "command_execution":
            lines.append(f"tool shell: {_cut(item.get('command', ''), 3)}")
            lines.append(_indent(f"exit {item.get('exit_code')}: {_cut(item.get('aggregated_output', ''))}"))
        elif kind == "item.completed" and item.get("type") == "file_change":
            changes = ", ".join(f"{c.get('kind')} {c.get('path')}" for c in item.get("changes") or [] if isinstance(c, dict))
            lines.append(f"tool file_change: {_cut(changes, 3)}")
        elif kind in ("error", "turn.failed"):
            error = msg.get("message") or (msg.get("error") or {}).get("message", "")
            lines.append(f"! {_cut(str(error), 3)}")
        elif kind == "turn.completed":
            usage = msg.get("usage") or {}
            lines.append(f"— turn completed: {usage.get('input_tokens', 0)} in, {usage.get('output_tokens', 0)} out")
    return lines


def _anthropic(path: Path) -> list[str]:
    try:
        data = json.loads(_read(path))
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    lines = [f"— built-in agent session {data.get('session_id', path.stem)} ({data.get('model', '?')})"]
    for message in data.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            if role == "assistant":
                lines.append("agent: " + _cut(content, 20))
            continue
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and role == "assistant":
                lines.append("agent: " + _cut(block.get("text", ""), 20))
            elif block.get("type") == "tool_use":
                lines.append(f"tool {block.get('name')}: {_tool_input(block.get('name', ''), block.get('input'))}")
            elif block.get("type") == "tool_result":
                lines.append(_indent(("error: " if block.get("is_error") else "result: ")
                                     + _cut(_result_text(block.get("content")))))
    return lines


def _script(path: Path, session_id: str | None) -> list[str]:
    lines: list[str] = []
    for msg in _json_lines(path):
        kind = msg.get("type")
        if kind == "start":
            if session_id and msg.get("session_id") != session_id:
                return []
            lines.append(f"— scripted session {msg.get('session_id', '?')}")
        elif kind == "text":
            lines.append("agent: " + _cut(msg.get("text", ""), 20))
        elif kind == "tool":
            lines.append(f"tool {msg.get('name')}: {_cut(str(msg.get('detail', '')), 3)}"
                         + ("" if msg.get("ok", True) else "  (failed)"))
        elif kind == "tool_output":
            lines.append(_indent(_cut(msg.get("text", ""), 3)))
        elif kind in ("limit", "error"):
            lines.append(f"! {kind}: {_cut(str(msg.get('message', '')), 3)}")
    return lines


def _read_claude(directory: Path, names: list[str], session_id: str | None) -> list[str]:
    return [line for n in names for line in _claude(directory / n, session_id)]


def _read_codex(directory: Path, names: list[str], session_id: str | None) -> list[str]:
    return [line for n in names for line in _codex(directory / n, session_id)]


def _read_anthropic(directory: Path, names: list[str], session_id: str | None) -> list[str]:
    # the built-in agent saves its conversation in its own state folder when it runs isolated
    # (runner.drivers.session.phases)
    state = [directory / "agent-state" / n for n in fsafe.list_regular(directory / "agent-state", below=directory)
             if BACKENDS["anthropic"].owns_transcript(n)]
    lines: list[str] = []
    for path in sorted([*(directory / n for n in names), *state]):
        if path.name.startswith("script-") or path.name.startswith("."):
            continue
        if session_id is None or path.stem == session_id:
            lines += _anthropic(path)
    return lines


def _read_script(directory: Path, names: list[str], session_id: str | None) -> list[str]:
    lines: list[str] = []
    for name in sorted(names, key=lambda n: int(re.sub(r"\D", "", n) or 0)):
        lines += _script(directory / name, session_id)
    return lines


def _read_command(directory: Path, names: list[str], session_id: str | None,
                  window: tuple[datetime, datetime] | None = None) -> list[str]:
    """The command agent's output: with `window` (a session's start and end), only the part a session started
    within it wrote (each part opens with the backend's SESSION_MARK); the whole log where no mark falls in it
    (a log written before marks were)."""
    from runner.backends.command.backend import SESSION_MARK

    lines: list[str] = []
    for name in names:
        text = _read(directory / name)
        parts: list[tuple[datetime | None, list[str]]] = [(None, [])]
        for raw in text.splitlines():
            if raw.startswith(SESSION_MARK):
                try:
                    parts.append((datetime.fromisoformat(raw[len(SESSION_MARK):].strip()), []))
                    continue
                except ValueError:
                    pass
            parts[-1][1].append(raw)
        chosen = [body for at, body in parts if window is not None and at is not None
                  and window[0] <= at <= window[1]]
        if chosen:
            lines += ["— command agent output (this session)"] + [_clean(x) for body in chosen for x in body]
        else:
            lines += ["— command agent output (all sessions)"] + [_clean(x) for at, body in parts for x in body]
    return lines


# The reader of each backend's transcript format (its files: the spec's `transcripts`); a backend without
# a reader here fails tests/unit/test_backend_spec.py.
_READERS = {"claude-code": _read_claude, "codex": _read_codex, "anthropic": _read_anthropic,
            "script": _read_script, "command": _read_command}


def render_dir(directory: Path, session_id: str | None = None,
               window: tuple[datetime, datetime] | None = None) -> list[str]:
    """Every transcript in `directory` (as the state unpacks it) as readable lines; with `session_id`,
    only that agent session's part where the backend's log names sessions; with `window` (a session's start and
    end), only that session's part of a log that marks sessions by time (the command agent's)."""
    directory = Path(directory)
    files = set(fsafe.list_regular(directory, below=directory))
    lines: list[str] = []
    for spec in BACKENDS.values():  # in the table's order; each backend's files by its spec's `transcripts`
        names = sorted(n for n in files if spec.owns_transcript(n))
        if spec.name == "command":
            lines += _read_command(directory, names, session_id, window)
        else:
            lines += _READERS[spec.name](directory, names, session_id)
    return lines


def _bounded(lines: Iterable[str], max_lines: int) -> list[str]:
    flat = [part for line in lines for part in line.splitlines()]
    if len(flat) > max_lines:
        return [f"… {len(flat) - max_lines} earlier lines not shown (--max-lines)"] + flat[-max_lines:]
    return flat


def render_logs(ws, ports, session: int | None, *, max_lines: int = 400) -> str:
    """The text of `plan-runner logs PLAN [SESSION]`."""
    from runner.core.compaction import summary_line
    from runner.core.ledger import SessionRecord, Summary
    from runner.drivers.session import TRANSCRIPTS_DIR, load_trusted_plan

    plan, _ = load_trusted_plan(ws)
    entries, _ = ports.store.read(plan.id)
    records = [e for e in entries if isinstance(e, SessionRecord)]
    if not records and len(entries) and isinstance(entries[0], Summary):
        raise PlanRunnerError(what=f"plan {plan.id}'s sessions are all in the ledger's compacted past",
                              why=summary_line(entries[0]), fix=f"plan-runner status {plan.path}")
    if not records:
        raise PlanRunnerError(what=f"plan {plan.id} has no finished session yet", why="there is no transcript to show",
                              fix=f"run one first: plan-runner run {plan.path}")
    if session is None:
        record = records[-1]
    else:
        found = [r for r in records if r.n == session]
        summary = entries[0] if len(entries) and isinstance(entries[0], Summary) else None
        if not found and summary is not None and summary.last_session is not None and session <= summary.last_session:
            raise PlanRunnerError(
                what=f"session {session} of plan {plan.id} is in the ledger's compacted past",
                why=f"the ledger keeps its latest entries only: {summary_line(summary)}",
                fix=f"pick a later session ({', '.join(str(r.n) for r in records[-5:])}), or "
                    f"`plan-runner status {plan.path}` for the totals")
        if not found:
            raise PlanRunnerError(what=f"plan {plan.id} has no session {session}",
                                  why=f"its sessions are {', '.join(str(r.n) for r in records)}",
                                  fix="pick one from `plan-runner run`'s sessions table or the park report")
        record = found[0]
    head = [f"session {record.n} ({record.kind.value}{' on ' + record.checkpoint if record.checkpoint else ''}): "
            f"{record.outcome.value}, {record.tokens} tokens, backend {record.backend or '?'}"]
    head += [f"  - {r}" for r in record.reasons]
    with tempfile.TemporaryDirectory(prefix="plan-runner-logs-") as tmp:
        ports.store.read_dir(plan.id, TRANSCRIPTS_DIR, Path(tmp))
        sid = record.agent_session_id or record.resume_session_id
        body = render_dir(Path(tmp), sid, (record.started_at, record.finished_at))
        if not body and sid:
            body = ["(no transcript lines name this session; showing everything kept for the plan)"] + render_dir(Path(tmp))
    if not body:
        body = ["(no transcript kept for this session: the agent printed nothing plan-runner could keep)"]
    return "\n".join(head + [""] + _bounded(body, max_lines)) + "\n"
