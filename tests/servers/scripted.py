"""What every scripted model server shares: a thread serving on 127.0.0.1, a queue of
scripted turns, a record of requests, hangs that end on `release()`, and a close that
leaves no handler thread or connection behind (ResourceWarnings are errors in tests)."""

from __future__ import annotations

import itertools
import socket
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.servers.stopping import stop_loop


class _TrackingServer(ThreadingHTTPServer):
    daemon_threads = False  # joined on close, so no handler outlives the test
    owner: ScriptedServer

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        with self.owner._lock:
            self.owner._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):  # type: ignore[no-untyped-def]
        with self.owner._lock:
            self.owner._connections.discard(request)
        super().shutdown_request(request)


class ScriptedServer:
    """Base of `MessagesServer` and `ResponsesServer`; subclasses give the handler and the URL path."""

    handler: type[BaseHTTPRequestHandler]
    thread_name = "scripted-server"
    url_path = ""

    def __init__(self, *, default: Any) -> None:
        # Served when nothing is scripted: a plain final answer, so a client never loops on errors.
        self.default = default
        self.requests: list[Any] = []
        self._queue: deque[Any] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._ids = itertools.count(1)
        self._connections: set[socket.socket] = set()
        self._httpd = _TrackingServer(("127.0.0.1", 0), self.handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self.thread_name, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.url_path}"

    def enqueue(self, *turns: Any) -> None:
        with self._lock:
            self._queue.extend(turns)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def release(self) -> None:
        """End every hanging response (their connections close without an answer)."""
        self._released.set()

    def close(self) -> None:
        self._released.set()
        stop_loop(self._httpd, self._thread, f"the test server {self.thread_name}")
        with self._lock:
            conns = list(self._connections)
        for conn in conns:  # unblock handler threads waiting on idle keep-alive connections
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()  # joins the handler threads
        self._thread.join(timeout=5)

    def __enter__(self):  # noqa: ANN204 - returns the subclass
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- used by the handlers --

    def _record(self, request: Any) -> None:
        with self._lock:
            self.requests.append(request)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    def _wait_released(self, seconds: float | None) -> bool:
        return self._released.wait(seconds)
