"""The `codex` backend: the JSONL parser on recorded event streams, and the real Codex CLI over real HTTP."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import git
import pytest

from runner.backends.common.base import SessionRequest, get_backend
from runner.backends.codex.backend import CodexBackend, build_codex_argv
from runner.backends.codex.codexjson import (
    classify_codex_error,
    estimate_cost,
    parse_codex_stream,
)
from runner.core.evidence import ExitKind
from runner.core.plan import AgentConfig
from tests.agent_helpers import make_repo
from tests.servers.responses import (
    ResponsesServer,
    hang,
    reply,
    shell,
    unauthorized,
    usage_limit,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "codex"
ROOT = Path(__file__).resolve().parents[2]


def _fixture(name: str) -> list[str]:
    return (FIXTURES / name).read_text(encoding="utf-8").splitlines()


# ---- the parser ------------------------------------------------------------------------------------


def test_successful_stream_is_folded() -> None:
    """Thread id, summed usage, tool calls, file changes, the plan and the final message come out of the stream."""
    fold = parse_codex_stream(_fixture("success.jsonl"))
    assert fold.thread_id == "0199a213-81c0-7800-8aa1-bbab2a035a53"
    assert (fold.input_tokens, fold.cached_input_tokens, fold.output_tokens) == (24763, 24448, 122)
    assert (fold.tool_calls, fold.tool_failures, fold.file_changes) == (3, 0, 2)
    assert fold.last_tool == "shell" and fold.plan_items == 2
    assert fold.final_text.endswith("All tests pass.")
    assert fold.error is None and fold.turns_completed == 1 and fold.unparsable == 0


def test_failures_are_counted_and_garbage_tolerated() -> None:
    """Non-zero exits, failed patches and MCP errors are tool failures; a replayed item counts once."""
    fold = parse_codex_stream(_fixture("failures.jsonl"))
    assert (fold.tool_calls, fold.tool_failures) == (3, 3)
    assert fold.last_tool == "mcp:docs/search"
    assert fold.unparsable == 1
    assert fold.error is None  # the turn completed: the failures are the evidence, not an end
    assert any("Model metadata" in w for w in fold.warnings)
    assert fold.reasoning_tokens == 120


def test_reconnect_notices_are_not_errors() -> None:
    """Codex's own "Reconnecting..." notices are warnings when the turn then completes."""
    fold = parse_codex_stream(_fixture("reconnect_then_ok.jsonl"))
    assert fold.error is None and fold.warnings and fold.turns_completed == 1


def test_usage_limit_gives_reset_time() -> None:
    """A failed turn's "try again at 4:41 AM" is a rate limit that resets at the next 4:41 local time."""
    fold = parse_codex_stream(_fixture("usage_limit.jsonl"))
    assert fold.turn_failed and fold.error and "usage limit" in fold.error
    now = datetime(2026, 11, 30, 2, 41, tzinfo=timezone.utc)
    kind, reset = classify_codex_error(fold.error, now)
    assert kind is ExitKind.RATE_LIMIT and reset == datetime(2026, 11, 30, 4, 41, tzinfo=timezone.utc)


@pytest.mark.parametrize("text, kind", [
    ("You've hit your usage limit. Try again in 3 days 6 hours.", ExitKind.RATE_LIMIT),
    ("exceeded retry limit, last status: 429 Too Many Requests", ExitKind.RATE_LIMIT),
    ("unexpected status 401 Unauthorized: Incorrect API key provided", ExitKind.AUTH),
    ("unexpected status 403 Forbidden: project disabled", ExitKind.AUTH),
    ("stream disconnected before completion: boom", ExitKind.TRANSIENT),
    ("We’re currently experiencing high demand, which may cause temporary errors.", ExitKind.TRANSIENT),
    ("unexpected status 503 Service Unavailable", ExitKind.TRANSIENT),
    ("model gpt-9 does not exist", ExitKind.CRASHED),
])
def test_error_texts_are_classified(text: str, kind: ExitKind) -> None:
    """Limit, auth and transient errors are told apart by their text; anything else is a crash."""
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    got, reset = classify_codex_error(text, now)
    assert got is kind
    if "3 days" in text:
        assert reset == now + timedelta(days=3, hours=6)


def test_auth_stream_ends_as_auth() -> None:
    """A persistent 401 (after Codex's own retry) ends the turn as an auth failure."""
    fold = parse_codex_stream(_fixture("auth.jsonl"))
    assert classify_codex_error(fold.error or "", datetime.now(timezone.utc))[0] is ExitKind.AUTH


def test_cost_is_estimated_from_the_price_table() -> None:
    """Cached input is priced at the cached rate; a model the table does not know has no estimate."""
    assert estimate_cost("gpt-5-codex", 1_000_000, 1_000_000, 0) == 0.125
    assert estimate_cost("gpt-5-mini", 1_000_000, 0, 1_000_000) == 2.25
    assert estimate_cost("mystery-model", 10, 0, 10) is None


def test_argv_configures_provider_resume_and_sandbox(tmp_path: Path) -> None:
    """With an API key a provider is set on the command line; resume uses the thread id; the prompt is stdin."""
    env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
    argv = build_codex_argv("codex", model="gpt-5", workdir=tmp_path, env=env, resume_thread_id=None)
    assert argv[:3] == ["codex", "exec", "--json"] and argv[-1] == "-"
    assert 'model_providers.plan_runner.base_url="http://127.0.0.1:1/v1"' in argv
    assert "--dangerously-bypass-approvals-and-sandbox" in argv
    resumed = build_codex_argv("codex", model=None, workdir=tmp_path, env={}, resume_thread_id="abc",
                               extra_args=("--sandbox", "workspace-write"))
    assert resumed[-3:] == ["resume", "abc", "-"]
    assert "--dangerously-bypass-approvals-and-sandbox" not in resumed and "-m" not in resumed
    assert not any("model_provider" in a for a in resumed)


def test_backend_is_registered() -> None:
    """get_backend('codex') builds the Codex backend through the registry."""
    assert isinstance(get_backend("codex"), CodexBackend)


# ---- the real Codex CLI against the scripted Responses server -----------------------------------------


@pytest.fixture(scope="session")
def codex_exe() -> str:
    """The pinned Codex CLI: PLAN_RUNNER_CODEX, else installed by scripts/install-codex.sh (npm)."""
    given = os.environ.get("PLAN_RUNNER_CODEX")
    if given:
        return given
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "install-codex.sh")], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"cannot install the Codex CLI (npm @openai/codex):\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _request(tmp_path: Path, srv: ResponsesServer, exe: str, *, prompt: str = "Do checkpoint 1.1",
             resume: str | None = None, stall: str = "60s", events: list | None = None) -> SessionRequest:
    workdir = tmp_path / "repo"
    if not workdir.exists():
        make_repo(workdir)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    sink = events if events is not None else []
    return SessionRequest(
        workdir=workdir,
        prompt=prompt,
        agent=AgentConfig(backend="codex", model="gpt-5-codex", executable=exe, stall_minutes=stall,
                          time_limit_minutes="120s"),
        env={"PATH": os.environ["PATH"], "HOME": str(home), "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.url,
             "GIT_AUTHOR_NAME": "Codex", "GIT_AUTHOR_EMAIL": "codex@example.com",
             "GIT_COMMITTER_NAME": "Codex", "GIT_COMMITTER_EMAIL": "codex@example.com"},
        transcript_dir=tmp_path / "transcripts",
        resume_session_id=resume,
        on_event=lambda event, detail: sink.append((event, detail)),
    )


def _input_texts(body: dict) -> str:
    return " ".join(c.get("text", "") for item in body["input"] if item.get("type") == "message"
                    for c in item.get("content", []))


@pytest.mark.e2e
def test_codex_session_commits_and_resumes(tmp_path: Path, codex_exe: str) -> None:
    """The real CLI runs a shell call that commits, reports usage and thread id; resume continues that thread."""
    events: list[tuple[str, str]] = []
    with ResponsesServer() as srv:
        srv.enqueue(
            reply("Creating the file.", shell("echo 'print(1)' > hello.py && git add -A && git commit -qm 'Add hello.py'"),
                  usage={"input_tokens": 1000, "output_tokens": 50}),
            reply("Done. All tests pass.", usage={"input_tokens": 1200, "output_tokens": 20}),
        )
        first = CodexBackend().run(_request(tmp_path, srv, codex_exe, prompt="UNIQUE-FIRST-PROMPT", events=events))
        assert "UNIQUE-FIRST-PROMPT" in _input_texts(srv.response_requests[0].json)
        srv.enqueue(reply("Resumed: nothing left."))
        second = CodexBackend().run(_request(tmp_path, srv, codex_exe, prompt="SECOND-PROMPT",
                                             resume=first.agent_session_id))
        resumed_body = srv.response_requests[-1].json
    repo = git.Repo(tmp_path / "repo")
    assert repo.head.commit.message.strip() == "Add hello.py"
    assert first.exit_kind is ExitKind.FINISHED and first.exit_code == 0
    assert first.agent_session_id and (first.input_tokens, first.output_tokens) == (2200, 70)
    assert (first.tool_calls, first.tool_failures, first.last_tool) == (1, 0, "shell")
    assert first.hints.claimed_done is True and first.cost_estimated and first.cost_usd
    assert ("tool", "shell") in events and ("tokens", "2270") in events
    assert (tmp_path / "transcripts" / "codex-home").is_dir()
    assert second.exit_kind is ExitKind.FINISHED and second.agent_session_id == first.agent_session_id
    texts = _input_texts(resumed_body)
    assert "UNIQUE-FIRST-PROMPT" in texts and "Creating the file." in texts and "SECOND-PROMPT" in texts


@pytest.mark.e2e
def test_codex_usage_limit_is_a_rate_limit_with_reset(tmp_path: Path, codex_exe: str) -> None:
    """The service's usage limit ends the session RATE_LIMIT with the reset time from Codex's message."""
    with ResponsesServer() as srv:
        srv.enqueue(usage_limit(resets_in_seconds=7200))
        started = datetime.now(timezone.utc)
        signals = CodexBackend().run(_request(tmp_path, srv, codex_exe))
    assert signals.exit_kind is ExitKind.RATE_LIMIT and "usage limit" in (signals.error or "")
    assert signals.reset_at is not None
    # Codex prints a clock time without seconds: the reset is within a minute of two hours from now
    assert abs((signals.reset_at - (started + timedelta(seconds=7200))).total_seconds()) < 120


@pytest.mark.e2e
def test_codex_bad_key_is_auth(tmp_path: Path, codex_exe: str) -> None:
    """A persistent 401 ends the session AUTH."""
    with ResponsesServer() as srv:
        srv.enqueue(*[unauthorized()] * 4)
        signals = CodexBackend(request_max_retries=1).run(_request(tmp_path, srv, codex_exe))
    assert signals.exit_kind is ExitKind.AUTH and "401" in (signals.error or "")


@pytest.mark.e2e
def test_codex_hang_is_a_stall(tmp_path: Path, codex_exe: str) -> None:
    """A server that never answers leaves Codex silent; the watchdog kills it as STALLED."""
    with ResponsesServer() as srv:
        srv.enqueue(hang())
        t0 = time.monotonic()
        signals = CodexBackend(kill_grace_s=0.5).run(_request(tmp_path, srv, codex_exe, stall="2s"))
    assert signals.exit_kind is ExitKind.STALLED
    assert time.monotonic() - t0 < 30


def test_the_event_log_kept_with_the_state_is_bounded_per_session(tmp_path: Path, monkeypatch) -> None:
    """A CLI that streams more events than the bound leaves a log of at most the bound (plus one newline per
    cut line), like Claude Code's stream log: the state never keeps an unbounded Codex log."""
    import runner.backends.codex.backend as codex_module

    monkeypatch.setattr(codex_module, "EVENT_LOG_LIMIT", 4000)
    line = '{"type":"item.completed","item":{"id":"item_%d","type":"agent_message","text":"%s"}}'
    stand_in = tmp_path / "codex"
    stand_in.write_text("#!/bin/sh\nfor i in $(seq 1 300); do echo '" + (line % (0, "x" * 80)) + "'; done\n")
    stand_in.chmod(0o755)
    make_repo(tmp_path / "repo")
    request = SessionRequest(
        workdir=tmp_path / "repo", prompt="p",
        agent=AgentConfig(backend="codex", model="gpt-5-codex", executable=str(stand_in), stall_minutes="60s",
                          time_limit_minutes="60s"),
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, transcript_dir=tmp_path / "transcripts")
    CodexBackend().run(request)
    log = (tmp_path / "transcripts" / "codex-events.jsonl").read_bytes()
    assert 3900 <= len(log) <= 4000 + 2 and log.count(b"\n") < 300
