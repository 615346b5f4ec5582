"""A scripted OpenAI Responses API on 127.0.0.1, for the real Codex CLI (`codex exec --json`).

Codex streams `POST <base_url>/responses` as server-sent events. Each test scripts
the model's turns (`enqueue`) and asserts on what the CLI sent (`requests`).
Turns are the real shapes: `response.created`, `response.output_item.added/.done`
(assistant messages, function calls), `response.output_text.delta`,
`response.completed` with usage, or an HTTP error with the real error body.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from .scripted import ScriptedServer


@dataclass(frozen=True)
class Turn:
    items: tuple[dict[str, Any], ...] = ()
    usage: dict[str, int] | None = None  # None: computed from the request and the items
    status: int = 200
    error: dict[str, Any] | None = None  # the `error` object of an HTTP error body
    headers: tuple[tuple[str, str], ...] = ()
    failed: dict[str, Any] | None = None  # stream `response.failed` with this error instead of completing
    hang: bool = False  # never answer until release() / close()


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    json: Any

    @property
    def is_responses(self) -> bool:
        return self.method == "POST" and self.path.split("?")[0].endswith("/responses")


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": json.dumps(arguments), "call_id": call_id}


def shell(cmd: str, call_id: str | None = None) -> dict[str, Any]:
    """Codex's shell tool (`exec_command`)."""
    return function_call("exec_command", {"cmd": cmd}, call_id)


def reply(*parts: str | dict[str, Any], usage: dict[str, int] | None = None) -> Turn:
    return Turn(items=tuple(message(p) if isinstance(p, str) else p for p in parts), usage=usage)


def http_error(status: int, error: dict[str, Any], headers: dict[str, str] | None = None) -> Turn:
    return Turn(status=status, error=error, headers=tuple((headers or {}).items()))


def usage_limit(resets_in_seconds: int = 3600, plan_type: str = "plus") -> Turn:
    """A ChatGPT-plan usage limit, as the service reports it (429 usage_limit_reached, reset as epoch seconds)."""
    return http_error(429, {"type": "usage_limit_reached", "message": "You've hit your usage limit.",
                            "plan_type": plan_type, "resets_at": int(time.time()) + resets_in_seconds,
                            "resets_in_seconds": resets_in_seconds})


def unauthorized(message: str = "Incorrect API key provided: sk-test.") -> Turn:
    return http_error(401, {"type": "invalid_request_error", "code": "invalid_api_key", "message": message})


def hang() -> Turn:
    return Turn(hang=True)


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, separators=(",", ":"))) // 4)


class ResponsesServer(ScriptedServer):
    """`with ResponsesServer() as srv:` serve on `srv.url` (the `/v1` base URL) until the block ends."""

    thread_name = "responses-server"
    url_path = "/v1"

    def __init__(self, *, default: Turn | None = None) -> None:
        super().__init__(default=default or reply("(no scripted turn)"))

    @property
    def response_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.is_responses]

    def _next(self) -> Turn:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def _route(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if raw and (self.headers.get("content-encoding") or "").lower() == "zstd":
            body = None  # not sent unless the client is told the server accepts it
        else:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
        req = RecordedRequest(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        with owner._lock:
            owner.requests.append(req)
        if not req.is_responses:
            self._send_json(404, {"error": {"type": "not_found", "message": f"no route {self.path}"}})
            return
        turn = owner._next()
        if turn.hang:
            owner._released.wait()
            self.close_connection = True
            return
        if turn.error is not None:
            self._send_json(turn.status, {"error": turn.error}, turn.headers)
            return
        self._stream(body if isinstance(body, dict) else {}, turn)

    def _send_json(self, status: int, payload: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, body: dict[str, Any], turn: Turn) -> None:
        owner = self.server.owner
        response_id = owner._new_id("resp")
        items = []
        for item in turn.items:
            item = dict(item, id=owner._new_id("fc" if item["type"] == "function_call" else "msg"))
            if item["type"] == "function_call" and not item.get("call_id"):
                item["call_id"] = owner._new_id("call")
            items.append(item)
        input_tokens = _tokens(body.get("input", []))
        output_tokens = _tokens(items)
        usage = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": input_tokens + output_tokens}
        usage.update(turn.usage or {})
        if turn.usage and "total_tokens" not in turn.usage:
            usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": response_id}}]
        for index, item in enumerate(items):
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                               "content_index": 0, "delta": text})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        if turn.failed is not None:
            events.append({"type": "response.failed", "response": {"id": response_id, "error": turn.failed}})
        else:
            events.append({"type": "response.completed", "response": {"id": response_id, "usage": usage}})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in events:
            payload = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


ResponsesServer.handler = _Handler
