"""The allow-list proxy outside the sandbox: the only way out of a sandboxed run's network namespace.

It listens on a unix socket that the sandbox binds in (runner.adapters.netproxy.relay carries the sandbox's
loopback TCP to it) and serves three kinds of request:

* `CONNECT host:port` (HTTPS, and any TCP a client tunnels): allowed by the run's AllowList, else 403;
* absolute-form `GET http://host/...` (plain HTTP through a proxy): the same check, then forwarded;
* origin-form `POST /<route>/...` (the agent's `ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL`): forwarded to the real
  model endpoint, over TLS when it is https, with every key header the client sent removed and the real key
  added, so the key never enters the sandbox.

A name that resolves to loopback, link-local (cloud metadata) or an unspecified address is refused unless the
rule names the address itself (`127.0.0.1:8080`): an allowed name cannot be pointed at the machine's own ports.
Refusals are counted per host and port, for one line in the session's report.

Why asyncio streams and h11, not a proxy package: the job is small (parse one request head, check it, splice two
sockets) and its security lies in the few lines that decide; proxy.py and mitmproxy are whole servers (process
pools, plugins, TLS interception) to configure around, pproxy is barely kept. h11 (python-hyper, already here
under httpx and the anthropic SDK) parses and validates the request head; the bytes after it are spliced as
they come, so SSE streams and request bodies of any size pass in bounded memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import h11

from runner.adapters.netproxy.relay import INSIDE_PORT, INSIDE_SOCKET, relay_argv
from runner.core.network import (ANTHROPIC_SECRETS, ANY_HOST, OPENAI_SECRETS, PLACEHOLDER_KEY, STRIPPED_HEADERS,
                                 AllowList, HostRule, Refusal, Route, normalise_host)

HEAD_LIMIT = 64 * 1024  # a request head larger than this is refused (431)
CHUNK = 64 * 1024
MAX_CONNECTIONS = 64  # concurrent connections of one run; more are refused (503)
MAX_REFUSED_HOSTS = 100  # distinct refused destinations remembered; further ones are counted together
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 15 * 60.0  # a spliced connection with no byte either way for this long is closed
HALF_CLOSE_GRACE_S = 60.0  # after the client closed its side, how long the far side may still answer
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te",
               "trailer", "upgrade"}
_MODEL_ENV = (*ANTHROPIC_SECRETS, *OPENAI_SECRETS, "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL")
_PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_NO_PROXY = "localhost,127.0.0.1,::1"


class _Refused(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


class NetProxy:
    """One run's proxy: started by `start_proxy`, serving on `socket_path` from its own thread until `close()`."""

    def __init__(self, allow: AllowList, routes: tuple[Route, ...], socket_path: Path, *, owns_dir: bool,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.allow = allow
        self.routes = {r.name: r for r in routes}
        self.socket_path = socket_path
        self._owns_dir = owns_dir
        self._max_connections = max_connections
        self._idle_s = idle_timeout_s
        self._active = 0
        self._refused: dict[tuple[str, int], list] = {}
        self._others = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="plan-runner-netproxy", daemon=True)
        self._closed = False

    # ---- life ------------------------------------------------------------------------------------------------

    def _start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_unix_server(self._serve, path=str(self.socket_path), limit=HEAD_LIMIT))
            os.chmod(self.socket_path, 0o600)
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self._error = exc
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                self._loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.close()

    def close(self) -> None:
        """Stop serving, cut every open connection, remove the socket. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        if self._owns_dir:
            with contextlib.suppress(OSError):
                self.socket_path.parent.rmdir()

    def __enter__(self) -> NetProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what the sandbox is told ---------------------------------------------------------------------------

    @property
    def bind(self) -> tuple[Path, str]:
        """(the socket's folder outside, where the sandbox must bind it read-write inside)."""
        return self.socket_path.parent, os.path.dirname(INSIDE_SOCKET)

    def wrap(self, argv: list[str] | tuple[str, ...], *, python: str | None = None) -> list[str]:
        """`argv` behind the relay (runner.adapters.netproxy.relay), for a sandbox that binds `bind`. `python`: an
        interpreter the sandbox shows (default: plan-runner's own, which the room shows read-only)."""
        return relay_argv(self.inside_argv(argv), python=python or sys.executable, socket=INSIDE_SOCKET,
                          port=INSIDE_PORT, mirrors=self.allow.loopback())

    def inside_argv(self, argv: list[str] | tuple[str, ...], *, port: int = INSIDE_PORT) -> list[str]:
        """`argv` with a route's real endpoint, where a CLI is given it on its command line (Codex:
        `-c model_providers.plan_runner.base_url="https://api.openai.com/v1"`), replaced by the route's address
        inside: the argv is built from plan-runner's environment, the process gets the sandbox's."""
        out = list(argv)
        for route in self.routes.values():
            real = route.upstream.rstrip("/")
            out = [a.replace(real, route.inside_base_url(port)) if real in a else a for a in out]
        return out

    def sandbox_env(self, env: Mapping[str, str], *, port: int = INSIDE_PORT) -> dict[str, str]:
        """`env` for a run behind this proxy: no model key or endpoint of the host's (a route's placeholder and
        address instead), every proxy variable pointing at the relay on the sandbox's loopback."""
        out = {k: v for k, v in env.items() if k not in _MODEL_ENV and k.upper() not in ("NO_PROXY",)}
        for route in self.routes.values():
            out[route.base_url_env] = route.inside_base_url(port)
            if route.placeholder_env:
                out[route.placeholder_env] = PLACEHOLDER_KEY
        for name in _PROXY_ENV:
            out[name] = f"http://127.0.0.1:{port}"
        out["NO_PROXY"] = out["no_proxy"] = _NO_PROXY
        return out

    def refused(self) -> tuple[Refusal, ...]:
        """What the run tried to reach and was refused, one entry per destination, most tried first."""
        with self._lock:
            rows = [Refusal(h, p, n, why) for (h, p), (n, why) in self._refused.items()]
            if self._others:
                rows.append(Refusal(f"{self._others} more destinations", 0, self._others, "not listed one by one"))
        return tuple(sorted(rows, key=lambda r: (-r.count, r.host, r.port)))

    def _refuse(self, host: str, port: int, why: str) -> None:
        with self._lock:
            key = (host, port)
            if key in self._refused:
                self._refused[key][0] += 1
            elif len(self._refused) < MAX_REFUSED_HOSTS:
                self._refused[key] = [1, why]
            else:
                self._others += 1

    # ---- one connection ---------------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._active += 1
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        except asyncio.CancelledError:  # close(): end quietly (a cancelled task is logged as an error by asyncio)
            pass
        finally:
            self._active -= 1
            self._tasks.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await _answer(writer, 431, "the request head is too large")
            return
        if self._active > self._max_connections:
            await _answer(writer, 503, f"plan-runner: more than {self._max_connections} connections at once")
            return
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
        parser.receive_data(head)
        try:
            request = parser.next_event()
        except h11.RemoteProtocolError as exc:
            await _answer(writer, 400, f"a malformed request ({exc})")
            return
        if not isinstance(request, h11.Request):
            await _answer(writer, 400, "a malformed request")
            return
        method = request.method.decode("ascii")
        target = request.target.decode("ascii", "replace")
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in request.headers]
        try:
            if method == "CONNECT":
                host, port = _authority(target)
                up_reader, up_writer = await self._open(host, port)
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            elif target.startswith("/"):
                up_reader, up_writer = await self._route(method, target, headers)
            elif target.lower().startswith("http://"):
                up_reader, up_writer = await self._forward(method, target, headers)
            else:
                raise _Refused(400, "an https:// URL is reached with CONNECT; a request target must be a path or "
                                    "an http:// URL")
        except _Refused as refused:
            await _answer(writer, refused.status, refused.why)
            return
        try:
            await self._splice(reader, writer, up_reader, up_writer, http=method != "CONNECT")
        finally:
            up_writer.close()

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to host:port if the allow-list lets this run reach it (else _Refused, recorded)."""
        host = normalise_host(host)
        rule = self.allow.rule_for(host, port)
        if rule is None:
            self._refuse(host, port, "not allowed")
            raise _Refused(403, f"plan-runner: {host}:{port} is not in this run's network allow-list "
                                f"(the plan's `network:`; allowed: {self.allow})")
        last: BaseException | None = None
        for address in await self._addresses(host, port, rule):  # each address in turn (an IPv6 one may not route)
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port, limit=CHUNK), CONNECT_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as exc:
                last = exc
        raise _Refused(502, f"plan-runner: cannot connect to {host}:{port} ({_reason(last) if last else 'no address'})")

    async def _addresses(self, host: str, port: int, rule: HostRule) -> list[str]:
        """The addresses to try: resolved here, outside; never a loopback or link-local one (the machine's own
        ports, cloud metadata) unless the rule names the address itself, and under `*` no private one either."""
        try:
            infos = await self._loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise _Refused(502, f"plan-runner: the name {host} does not resolve ({_reason(exc)})") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if rule.literal:
            return addresses
        local = [a for a in addresses if _is_local(a)]
        if local:
            self._refuse(host, port, f"resolves to the local address {local[0]}")
            raise _Refused(403, f"plan-runner: {host} resolves to {local[0]}, a local address; only a rule naming "
                                f"the address itself (e.g. `{local[0]}:{port}`) reaches it")
        private = [a for a in addresses if _is_private(a)]
        if private and rule.host == ANY_HOST:
            self._refuse(host, port, f"resolves to the private address {private[0]}, which `*` does not cover")
            raise _Refused(403, f"plan-runner: {host} resolves to {private[0]}, a private address; `*` covers public "
                                f"hosts only: list `{host}` (or the address) in the plan's `network:`")
        return addresses

    async def _forward(self, method: str, target: str, headers: list[tuple[str, str]]):
        parts = urlsplit(target)
        try:
            port = parts.port or 80
        except ValueError:
            raise _Refused(400, f"plan-runner: a bad port in {target!r}") from None
        if not parts.hostname:
            raise _Refused(400, f"plan-runner: no host in {target!r}")
        up_reader, up_writer = await self._open(parts.hostname, port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [(n, v) for n, v in headers if n not in _HOP_BY_HOP]
        up_writer.write(_head(method, path, kept))
        return up_reader, up_writer

    async def _route(self, method: str, target: str, headers: list[tuple[str, str]]):
        name, _, rest = target[1:].partition("/")
        route = self.routes.get(name.split("?", 1)[0])
        if route is None:
            raise _Refused(404, f"plan-runner: no model endpoint at /{name} (routes: "
                                f"{', '.join('/' + n for n in self.routes) or 'none'})")
        up = urlsplit(route.upstream)
        secure = up.scheme == "https"
        port = up.port or (443 if secure else 80)
        context = ssl.create_default_context() if secure else None
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(up.hostname, port, ssl=context, server_hostname=up.hostname if secure else None,
                                        limit=CHUNK), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            raise _Refused(502, f"plan-runner: cannot reach the model endpoint {route.upstream} ({_reason(exc)})") \
                from None
        if "\r" in route.value or "\n" in route.value:
            up_writer.close()
            raise _Refused(500, "plan-runner: the model key contains a line break")
        kept = [(n, v) for n, v in headers if n not in _HOP_BY_HOP and n not in STRIPPED_HEADERS and n != "host"]
        netloc = f"{up.hostname}" if up.port is None else f"{up.hostname}:{up.port}"
        up_writer.write(_head(method, "/" + rest, [("host", netloc), *kept, (route.header, route.value)]))
        return up_reader, up_writer

    async def _splice(self, reader, writer, up_reader, up_writer, *, http: bool) -> None:
        """Bytes both ways until the far side is done: when it closes, the connection ends (a keep-alive client
        holds no slot after its response); when the client closes first, the far side has HALF_CLOSE_GRACE_S
        to finish its answer. For an HTTP request (not a tunnel) the response says `connection: close`."""
        down = asyncio.ensure_future(self._answer_back(up_reader, writer, http))
        up = asyncio.ensure_future(self._copy(reader, up_writer))
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
            if not down.done():
                await asyncio.wait({down}, timeout=HALF_CLOSE_GRACE_S)
        finally:
            for task in (down, up):
                task.cancel()
            await asyncio.gather(down, up, return_exceptions=True)

    async def _answer_back(self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, http: bool) -> None:
        """The far side's bytes to the client; an HTTP response's head first rewritten to `connection: close`:
        every request comes on a connection of its own, where it is checked (and its key replaced) again. A
        client told nothing would send its next request on this connection, which ends with this response."""
        if http:
            try:
                while True:
                    head = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), self._idle_s)
                    status, _, rest = head.partition(b"\r\n")
                    code = status.split(b" ", 2)[1] if status.count(b" ") else b""
                    if code.startswith(b"1") and code != b"101":  # 100 Continue, 103 Early Hints: as they are
                        writer.write(head)
                        continue
                    kept = [line for line in rest.split(b"\r\n")
                            if line and line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")]
                    writer.write(b"\r\n".join([status, *kept, b"connection: close", b"", b""]))
                    break
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, OSError):
                writer.close()
                return
        await self._copy(up_reader, writer)

    async def _copy(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await asyncio.wait_for(source.read(CHUNK), self._idle_s)
                if not data:
                    break
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except (OSError, asyncio.TimeoutError, RuntimeError):
            sink.close()


def _head(method: str, path: str, headers: list[tuple[str, str]]) -> bytes:
    """A request head for one request on a fresh connection (`connection: close`: the next request of a
    keep-alive client comes on a new connection, where it is checked again)."""
    lines = [f"{method} {path} HTTP/1.1", *(f"{n}: {v}" for n, v in headers), "connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def _answer(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 431: "Request Header Fields Too Large",
              500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}.get(status, "Error")
    body = (why + "\n").encode("utf-8", "replace")
    writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
                 f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode("ascii") + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()


def _authority(target: str) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise _Refused(400, f"plan-runner: CONNECT needs host:port, not {target!r}")
    return normalise_host(host), int(port)


def _is_local(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast


def _is_private(address: str) -> bool:
    """10/8, 172.16/12, 192.168/16, 100.64/10 (carrier NAT), fc00::/7 and the like: the machine's own networks."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _short_temp() -> str | None:
    """Where the socket's private folder goes: the temp folder, unless a TMPDIR so deep would make the socket's path
    too long for a unix socket (108 bytes), then /tmp or /dev/shm (sticky: the 0700 folder mkdtemp makes is ours)."""
    if len(os.fsencode(tempfile.gettempdir())) < 60:
        return None
    for short in ("/tmp", "/dev/shm"):
        try:
            if os.stat(short).st_mode & 0o1000 and os.access(short, os.W_OK | os.X_OK):
                return short
        except OSError:
            continue
    return None


def start_proxy(allow: AllowList, routes: tuple[Route, ...] = (), *, sock_dir: Path | None = None,
                max_connections: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S) -> NetProxy:
    """Start one run's proxy. `sock_dir`: a private folder for the socket (made 0700 here when not given; a unix
    socket's path must stay under 108 bytes). Close it with `close()` or a `with` block."""
    owns = sock_dir is None
    folder = Path(tempfile.mkdtemp(prefix="plan-runner-net-", dir=_short_temp())) if sock_dir is None else Path(sock_dir)
    path = folder / "net.sock"
    if len(os.fsencode(path)) >= 104:
        raise ValueError(f"the proxy's socket path is too long for a unix socket: {path}")
    proxy = NetProxy(allow, tuple(routes), path, owns_dir=owns, max_connections=max_connections,
                     idle_timeout_s=idle_timeout_s)
    proxy._start()
    return proxy
