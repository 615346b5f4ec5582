"""A scripted Anthropic Messages API on 127.0.0.1, for the anthropic SDK and the Claude Code CLI.

Each test scripts the model's turns (`enqueue` or a `responder`) and asserts on what the client
sent (`requests`). The wire format follows the real API: the same SSE event sequence, the same
error bodies, the same rate-limit headers, so the real clients take their real code paths.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any

from .scripted import ScriptedServer

DEFAULT_MODEL = "claude-test-1"


@dataclass(frozen=True)
class Turn:
    """One scripted response. `blocks` are API content blocks (see `text` / `tool_use`)."""

    blocks: tuple[dict[str, Any], ...] = ()
    stop_reason: str | None = None  # None: "tool_use" when a tool is called, else "end_turn"
    usage: dict[str, int] | None = None  # None: computed from the request and the blocks
    status: int = 200
    error_type: str | None = None  # set for error turns: rate_limit_error, overloaded_error...
    error_message: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    cut_after_events: int | None = None  # drop the connection after N SSE events (non-streaming: at once)
    hang: bool = False  # never answer (after cut_after_events events, if set) until released
    delay_s: float = 0.0  # wait before answering (still interrupted by release/close)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any  # the parsed body, or None
    body: bytes = b""

    @property
    def is_messages(self) -> bool:
        return self.method == "POST" and self.path.split("?")[0] == "/v1/messages"


# ---- building turns ---------------------------------------------------------------------------


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:  # noqa: A002
    """A tool call; the id is assigned when the turn is served if not given."""
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def reply(*parts: str | dict[str, Any], stop_reason: str | None = None, usage: dict[str, int] | None = None) -> Turn:
    """A model turn: strings become text blocks, dicts are taken as content blocks."""
    blocks = tuple(text(p) if isinstance(p, str) else p for p in parts)
    return Turn(blocks=blocks, stop_reason=stop_reason, usage=usage)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rate_limited(
    *,
    retry_after_s: int = 30,
    reset_at: datetime | None = None,
    message: str = "Number of request tokens has exceeded your per-minute rate limit",
    extra_headers: dict[str, str] | None = None,
) -> Turn:
    """429 rate_limit_error with `retry-after` and the `anthropic-ratelimit-*-reset` headers."""
    reset_at = reset_at or datetime.now(timezone.utc) + timedelta(seconds=retry_after_s)
    stamp = _rfc3339(reset_at)
    headers = {
        "retry-after": str(retry_after_s),
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": stamp,
        "anthropic-ratelimit-tokens-limit": "40000",
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": stamp,
        "anthropic-ratelimit-input-tokens-reset": stamp,
        "anthropic-ratelimit-output-tokens-reset": stamp,
        **(extra_headers or {}),
    }
    return error_turn(429, "rate_limit_error", message, headers)


def overloaded(message: str = "Overloaded") -> Turn:
    return error_turn(529, "overloaded_error", message)


def server_error(message: str = "Internal server error") -> Turn:
    return error_turn(500, "api_error", message)


def unauthorized(message: str = "invalid x-api-key") -> Turn:
    return error_turn(401, "authentication_error", message)


def error_turn(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Turn:
    return Turn(status=status, error_type=error_type, error_message=message, headers=tuple((headers or {}).items()))


def stream_error(error_type: str, message: str) -> Turn:
    """An error sent inside a stream that already began (HTTP 200, `message_start`, then an `error` event), as the
    real API does for an error mid-stream and the project's llama server does for a prompt its context cannot hold."""
    return Turn(status=200, error_type=error_type, error_message=message)


def cut(turn: Turn, after_events: int) -> Turn:
    """The same turn, streamed, but the connection drops after `after_events` SSE events."""
    return replace(turn, cut_after_events=after_events)


def hang(after_events: int | None = None) -> Turn:
    """A response that never comes (or a stream that stops sending) until release() / close()."""
    return Turn(blocks=(text("(released)"),), hang=True, cut_after_events=after_events)


def estimate_tokens(value: Any) -> int:
    """About four characters a token: enough for budgets and meters in tests."""
    return max(1, len(json.dumps(value, separators=(",", ":"))) // 4)


# ---- the server -------------------------------------------------------------------------------


Responder = Callable[[dict[str, Any]], "Turn | None"]


class MessagesServer(ScriptedServer):
    """`with MessagesServer() as srv:` serve on `srv.url` until the block ends."""

    thread_name = "messages-server"

    def __init__(self, *, model: str = DEFAULT_MODEL, default: Turn | None = None) -> None:
        self.model = model
        self.responder: Responder | None = None
        self.unscripted = 0  # /v1/messages calls answered with `default`
        super().__init__(default=default or reply("(no scripted turn)"))

    @property
    def message_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.is_messages]

    def _next_turn(self, body: dict[str, Any]) -> Turn:
        responder = self.responder
        if responder is not None:
            turn = responder(body)
            if turn is not None:
                return turn
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            self.unscripted += 1
        return self.default


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_PUT(self) -> None:
        self._route()

    def do_PATCH(self) -> None:
        self._route()

    def do_DELETE(self) -> None:
        self._route()

    def do_HEAD(self) -> None:
        self._send_json(404, {})

    # -- routing --

    def _read_recorded(self) -> Any:
        """The request's body (parsed JSON, or None), after recording the request."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.server.owner._record(
            RecordedRequest(
                method=self.command,
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                json=body,
                body=raw,
            )
        )
        return body

    def _route(self) -> None:
        owner = self.server.owner
        body = self._read_recorded()
        path = self.path.split("?")[0]
        if self.command == "POST" and path == "/v1/messages":
            if not isinstance(body, dict):
                self._send_error(400, "invalid_request_error", "body must be a JSON object")
                return
            self._serve_turn(body, owner._next_turn(body))
        elif self.command == "POST" and path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": estimate_tokens(_prompt_part(body or {}))})
        else:
            self._send_error(404, "not_found_error", f"Not found: {self.command} {path}")

    # -- responses --

    def _send_json(self, status: int, payload: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", self.server.owner._new_id("req"))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_error(self, status: int, error_type: str, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        payload = {"type": "error", "error": {"type": error_type, "message": message}}
        self._send_json(status, payload, headers)

    def _serve_turn(self, body: dict[str, Any], turn: Turn) -> None:
        owner = self.server.owner
        if turn.delay_s and owner._wait_released(turn.delay_s):
            self.close_connection = True
            return
        if turn.hang and turn.cut_after_events is None:
            owner._wait_released(None)
            self.close_connection = True
            return
        if turn.error_type is not None and turn.status == 200 and body.get("stream"):
            self._stream_error(body, turn)
            return
        if turn.error_type is not None:
            self._send_error(turn.status, turn.error_type, turn.error_message, turn.headers)
            return
        message = _message(owner, body, turn)
        if turn.cut_after_events is not None and not body.get("stream"):
            self.close_connection = True  # nothing to cut into: the connection drops with no answer
            return
        if body.get("stream"):
            self._stream(message, turn)
        else:
            self._send_json(turn.status, message, turn.headers)

    def _stream_error(self, body: dict[str, Any], turn: Turn) -> None:
        start = next(iter(_sse_events(_message(self.server.owner, body, reply()))))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        error = ("error", {"type": "error", "error": {"type": turn.error_type, "message": turn.error_message}})
        for event, data in (start, error):
            payload = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stream(self, message: dict[str, Any], turn: Turn) -> None:
        self.send_response(turn.status)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", self.server.owner._new_id("req"))
        for name, value in turn.headers:
            self.send_header(name, value)
        self.end_headers()
        for sent, (event, data) in enumerate(_sse_events(message)):
            if turn.cut_after_events is not None and sent >= turn.cut_after_events:
                if turn.hang:
                    self.server.owner._wait_released(None)
                self.close_connection = True  # no terminating chunk: the client sees a broken stream
                return
            payload = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _prompt_part(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body.get(k) for k in ("system", "messages", "tools")}


def _message(owner: MessagesServer, body: dict[str, Any], turn: Turn) -> dict[str, Any]:
    blocks = [dict(b, id=b.get("id") or owner._new_id("toolu")) if b["type"] == "tool_use" else dict(b) for b in turn.blocks]
    stop_reason = turn.stop_reason or ("tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn")
    usage = {
        "input_tokens": estimate_tokens(_prompt_part(body)),
        "output_tokens": estimate_tokens(blocks),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    usage.update(turn.usage or {})
    return {
        "id": owner._new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or owner.model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _sse_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The real API's event sequence for one message."""
    usage = message["usage"]
    start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            value = block["text"]
            for piece in (value[: len(value) // 2], value[len(value) // 2 :]):
                if piece:
                    delta = {"type": "text_delta", "text": piece}
                    yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        elif block["type"] == "tool_use":
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": head}
            encoded = json.dumps(block["input"])
            for piece in (encoded[: len(encoded) // 2], encoded[len(encoded) // 2 :]):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


MessagesServer.handler = _Handler
