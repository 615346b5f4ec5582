"""The built-in agent's conversation kept within the model's context window, as real agents compact theirs.

A request whose conversation the endpoint cannot hold is answered with a 400, "prompt is too long: 8257 tokens >
8191 maximum" (Anthropic's API words it so, and the project's llama server as it does). Before, that ended the
session (4 of the 9 long sessions of issue 47's fourth round, on the benchmark server's 8,192-token window). Now the
loop shortens the conversation to about half the maximum the error states and sends it again:

1. the results of older tool calls are left out, oldest first (a gate's output, a file read: the bulk of a
   conversation), each replaced by a line saying so and how it began;
2. if that is not enough, the oldest exchanges are dropped whole: an assistant turn with the results answering it
   (a user's own words in those turns are kept);
3. never the first user turn (the task) nor the latest :data:`KEEP_LAST` messages (the call being answered), and no
   text block of a user turn (the session's prompt, a named loop, a reminder).

Pure: a new list is returned and nothing else is read or written. The size is estimated from the error's own token
count, in proportion to the characters of the request. What counts is untouched: the agent's calls and their
evidence are as they were; the model only sees less of its own past.
"""

from __future__ import annotations

import json
import re
from typing import Any

KEEP_LAST = 4  # the latest two exchanges stay whole: the call the model is answering and the one before it
TARGET_SHARE = 0.5  # compact to half the window: room for the next turns before it fills again (and a reused cache)
_MIN_CHARS = 200  # a tool result shorter than this is not worth leaving out
_TOO_LONG = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)\s*maximum", re.IGNORECASE)

LEFT_OUT = "[left out to fit the model's context window: {chars} characters that began: {head}]"


def too_long(text: str) -> tuple[int, int] | None:
    """(the prompt's tokens, the maximum) of an endpoint's "prompt is too long" answer, or None."""
    found = _TOO_LONG.search(text)
    if not found:
        return None
    tokens, maximum = int(found.group(1)), int(found.group(2))
    return (tokens, maximum) if 0 < maximum < tokens else None


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def _content(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _left_out(block: dict[str, Any]) -> dict[str, Any] | None:
    """The tool result with its content replaced by a line saying so, or None when it is short or was already."""
    text = _content(block)
    if len(text) < _MIN_CHARS or text.startswith(LEFT_OUT[:20]):
        return None
    head = " ".join(text.split())[:120]
    return {**block, "content": LEFT_OUT.format(chars=len(text), head=head)}


def _blocks(msg: dict[str, Any]) -> list[dict[str, Any]]:
    content = msg.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def _valid(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Empty turns dropped, consecutive turns of one role merged, and each tool result kept only where the assistant
    turn just before it made the call."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        blocks = _blocks(msg)
        if msg["role"] == "user":
            before = out[-1] if out and out[-1]["role"] == "assistant" else None
            calls = {b.get("id") for b in before["content"] if b.get("type") == "tool_use"} if before else set()
            blocks = [b for b in blocks if b.get("type") != "tool_result" or b.get("tool_use_id") in calls]
        if not blocks:
            continue
        if out and out[-1]["role"] == msg["role"]:
            out[-1] = {"role": msg["role"], "content": [*out[-1]["content"], *blocks]}
        else:
            out.append({"role": msg["role"], "content": blocks})
    return out


def compact(messages: list[dict[str, Any]], tokens: int, maximum: int, overhead_chars: int = 0,
            ) -> tuple[list[dict[str, Any]], int]:
    """`messages` shortened to about TARGET_SHARE of `maximum` tokens, given that they came to `tokens` (with
    `overhead_chars` of system prompt and tool specs around them); and how many tool results and turns were left
    out (0: nothing could be, the caller gives up)."""
    total_chars = _size(messages) + overhead_chars
    per_char = tokens / max(1, total_chars)
    target_chars = int(maximum * TARGET_SHARE / per_char) - overhead_chars
    out = [dict(m, content=_blocks(m)) for m in messages]
    tail = max(1, len(out) - KEEP_LAST)
    while tail > 1 and out[tail]["role"] != "assistant":
        tail -= 1  # the kept turns start with a call, so the results they hold keep it
    left = 0
    size = _size(out)
    # 1. older tool results, oldest first
    for msg in out[1:tail]:
        if size <= target_chars:
            break
        if msg["role"] != "user":
            continue
        blocks = msg["content"]
        for j, block in enumerate(blocks):
            shorter = _left_out(block) if block.get("type") == "tool_result" else None
            if shorter is not None:
                size -= _size(block) - _size(shorter)
                blocks[j] = shorter
                left += 1
    # 2. the oldest exchanges whole: an assistant turn and the results answering it (a user's words stay)
    for i in range(1, tail):
        if size <= target_chars:
            break
        if out[i]["role"] == "assistant" and out[i]["content"]:
            out[i] = {"role": "assistant", "content": []}
            size = _size(_valid(out))
            left += 1
    return (_valid(out), left) if left else (messages, 0)
