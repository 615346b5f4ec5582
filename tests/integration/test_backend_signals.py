"""Zero output, every dollar counted, and an unreachable endpoint: the backends' signals (issue 24, items 2-4).

The stream-json cases run the REAL Claude Code CLI ($PLAN_RUNNER_CLAUDE) against the scripted Messages server
or a closed port; the rest read recorded CLI lines (/work/shared/fixtures/claude-code) or build records.
"""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import git
import pytest

from core_builders import T0, evidence, plan, record, signals, work_commit
from runner.backends import get_backend
from runner.backends.common.meter import anthropic_cost, budget_tokens, read_meter, write_meter
from runner.backends.claude_code.streamjson import StreamJsonParser, parse_stream
from runner.core.actions import Outcome, Park
from runner.core.evidence import ExitKind
from runner.core.ledger import SessionRecord
from runner.core.outcome import classify
from runner.core.plan import BudgetConfig
from runner.core.policy import decide_next, fold
from runner.drivers.cli.progress import cost_text
from tests.agent_helpers import fast_backend, interruptible, make_request
from tests.servers.messages import MessagesServer, hang, reply, tool_use
from tests.integration.test_backend_claude_code import _request, repo, srv  # noqa: F401  (fixtures)

FIXTURES = Path("/work/shared/fixtures/claude-code")
INIT = (FIXTURES / "tool-use-success.jsonl").read_text().splitlines()[0]
RETRY = ('{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":582,'
         '"error_status":null,"error":"unknown","session_id":"8188d021-f595-46a2-afc1-78fcc5ed00cd"}')


def _assistant(msg_id: str, usage: dict, text: str = "working") -> str:
    return json.dumps({"type": "assistant", "session_id": "s1", "message": {
        "id": msg_id, "model": "claude-sonnet-4-5", "role": "assistant", "usage": usage,
        "content": [{"type": "text", "text": text}]}})


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# ---- 2. zero output means no output from the agent's work ----------------------------------------


def test_cli_start_up_and_retry_lines_are_not_output():
    """Claude Code's system/init and api_retry lines are the CLI's own: a stall after them is zero-output."""
    sig = parse_stream([INIT, RETRY], reason="stalled", returncode=None)
    assert sig.exit_kind is ExitKind.STALLED and sig.output_bytes == 0
    worked = parse_stream((FIXTURES / "tool-use-success.jsonl").read_text().splitlines())
    assert worked.output_bytes > 0


def test_two_zero_output_stalls_of_claude_code_park_the_plan():
    """The rule "two zero-output stalls in a row park the plan" fires for Claude Code (it always prints init)."""
    sig = parse_stream([INIT], reason="stalled", returncode=None)
    verdict = classify(evidence(commits=(), gates=(), signals=sig))
    assert verdict.outcome is Outcome.STALLED and verdict.zero_output
    records = [record(n, Outcome.STALLED, zero_output=verdict.zero_output, agent_session_id=sig.agent_session_id)
               for n in (1, 2)]
    action = decide_next(verdict, fold(records), plan())
    assert isinstance(action, Park) and "no output at all" in action.reason


def test_a_session_that_committed_is_never_no_output_at_all():
    """A silent stall after the agent committed work is a stall, not "no output at all"."""
    silent = signals(ExitKind.STALLED, output_bytes=0)
    assert classify(evidence(commits=(work_commit(),), signals=silent)).zero_output is False
    assert classify(evidence(commits=(), signals=silent)).zero_output is True


# ---- 3. every dollar counted ----------------------------------------------------------------------


def test_a_session_cut_short_is_costed_as_an_estimate_and_a_lower_bound():
    """No result line (killed, stalled): the usage seen is priced from the list and marked `≥`."""
    usage = {"input_tokens": 1000, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 70000,
             "output_tokens": 500}
    init = json.dumps({**json.loads(INIT), "model": "claude-sonnet-4-5"})
    sig = parse_stream([init, _assistant("m1", usage), _assistant("m1", usage)], reason="stalled", returncode=None)
    assert sig.total_tokens == 73500
    assert sig.cost_usd == anthropic_cost("claude-sonnet-4-5", 73000, 500, 70000, 2000) and sig.cost_usd > 0
    assert sig.cost_estimated and sig.cost_lower_bound
    finished = parse_stream((FIXTURES / "tool-use-success.jsonl").read_text().splitlines())
    assert not finished.cost_estimated and not finished.cost_lower_bound


def test_the_session_budget_weighs_cache_reads_at_a_tenth():
    """A resumed session whose input is mostly cached is metered by what it costs, not at full weight."""
    parser = StreamJsonParser()
    parser.feed(_assistant("m1", {"input_tokens": 100, "cache_read_input_tokens": 90_000, "output_tokens": 900}))
    assert parser.live_tokens == 91_000
    assert parser.budget_tokens == budget_tokens(100, 900, 90_000) == 10_000


def test_interrupted_sessions_cost_counts_toward_max_cost(tmp_path: Path):
    """The meter file's reading of the session in hand is taken; a stale one from an earlier session is not;
    an interrupted session's cost counts toward max_cost_usd."""
    write_meter(tmp_path, 73_000, 0.31, True)
    assert read_meter(tmp_path, datetime.now(UTC) - timedelta(seconds=5)).tokens == 73_000
    assert read_meter(tmp_path, datetime.now(UTC) + timedelta(seconds=5)) is None  # written before it started
    state = fold([SessionRecord(n=1, kind="delivery", checkpoint="1.1", started_at=T0, finished_at=T0,
                                outcome=Outcome.INTERRUPTED, blame="none", rule=0, tokens=73_000, cost_usd=0.6,
                                cost_lower_bound=True)])
    assert state.cost_usd == 0.6
    v = classify(evidence())
    action = decide_next(v, fold([record(2, cost_usd=0.5)], state), plan(budget=BudgetConfig(max_cost_usd=1.0)))
    assert isinstance(action, Park) and "max_cost_usd" in action.reason
    assert cost_text(0.6, True) == "≥ $0.6000" and cost_text(0.6) == "$0.6000" and cost_text(None, True) == "-"


# ---- through the real Claude Code CLI ---------------------------------------------------------------


@pytest.mark.e2e
def test_real_cli_stall_after_init_is_zero_output(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """The real CLI prints its init line, then the API hangs: STALLED with no work output, zero-output verdict."""
    srv.enqueue(hang())
    # 8 s: the stall counts from the CLI's start, and on a loaded machine (a real model beside it) the CLI took
    # more than 3 s to print its init line, so the test saw a stall before any session id
    sig = get_backend("claude-code").run(_request(srv, repo, tmp_path, stall_minutes="8s"))
    assert sig.exit_kind is ExitKind.STALLED, sig.error
    assert sig.agent_session_id and sig.output_bytes == 0
    assert classify(evidence(commits=(), gates=(), signals=sig)).zero_output


@pytest.mark.e2e
def test_real_cli_meter_file_holds_the_last_reading(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """While the CLI works the meter file holds its live usage (what an interrupted session is recorded with);
    at the end, the CLI's final account."""
    srv.enqueue(reply(tool_use("Bash", {"command": "sleep 1; echo hi", "description": "hi"}),
                      usage={"input_tokens": 1200, "output_tokens": 30}),
                reply("done", usage={"input_tokens": 1300, "output_tokens": 20}))
    started = datetime.now(UTC)
    request = _request(srv, repo, tmp_path)
    sig = get_backend("claude-code").run(request)
    assert sig.exit_kind is ExitKind.FINISHED, sig.error
    reading = read_meter(request.transcript_dir, started)
    assert reading is not None and reading.tokens == sig.total_tokens >= 2500  # the final account replaces the live one
    assert reading.cost_usd == sig.cost_usd
    assert sig.output_bytes > 0


@pytest.mark.e2e
def test_real_cli_unreachable_endpoint_ends_within_seconds(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """Claude Code pointed at a closed port: recognised within seconds (the CLI would retry 10 times over
    minutes), shown as unreachable, and the error names the URL and the fix."""
    url = _closed_port()
    events: list = []
    started = time.monotonic()
    sig = get_backend("claude-code").run(_request(srv, repo, tmp_path, extra_env={"ANTHROPIC_BASE_URL": url},
                                                  events=events))
    assert time.monotonic() - started < 20
    assert sig.exit_kind is ExitKind.TRANSIENT, sig.error
    assert "cannot be reached" in sig.error and "connection refused" in sig.error and url in sig.error
    assert "ANTHROPIC_API_KEY" in sig.error
    assert ("unreachable", url) in events
    assert any(kind == "retry" and "no answer" in detail for kind, detail in events)
    assert sig.output_bytes == 0


def test_anthropic_backend_unreachable_endpoint_ends_at_once(tmp_path: Path) -> None:
    """The anthropic backend against a closed port: no retries, the error says what and how to fix it."""
    url = _closed_port()
    events: list = []
    sig = fast_backend(max_retries=5).run(make_request(tmp_path, url, events=events))
    assert sig.exit_kind is ExitKind.TRANSIENT
    assert "connection refused" in (sig.error or "") and url in (sig.error or "")
    assert ("unreachable", url) in events


def test_endpoint_credentials_are_never_shown() -> None:
    """A base URL with a user and password in it is shown without them."""
    from runner.backends.common.endpoint import shown, unreachable_reason

    assert shown("https://me:s3cret@proxy.example:8443/v1") == "https://proxy.example:8443/v1"
    assert "s3cret" not in unreachable_reason("http://me:s3cret@127.0.0.1:9", "ANTHROPIC_API_KEY", timeout_s=1)


def test_anthropic_backend_unresolvable_host_is_unreachable(tmp_path: Path) -> None:
    """A name that does not resolve (DNS) is named as such."""
    sig = fast_backend(max_retries=5).run(make_request(tmp_path, "http://no-such-host.invalid"))
    assert sig.exit_kind is ExitKind.TRANSIENT and "does not resolve" in (sig.error or "")


@pytest.mark.e2e
def test_ctrl_c_during_a_real_claude_session_records_what_it_spent(srv: MessagesServer, tmp_path: Path) -> None:
    """plan-runner stopped while the real CLI works: the Interrupted record carries the meter's last reading
    (tokens, cost marked a lower bound), so it counts toward max_cost_usd; `status` says the total is a bound."""
    import os
    import signal as signals_
    import subprocess
    import sys

    from tests.integration.test_backend_claude_code import _claude
    from tests.e2e.test_first_hour import AGENT_IDENTITY, ROOT, cli, make_repo
    from tests.reliability_world import git, ledger

    srv.enqueue(reply(tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(60)'", "description": "wait"}),
                      usage={"input_tokens": 2000, "cache_read_input_tokens": 30000, "output_tokens": 40}))
    repo = make_repo(tmp_path, backend="claude-code", agent_extra=f"executable: {_claude()}")
    plan_file = repo / "plans" / "calc.md"  # the CLI's own prompt is ~14k tokens: room for one call
    plan_file.write_text(plan_file.read_text().replace("session_tokens: 10000", "session_tokens: 600000"))
    git(repo, "commit", "-q", "-am", "budget")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    env.update(PYTHONPATH=str(ROOT), ANTHROPIC_BASE_URL=srv.url, ANTHROPIC_API_KEY="sk-test-dummy", **AGENT_IDENTITY)
    proc = subprocess.Popen([sys.executable, "-m", "runner", "run", "plans/calc.md"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 90
    while not srv.message_requests and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(3)  # the CLI reads the reply and starts its tool: the meter has its reading
    proc.send_signal(signals_.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    records = [x for x in ledger(repo) if x["type"] == "session"]
    # the live reading (input and cache reads of the call seen; its output still streaming): a lower bound
    assert [r["outcome"] for r in records] == ["Interrupted"], [(r["outcome"], r["tokens"], r["reasons"]) for r in records]
    assert records[0]["tokens"] >= 32000 and records[0]["cost_lower_bound"] is True
    status = json.loads(cli(repo, "status", "--json", env={"ANTHROPIC_API_KEY": "x"}).stdout)[0]
    assert status["tokens"] >= 32000 and status["cost_lower_bound"] is True


@pytest.mark.e2e
def test_a_session_that_never_reached_the_model_runs_no_setup_or_gates(tmp_path: Path) -> None:
    """Claude Code pointed at a closed port, through `plan-runner session`: ended within seconds, no `setup:`
    (beyond the preflight's and the agent's clone's, before the agent) and no gate run for it, a short backoff, and the record says what failed and how to fix it."""
    from tests.integration.test_backend_claude_code import _claude
    from tests.e2e.test_first_hour import cli, make_repo
    from tests.reliability_world import git, ledger

    url = _closed_port()
    marker = tmp_path / "setup-ran"
    repo = make_repo(tmp_path, backend="claude-code", agent_extra=f"executable: {_claude()}",
                     gate=f"touch {tmp_path / 'gate-ran'}")
    plan_file = repo / "plans" / "calc.md"
    plan_file.write_text(plan_file.read_text().replace(
        "isolation: none\n", f"isolation: none\nsetup:\n  run:\n    - pwd >> {marker}\n"))
    git(repo, "commit", "-q", "-am", "setup")
    started = time.monotonic()
    done = cli(repo, "session", "plans/calc.md", "--json",
               env={"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test-dummy"})
    assert time.monotonic() - started < 60, done.stderr
    assert done.stdout.strip(), done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["outcome"] == "LimitBackoff", out
    # `setup:` ran before the agent only: the preflight's check of the base (in the gates' folder) and the agent's
    # own clone (issue 27); none after it, for judging, and no gate ran.
    ran_in = [Path(line).name for line in marker.read_text().splitlines()]
    assert ran_in == ["gates", "work"], ran_in
    assert out["gates"] == [] and not (tmp_path / "gate-ran").exists()
    (record,) = [x for x in ledger(repo) if x["type"] == "session"]
    assert any("cannot be reached" in r and "connection refused" in r and url in r for r in record["reasons"])
    assert record["next_action"]["action"] == "wait"


def test_codex_thread_and_turn_events_are_not_output():
    """Codex's `thread.started`/`turn.started` (and a reconnect notice) are its own: no work output; an item is."""
    from runner.backends.codex.codexjson import parse_codex_stream

    start = ['{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}', '{"type":"turn.started"}',
             '{"type":"error","message":"Reconnecting... 1/5"}']
    assert parse_codex_stream(start).work_bytes == 0
    item = '{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Looking at the repo."}}'
    assert parse_codex_stream([*start, item]).work_bytes == len(item)


@pytest.mark.e2e
def test_real_cli_endpoint_that_takes_the_connection_is_not_called_unreachable(
        srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:  # noqa: F811
    """A server that accepts the connection and drops it at once gives no HTTP answer either, but the probe
    reaches it: the CLI's own retries go on and the session ends on its own account, not as unreachable."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop = threading.Event()

    def drop() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=drop, daemon=True)
    thread.start()
    try:
        events: list = []
        sig = get_backend("claude-code").run(_request(srv, repo, tmp_path, events=events, extra_env={
            "ANTHROPIC_BASE_URL": url, "CLAUDE_CODE_MAX_RETRIES": "3"}))
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert not any(kind == "unreachable" for kind, _ in events)
    assert "cannot be reached" not in (sig.error or "")
    assert sum(kind == "retry" for kind, _ in events) >= 3
