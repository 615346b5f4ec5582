"""The gate battery, against real child processes and a real local HTTP server."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runner.core.evidence import GateResult
from runner.adapters.judge.gates import GateCache, GateEvent, body_failure, run_gates
from runner.core.plan import GateConfig

pytestmark = pytest.mark.integration

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}


def gate(**fields: object) -> GateConfig:
    return GateConfig.model_validate({"name": "g", **fields})


def run(gates: list[GateConfig], workdir: Path, **kwargs: object) -> tuple[GateResult, ...]:
    return run_gates(gates, workdir=workdir, env=ENV, **kwargs)


# ---- command gates -------------------------------------------------------------------------


def test_green_command_reports_exit_code_zero_and_output(tmp_path: Path) -> None:
    """A command that exits 0 is green, with its output captured."""
    (result,) = run([gate(run="echo hello; echo oops >&2")], tmp_path)
    assert result.passed and result.exit_code == 0 and result.kind == "command"
    assert "hello" in result.output_tail and "oops" in result.output_tail
    assert result.fingerprint == "" and not result.reran


def test_red_command_keeps_real_exit_code_and_fingerprint(tmp_path: Path) -> None:
    """A non-zero exit is red, with the real exit code and a failure fingerprint."""
    (result,) = run([gate(run="echo 'AssertionError: 3 != 4'; exit 3")], tmp_path)
    assert not result.passed and result.exit_code == 3
    assert "AssertionError" in result.output_tail
    assert len(result.fingerprint) == 16
    assert result.reran  # required: ran a second time


def test_gate_runs_in_cwd_with_merged_env(tmp_path: Path) -> None:
    """The gate runs in workdir/cwd with the given env plus the gate's own env."""
    (tmp_path / "sub").mkdir()
    g = gate(run='test "$(basename "$PWD")" = sub && test "$A$B" = 12', cwd="sub", env={"B": "2"})
    (result,) = run_gates([g], workdir=tmp_path, env={**ENV, "A": "1"})
    assert result.passed, result.output_tail


def test_missing_cwd_is_red_with_an_error(tmp_path: Path) -> None:
    """A gate whose cwd does not exist is red and says why instead of raising."""
    (result,) = run([gate(run="true", cwd="nope")], tmp_path)
    assert not result.passed and "does not exist" in (result.error or "")


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """A gate past its timeout is killed with its children and reported red and timed out."""
    marker = tmp_path / "child-survived"
    cmd = f"(sleep 1; touch {marker}) & sleep 30"
    started = time.monotonic()
    (result,) = run([gate(run=cmd, timeout_minutes="0.5s", required=False)], tmp_path)
    assert time.monotonic() - started < 5
    assert not result.passed and result.timed_out and result.exit_code is not None
    time.sleep(1.5)
    assert not marker.exists(), "a child of the timed-out gate kept running"


def test_background_child_holding_the_pipe_does_not_hang(tmp_path: Path) -> None:
    """A gate that exits while a background child keeps its output open still finishes."""
    started = time.monotonic()
    (result,) = run([gate(run="(sleep 30 &); echo done")], tmp_path)
    assert result.passed and "done" in result.output_tail
    assert time.monotonic() - started < 6


def test_child_escaping_the_process_group_does_not_hang(tmp_path: Path) -> None:
    """A child that leaves the process group and keeps the output pipe open cannot hold the gate."""
    started = time.monotonic()
    (result,) = run([gate(run="setsid sleep 4 & echo done")], tmp_path)
    assert result.passed and "done" in result.output_tail
    assert time.monotonic() - started < 3.5


def test_huge_output_keeps_memory_flat(tmp_path: Path) -> None:
    """A gate printing ~100 MB is streamed through a bounded tail: memory peak stays small."""
    cmd = "head -c 100000000 /dev/zero | tr '\\0' 'x'; echo; echo FINAL-LINE; exit 1"
    tracemalloc.start()
    try:
        (result,) = run([gate(run=cmd, required=False)], tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 1024 * 1024, f"peak {peak} bytes"
    assert not result.passed and result.exit_code == 1
    assert result.output_tail.endswith("FINAL-LINE\n")
    assert len(result.output_tail.encode()) <= 16384


def test_flaky_required_gate_is_green_and_marked(tmp_path: Path) -> None:
    """A required gate that fails once and passes on the re-run is green, flaky and reran."""
    cmd = "if [ -f first-done ]; then echo ok; else touch first-done; echo 'boom'; exit 1; fi"
    events: list[GateEvent] = []
    (result,) = run([gate(run=cmd)], tmp_path, on_event=events.append)
    assert result.passed and result.flaky and result.reran and result.fingerprint == ""
    assert "boom" in result.output_tail  # the first failure is the evidence of flakiness
    assert [e.kind for e in events] == ["start", "rerun", "finish"]


def test_required_gate_red_twice_stays_red(tmp_path: Path) -> None:
    """A required gate red on both runs is red with reran set and ran exactly twice."""
    (result,) = run([gate(run="echo x >> runs; exit 1")], tmp_path)
    assert not result.passed and result.reran and not result.flaky
    assert (tmp_path / "runs").read_text().count("x") == 2


def test_optional_gate_runs_once(tmp_path: Path) -> None:
    """An optional red gate is reported after one run and never re-run."""
    (result,) = run([gate(run="echo x >> runs; exit 1", required=False)], tmp_path)
    assert not result.passed and not result.required and not result.reran
    assert (tmp_path / "runs").read_text().count("x") == 1


def test_unstartable_shell_command_is_red(tmp_path: Path) -> None:
    """A command that does not exist is red with exit code 127 from the shell."""
    (result,) = run([gate(run="definitely-not-a-command-xyz", required=False)], tmp_path)
    assert not result.passed and result.exit_code == 127


# ---- cache ---------------------------------------------------------------------------------


def test_cache_hit_skips_the_run_for_the_same_tree(tmp_path: Path) -> None:
    """A green result is reused (cached=True) for the same tree and gate; a new tree runs again."""
    cache = GateCache(tmp_path / "cache" / "gates.json")
    g = gate(run="echo x >> runs")
    (first,) = run([g], tmp_path, tree_hash="t1", cache=cache)
    (second,) = run([g], tmp_path, tree_hash="t1", cache=cache)
    assert first.passed and not first.cached and second.passed and second.cached
    assert (tmp_path / "runs").read_text().count("x") == 1
    (third,) = run([g], tmp_path, tree_hash="t2", cache=cache)
    assert not third.cached and (tmp_path / "runs").read_text().count("x") == 2


def test_cache_misses_when_the_gate_definition_changes(tmp_path: Path) -> None:
    """Editing a gate's definition (here its timeout) is a cache miss."""
    cache = GateCache(tmp_path / "gates.json")
    run([gate(run="true")], tmp_path, tree_hash="t", cache=cache)
    (result,) = run([gate(run="true", timeout_minutes=3)], tmp_path, tree_hash="t", cache=cache)
    assert not result.cached


def test_red_results_are_not_cached(tmp_path: Path) -> None:
    """A red gate runs again on the same tree: red may come from the environment."""
    cache = GateCache(tmp_path / "gates.json")
    g = gate(run="echo x >> runs; exit 1", required=False)
    run([g], tmp_path, tree_hash="t", cache=cache)
    (again,) = run([g], tmp_path, tree_hash="t", cache=cache)
    assert not again.cached and (tmp_path / "runs").read_text().count("x") == 2


def test_corrupt_cache_file_is_ignored_and_rewritten(tmp_path: Path) -> None:
    """A corrupt cache file is a miss, and the next store replaces it with valid JSON."""
    path = tmp_path / "gates.json"
    path.write_text("{not json")
    cache = GateCache(path)
    (result,) = run([gate(run="true")], tmp_path, tree_hash="t", cache=cache)
    assert result.passed and not result.cached
    assert "entries" in json.loads(path.read_text())
    assert run([gate(run="true")], tmp_path, tree_hash="t", cache=cache)[0].cached


def test_no_tree_hash_means_no_caching(tmp_path: Path) -> None:
    """Without a tree hash nothing is cached or reused."""
    cache = GateCache(tmp_path / "gates.json")
    run([gate(run="true")], tmp_path, cache=cache)
    assert not (tmp_path / "gates.json").exists()


# ---- http gates ----------------------------------------------------------------------------

RESPONSES: dict[str, tuple[int, str, str]] = {
    "/ok": (200, "application/json", '{"status": "ok", "errors": []}'),
    "/success-false": (200, "application/json", '{"success": false}'),
    "/ok-false": (200, "application/json", '{"ok": false, "data": 1}'),
    "/down": (200, "application/json", '{"status": "DOWN"}'),
    "/unhealthy": (200, "application/json", '{"healthy": false}'),
    "/errors": (200, "application/json", '{"data": null, "errors": [{"message": "db gone"}]}'),
    "/error-string": (200, "text/plain", '{"error": "migration pending"}'),
    "/plain": (200, "text/plain", "OK"),
    "/broken-json": (200, "application/json", "{not json"),
    "/500": (500, "application/json", '{"success": true}'),
    "/404": (404, "text/html", "<h1>nope</h1>"),
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/slow":
            time.sleep(1.5)
            status, ctype, body = 200, "text/plain", "late"
        else:
            status, ctype, body = RESPONSES[self.path]
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body.encode())))
            self.end_headers()
            self.wfile.write(body.encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout test); nothing to report

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = False  # server_close joins handler threads: nothing outlives the test
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.mark.parametrize("path", ["/ok", "/plain", "/broken-json"])
def test_http_gate_green_for_2xx_without_failure_report(server: str, tmp_path: Path, path: str) -> None:
    """A 2xx whose body does not report failure is green."""
    (result,) = run([gate(http=server + path)], tmp_path)
    assert result.passed and result.http_status == 200 and result.kind == "http"


@pytest.mark.parametrize(
    "path", ["/success-false", "/ok-false", "/down", "/unhealthy", "/errors", "/error-string"]
)
def test_http_gate_red_when_2xx_body_reports_failure(server: str, tmp_path: Path, path: str) -> None:
    """A 200 whose body reports failure is red, with the body in the tail and the reason recorded."""
    (result,) = run([gate(http=server + path, required=False)], tmp_path)
    assert not result.passed and result.http_status == 200
    assert "reports failure" in (result.error or "")
    assert result.output_tail == RESPONSES[path][2]


@pytest.mark.parametrize("path,status", [("/500", 500), ("/404", 404)])
def test_http_gate_red_for_non_2xx(server: str, tmp_path: Path, path: str, status: int) -> None:
    """A non-2xx status is red even when the body claims success."""
    (result,) = run([gate(http=server + path, required=False)], tmp_path)
    assert not result.passed and result.http_status == status and result.error == f"HTTP {status}"


def test_http_gate_red_on_connection_refused(tmp_path: Path) -> None:
    """A transport error (nothing listening) is red with the error recorded."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (result,) = run([gate(http=f"http://127.0.0.1:{port}/health")], tmp_path)
    assert not result.passed and result.http_status is None and "Connect" in (result.error or "")
    assert result.reran


def test_http_gate_times_out(server: str, tmp_path: Path) -> None:
    """An HTTP gate slower than its timeout is red and timed out."""
    (result,) = run([gate(http=server + "/slow", timeout_minutes="0.3s", required=False)], tmp_path)
    assert not result.passed and result.timed_out


def test_http_gates_are_never_cached(server: str, tmp_path: Path) -> None:
    """HTTP gates run every time even with a cache and a tree hash."""
    cache = GateCache(tmp_path / "gates.json")
    g = gate(http=server + "/ok")
    run([g], tmp_path, tree_hash="t", cache=cache)
    (again,) = run([g], tmp_path, tree_hash="t", cache=cache)
    assert again.passed and not again.cached


def test_body_failure_ignores_empty_error_fields() -> None:
    """Empty or null `error`/`errors` and a healthy status do not report failure."""
    for body in ('{"error": null}', '{"errors": []}', '{"error": ""}', '{"status": "pass"}', "[1, 2]"):
        assert body_failure(body.encode(), "application/json") is None, body


# ---- checks gates --------------------------------------------------------------------------


def test_checks_gate_without_runner_cannot_decide(tmp_path: Path) -> None:
    """Without GitHub a checks gate is reported as not checkable and does not count as required."""
    (result,) = run([gate(checks=["ci"])], tmp_path)
    assert not result.passed and not result.required and result.error == "remote checks need GitHub"
    assert not result.reran


def test_checks_gate_uses_the_injected_runner(tmp_path: Path) -> None:
    """A checks gate is delegated to the injected runner, and re-run when required and red."""
    calls: list[str] = []

    def checks_runner(g: GateConfig) -> GateResult:
        calls.append(g.name)
        return GateResult(name=g.name, kind="checks", passed=len(calls) > 1)

    (result,) = run([gate(checks=["ci"])], tmp_path, checks_runner=checks_runner)
    assert calls == ["g", "g"] and result.passed and result.flaky


def test_results_come_back_in_gate_order(tmp_path: Path) -> None:
    """Every gate yields one result, in the order the plan lists them."""
    gates = [
        GateConfig(name="a", run="true"),
        GateConfig(name="b", run="false", required=False),
        GateConfig(name="c", run="true"),
    ]
    results = run(gates, tmp_path)
    assert [(r.name, r.passed) for r in results] == [("a", True), ("b", False), ("c", True)]
