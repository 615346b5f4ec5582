"""The allow-list proxy (runner.adapters.netproxy) over its real unix socket, against real local servers.

What the sandbox relies on: CONNECT and plain HTTP reach only what the run's allow-list names; an allowed name
is never a way to the machine's own ports; the model route strips whatever key the client sent and adds the
real one; refusals are counted once per destination; memory and connections stay bounded.
The same proxy behind the relay inside `bwrap --unshare-net`: tests/integration/test_netproxy_bwrap.py.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.adapters.netproxy import start_proxy
from runner.core.network import ANTHROPIC_SECRETS, PLACEHOLDER_KEY, AllowList, Route, expand
from tests.servers.messages import MessagesServer, reply

pytestmark = pytest.mark.integration


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = self.request.recv(65536)
        if data.startswith(b"GET "):  # a plain HTTP request: answer it
            body = b"plain " + data.split(b" ", 2)[1]
            self.request.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        else:
            self.request.sendall(b"echo:" + data)


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server on the machine's loopback: what a sandboxed run must not reach unless a rule names it."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _talk(path: Path, head: bytes, then: bytes = b"") -> bytes:
    """Send a request head (and bytes after it) on the proxy's socket; everything it answers until it closes."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(head)
        if then:
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = s.recv(65536)
                if not chunk:
                    return answer
                answer += chunk
            if not answer.startswith(b"HTTP/1.1 200"):  # refused: the proxy closes after its answer
                then = b""
            else:
                s.sendall(then)
                s.shutdown(socket.SHUT_WR)
        else:
            answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _connect(path: Path, target: str, then: bytes = b"ping") -> bytes:
    return _talk(path, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode(), then)


def test_connect_reaches_only_the_allowed(echo: int, tmp_path: Path) -> None:
    """CONNECT to a listed host:port is spliced through; an unlisted port of the same host is a 403."""
    with start_proxy(expand([f"127.0.0.1:{echo}"])) as proxy:
        ok = _connect(proxy.socket_path, f"127.0.0.1:{echo}")
        assert ok.startswith(b"HTTP/1.1 200") and ok.endswith(b"echo:ping")
        refused = _connect(proxy.socket_path, f"127.0.0.1:{echo + 1 if echo < 65535 else echo - 1}")
        assert refused.startswith(b"HTTP/1.1 403") and b"echo:" not in refused
        assert b"not in this run's network allow-list" in refused


def test_a_long_temp_folder_still_gets_a_proxy(echo: int, tmp_path: Path, monkeypatch) -> None:
    """A TMPDIR whose path leaves no room for a unix socket's (108 bytes): the proxy's folder goes somewhere short
    (/tmp, /dev/shm) instead of failing every session that starts one."""
    long = tmp_path / ("t" * 90)
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr("tempfile.tempdir", None)
    with start_proxy(expand([f"127.0.0.1:{echo}"])) as proxy:
        assert len(str(proxy.socket_path)) < 104 and not str(proxy.socket_path).startswith(str(long))
        assert _connect(proxy.socket_path, f"127.0.0.1:{echo}").endswith(b"echo:ping")
    assert not proxy.socket_path.parent.exists()


def test_an_allowed_name_never_reaches_the_machine(echo: int) -> None:
    """`*` (any host) still refuses loopback and link-local (cloud metadata) addresses: only a rule naming the
    address itself reaches one."""
    with start_proxy(expand(["*", f"*:{echo}"])) as proxy:
        for target in (f"127.0.0.1:{echo}", f"localhost:{echo}", f"[::1]:{echo}", "169.254.169.254:80"):
            answer = _connect(proxy.socket_path, target)
            assert answer.startswith(b"HTTP/1.1 403") and b"a local address" in answer, (target, answer)
        assert {r.why.split(" ")[0] for r in proxy.refused()} == {"resolves"}
    with start_proxy(expand([f"localhost:{echo}"])) as proxy:
        assert _connect(proxy.socket_path, f"localhost:{echo}").endswith(b"echo:ping")


def test_any_host_means_public_hosts() -> None:
    """`*` does not cover the machine's private networks (10/8, 192.168/16, a docker bridge, fc00::/7): those are
    reached only by a rule naming them."""
    with start_proxy(expand(["*"])) as proxy:
        for target in ("10.1.2.3:443", "192.168.0.1:80", "172.17.0.1:443", "[fd00::1]:443"):
            answer = _connect(proxy.socket_path, target)
            assert answer.startswith(b"HTTP/1.1 403") and b"a private address" in answer, (target, answer)


def test_plain_http_is_forwarded_only_when_allowed(echo: int) -> None:
    with start_proxy(expand([f"127.0.0.1:{echo}"])) as proxy:
        ok = _talk(proxy.socket_path, f"GET http://127.0.0.1:{echo}/simple/?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{echo}\r\n"
                                      f"Proxy-Authorization: Basic eA==\r\n\r\n".encode())
        assert ok.startswith(b"HTTP/1.1 200") and ok.endswith(b"plain /simple/?q=1")
        refused = _talk(proxy.socket_path, b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        assert refused.startswith(b"HTTP/1.1 403")
        https = _talk(proxy.socket_path, b"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        assert https.startswith(b"HTTP/1.1 400") and b"CONNECT" in https


def test_refusals_are_counted_once_per_destination() -> None:
    """Twelve attempts at one host are one entry of twelve, for one line in the session's report."""
    with start_proxy(AllowList()) as proxy:
        for _ in range(12):
            _connect(proxy.socket_path, "api.example.com:443")
        _connect(proxy.socket_path, "other.example.com:22")
        assert [(r.host, r.port, r.count) for r in proxy.refused()] == [("api.example.com", 443, 12),
                                                                       ("other.example.com", 22, 1)]
        assert str(proxy.refused()[0]) == "api.example.com:443 (12x, not allowed)"


def test_refusals_stay_bounded() -> None:
    """An agent probing thousands of names cannot grow plan-runner's memory: past 100 they are counted together."""
    with start_proxy(AllowList()) as proxy:
        for i in range(130):
            _connect(proxy.socket_path, f"h{i}.example.com:443")
        rows = proxy.refused()
        assert len(rows) == 101 and rows[0].count == 30 and rows[0].host == "30 more destinations"


def test_connections_are_bounded() -> None:
    """Past `max_connections` open at once, a connection gets a 503 at once, not a queue."""
    with start_proxy(AllowList(), max_connections=2) as proxy:
        held = []
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(proxy.socket_path))
            held.append(s)
        time.sleep(0.2)
        assert _connect(proxy.socket_path, "x.example.com:443").startswith(b"HTTP/1.1 503")
        for s in held:
            s.close()
        time.sleep(0.2)
        assert _connect(proxy.socket_path, "x.example.com:443").startswith(b"HTTP/1.1 403")


def test_bad_heads_are_answered_not_crashed_on() -> None:
    with start_proxy(AllowList()) as proxy:
        assert _talk(proxy.socket_path, b"GET / HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431")
        assert _talk(proxy.socket_path, b"GET / HTTP/1.1\r\nbad header\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _talk(proxy.socket_path, b"CONNECT nohost HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _talk(proxy.socket_path, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 404")
        assert _connect(proxy.socket_path, "x.example.com:443").startswith(b"HTTP/1.1 403")  # still serving


def _route(srv: MessagesServer, header: str = "x-api-key", value: str = "sk-ant-real-key") -> Route:
    return Route("anthropic", srv.url, header, value, "ANTHROPIC_BASE_URL", ANTHROPIC_SECRETS, "ANTHROPIC_API_KEY")


def test_the_route_replaces_every_key_the_client_sends() -> None:
    """Whatever key headers the client sends (placeholder, a guessed key, a Bearer token, twice), upstream
    receives exactly one: the real one."""
    with MessagesServer() as srv, start_proxy(AllowList(), (_route(srv),)) as proxy:
        srv.enqueue(reply("hi"))
        body = b'{"model":"claude-test-1","max_tokens":5,"messages":[{"role":"user","content":"x"}]}'
        answer = _talk(proxy.socket_path,
                       b"POST /anthropic/v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n"
                       b"X-Api-Key: " + PLACEHOLDER_KEY.encode() + b"\r\nx-api-key: sk-guessed\r\n"
                       b"Authorization: Bearer stolen\r\nProxy-Authorization: Basic eA==\r\n"
                       b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        assert answer.startswith(b"HTTP/1.") and b" 200 " in answer.split(b"\r\n")[0] and b'"hi"' in answer
        (seen,) = srv.requests
        assert seen.path == "/v1/messages?beta=true" and seen.json["max_tokens"] == 5
        assert seen.headers["x-api-key"] == "sk-ant-real-key"
        assert "authorization" not in seen.headers and "proxy-authorization" not in seen.headers
        assert seen.headers["host"] == srv.url.removeprefix("http://")
        assert proxy.refused() == ()


def test_the_route_adds_a_bearer_token() -> None:
    with MessagesServer() as srv, start_proxy(AllowList(), (_route(srv, "authorization", "Bearer oat-real"),)) as proxy:
        _talk(proxy.socket_path, b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: placeholder\r\n"
                                 b"content-length: 2\r\n\r\n{}")
        (seen,) = srv.requests
        assert seen.headers["authorization"] == "Bearer oat-real" and "x-api-key" not in seen.headers


def test_the_real_sdk_through_the_relay(tmp_path: Path) -> None:
    """The anthropic SDK, configured only by the environment `sandbox_env` gives it, reaches the model through
    the relay and the proxy (on the host's loopback here; inside bwrap in test_netproxy_bwrap.py)."""
    import os
    import subprocess
    import sys

    from runner.adapters.netproxy import relay_argv

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with MessagesServer() as srv, start_proxy(AllowList(), (_route(srv),)) as proxy:
        srv.enqueue(reply("through the relay"))
        env = proxy.sandbox_env({"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": "sk-ant-real-key",
                                 "ANTHROPIC_BASE_URL": srv.url}, port=port)
        assert "sk-ant-real-key" not in env.values() and env["ANTHROPIC_API_KEY"] == PLACEHOLDER_KEY
        assert env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}/anthropic"
        code = ("import anthropic; m = anthropic.Anthropic(max_retries=0).messages.create(model='claude-test-1', "
                "max_tokens=9, messages=[{'role': 'user', 'content': 'hi'}]); print(m.content[0].text)")
        argv = relay_argv([sys.executable, "-c", code], python=sys.executable, socket=str(proxy.socket_path), port=port)
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "through the relay"
        assert srv.requests[0].headers["x-api-key"] == "sk-ant-real-key"


def test_sandbox_env_holds_no_key_of_the_host() -> None:
    """Every model key and endpoint of the host's goes; a route puts its placeholder and address in; every proxy
    variable points at the relay, loopback excepted."""
    host = {"ANTHROPIC_API_KEY": "a", "ANTHROPIC_AUTH_TOKEN": "b", "CLAUDE_CODE_OAUTH_TOKEN": "c",
            "OPENAI_API_KEY": "d", "CODEX_API_KEY": "e", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
            "OPENAI_BASE_URL": "x", "no_proxy": "*", "HOME": "/h"}
    with start_proxy(AllowList()) as proxy:
        env = proxy.sandbox_env(host, port=3128)
    assert env["HOME"] == "/h" and not {"a", "b", "c", "d", "e", "x", "http://127.0.0.1:1"} & set(env.values())
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


def test_close_cuts_connections_and_removes_the_socket(echo: int) -> None:
    proxy = start_proxy(expand([f"127.0.0.1:{echo}"]))
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(proxy.socket_path))
    s.sendall(f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert s.recv(100).startswith(b"HTTP/1.1 200")
    folder = proxy.socket_path.parent
    proxy.close()
    s.settimeout(5)
    assert s.recv(100) == b""  # the tunnel is cut
    s.close()
    assert not folder.exists()
    proxy.close()  # idempotent


class _TlsModel:
    """An HTTPS endpoint on the machine's loopback with a certificate from a test CA (trustme): records the
    headers it receives and answers 200."""

    def __init__(self, cert) -> None:  # noqa: ANN001 - a trustme LeafCert
        import http.server
        import ssl

        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length", 0)))
                seen.append({k.lower(): v for k, v in self.headers.items()} | {":path": self.path})
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"https://localhost:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_route_goes_over_verified_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """To an https endpoint the key travels over TLS, and only to a certificate the machine trusts: with the test
    CA trusted the request arrives with the real key; with it not trusted, the proxy answers 502 and sends
    nothing."""
    import trustme

    ca = trustme.CA()
    endpoint = _TlsModel(ca.issue_cert("localhost"))
    route = Route("anthropic", endpoint.url, "x-api-key", "sk-over-tls", "ANTHROPIC_BASE_URL", ANTHROPIC_SECRETS,
                  "ANTHROPIC_API_KEY")
    request = b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: p\r\ncontent-length: 2\r\n\r\n{}"
    try:
        with start_proxy(AllowList(), (route,)) as proxy:
            untrusted = _talk(proxy.socket_path, request)
        assert untrusted.startswith(b"HTTP/1.1 502") and b"cannot reach the model endpoint" in untrusted
        assert endpoint.seen == []
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
        with start_proxy(AllowList(), (route,)) as proxy:
            trusted = _talk(proxy.socket_path, request)
        assert trusted.startswith(b"HTTP/1.0 200") and trusted.endswith(b"ok")
        (seen,) = endpoint.seen
        assert seen["x-api-key"] == "sk-over-tls" and seen[":path"] == "/v1/messages"
        assert seen["host"] == endpoint.url.removeprefix("https://")
    finally:
        endpoint.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _relays_on(port: int) -> list[str]:
    """Pids of relay processes listening for `port` (their command line holds the relay's source and the port)."""
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"plan-runner relay" in b" ".join(argv) and str(port).encode() in argv:
            found.append(pid)
    return found


def test_the_relay_execs_the_command_and_dies_with_it(tmp_path: Path) -> None:
    """The command keeps the relay's pid (exec) and its stdio; the relay is gone once the command is, even with
    no PID namespace to end it; a command that cannot start is exit 127 with the reason."""
    import subprocess
    import sys

    from runner.adapters.netproxy import relay_argv

    port = _free_port()
    with start_proxy(AllowList()) as proxy:
        argv = relay_argv([sys.executable, "-c", "import os; print(os.getpid())"], python=sys.executable,
                          socket=str(proxy.socket_path), port=port)
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0 and int(out) == child.pid
        deadline = time.monotonic() + 5
        while _relays_on(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _relays_on(port) == []
        missing = subprocess.run(relay_argv([str(tmp_path / "no-such-program")], python=sys.executable,
                                            socket=str(proxy.socket_path), port=_free_port()),
                                 capture_output=True, text=True, timeout=60)
        assert missing.returncode == 127 and "cannot run" in missing.stderr and "no-such-program" in missing.stderr


def test_a_keep_alive_client_holds_no_slot_after_its_answer() -> None:
    """The far side closing ends the connection: a client that keeps its socket open (an HTTP pool) does not
    hold one of the bounded slots after its response."""
    with MessagesServer() as srv, start_proxy(AllowList(), (_route(srv),), max_connections=1) as proxy:
        pooled = socket.socket(socket.AF_UNIX)
        pooled.settimeout(10)
        pooled.connect(str(proxy.socket_path))
        pooled.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n{}")
        answer = b""
        while chunk := pooled.recv(65536):  # the proxy closes once the server has
            answer += chunk
        assert b" 200 " in answer.split(b"\r\n")[0]
        time.sleep(0.2)
        # the first client's socket is still open on its side; the one slot is free again
        assert _connect(proxy.socket_path, "x.example.com:443").startswith(b"HTTP/1.1 403")
        pooled.close()


KEEP_ALIVE_CLIENT = r"""
import httpx, sys
base, n = sys.argv[1], int(sys.argv[2])
body = {"model": "claude-test-1", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
with httpx.Client(trust_env=False) as client:  # one pooled connection, reused while the server allows it
    codes = [client.post(base + "/v1/messages", json=body, headers={"x-api-key": "p"}).status_code for _ in range(n)]
print(" ".join(map(str, codes)))
"""


def test_a_pooled_client_makes_request_after_request() -> None:
    """Every answer through the proxy says `connection: close` (each request comes on a connection of its own,
    checked again), so a pooled HTTP client never sends a request into a connection that is ending."""
    import subprocess
    import sys

    from runner.adapters.netproxy import relay_argv

    port = _free_port()
    with MessagesServer() as srv, start_proxy(AllowList(), (_route(srv),)) as proxy:
        argv = relay_argv([sys.executable, "-c", KEEP_ALIVE_CLIENT, f"http://127.0.0.1:{port}/anthropic", "40"],
                          python=sys.executable, socket=str(proxy.socket_path), port=port)
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split() == ["200"] * 40
        assert len(srv.requests) == 40 and {r.headers["x-api-key"] for r in srv.requests} == {"sk-ant-real-key"}
