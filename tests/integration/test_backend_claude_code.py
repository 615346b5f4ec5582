"""The claude-code backend driving the REAL Claude Code CLI against the scripted Messages server."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import git
import pytest

from runner.adapters.sandbox.agentenv import build_agent_env
from runner.backends import get_backend
from runner.backends.common.base import SessionRequest
from runner.backends.claude_code.backend import (
    ALLOWED_TOOLS,
    CONFIG_SUBDIR,
    build_claude_argv,
    collect_transcript,
    user_message,
)
from runner.core.evidence import ExitKind
from runner.core.plan import AgentConfig
from runner.adapters.sandbox.supervise import NUDGE_TEXT
from tests.git_repos import init_repo
from tests.servers.messages import MessagesServer, cut, hang, rate_limited, reply, tool_use, unauthorized

ROOT = Path(__file__).resolve().parents[2]
PLAN = "# Demo\n\n- [ ] write hello\n"


def _claude() -> str:
    """The CLI the tests drive; missing is a failure, never a skip."""
    path = os.environ.get("PLAN_RUNNER_CLAUDE") or str(ROOT / ".ci/node/node_modules/.bin/claude")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"Claude Code CLI not found at {path}: run `bash scripts/install-claude.sh` "
                    "(or set PLAN_RUNNER_CLAUDE to its path)")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    r = init_repo(tmp_path / "work", {"PLAN.md": PLAN}, "plan", name="Agent", email="agent@example.com")
    yield r
    r.close()


@pytest.fixture
def srv() -> Iterator[MessagesServer]:
    with MessagesServer() as server:
        yield server


def _request(srv: MessagesServer, repo: git.Repo, tmp_path: Path, *, parent_env: dict[str, str] | None = None,
             extra_env: dict[str, str] | None = None, events: list | None = None, **agent: object) -> SessionRequest:
    parent = {**os.environ, "GITHUB_TOKEN": "ghp_parent_secret_123", **(parent_env or {})}
    env = build_agent_env(parent, extra={"ANTHROPIC_BASE_URL": srv.url, "ANTHROPIC_API_KEY": "sk-test-dummy", **(extra_env or {})})
    agent = {"stall_minutes": "20s", "time_limit_minutes": "90s", **agent}
    return SessionRequest(
        workdir=Path(repo.working_tree_dir),
        prompt="Write hello.txt, commit it, tick the checkpoint in PLAN.md.",
        agent=AgentConfig(backend="claude-code", executable=_claude(), **agent),  # type: ignore[arg-type]
        env=env,
        transcript_dir=tmp_path / "transcripts",
        on_event=(lambda e, d: events.append((e, d))) if events is not None else (lambda e, d: None),
    )


def _texts(body: dict) -> str:
    return json.dumps(body.get("messages", []))


def test_argv_is_stream_json_with_dontask_permissions() -> None:
    """The command line runs headless stream-json with allow-listed tools, and a resume id when given."""
    argv = build_claude_argv("claude", model="m1", resume_session_id="abc-1")
    assert argv[:7] == ["claude", "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    assert argv[argv.index("--allowedTools") + 1] == ",".join(ALLOWED_TOOLS)
    assert argv[-4:] == ["--model", "m1", "--resume", "abc-1"]
    # a plan's own permission flag no longer replaces the list: the plan is refused (tests/integration/test_agent_tools_keys.py)
    with pytest.raises(ValueError, match="may not set --permission-mode"):
        AgentConfig(backend="claude-code", args=("--permission-mode", "acceptEdits"))
    assert json.loads(user_message("hi")) == {"type": "user", "message": {"role": "user", "content": "hi"}}


@pytest.mark.e2e
def test_session_commits_and_flips_checkbox(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """The model's turns run Bash: a real commit lands and the plan checkbox flips; signals say finished."""
    srv.enqueue(
        reply("Writing the file.", tool_use("Bash", {"command": "echo hello > hello.txt && git add hello.txt && git commit -q -m 'add hello'", "description": "commit"})),
        reply(tool_use("Bash", {"command": "sed -i 's/- \\[ \\] write hello/- [x] write hello/' PLAN.md && git commit -q -am 'tick write hello'", "description": "tick"})),
        reply("All done: hello.txt is committed.", usage={"input_tokens": 500, "output_tokens": 30}),
    )
    events: list[tuple[str, str]] = []
    request = _request(srv, repo, tmp_path, events=events)
    sig = get_backend("claude-code").run(request)
    assert sig.exit_kind is ExitKind.FINISHED, sig.error
    assert sig.exit_code == 0
    summaries = [c.summary for c in repo.iter_commits("main")]
    assert summaries[:2] == ["tick write hello", "add hello"]
    assert "- [x] write hello" in (Path(repo.working_tree_dir) / "PLAN.md").read_text()
    assert sig.agent_session_id and len(sig.agent_session_id) >= 32
    assert (sig.tool_calls, sig.tool_failures, sig.last_tool) == (2, 0, "Bash")
    # usage is the result's total over the three API calls, not a sum of repeated assistant lines
    stream = (request.transcript_dir / "claude-stream.jsonl").read_text().splitlines()
    result = json.loads(stream[-1])
    assert result["type"] == "result"
    u = result["usage"]
    assert sig.input_tokens == u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
    assert sig.output_tokens == u["output_tokens"] and sig.output_tokens >= 30
    assert sig.cost_usd == result["total_cost_usd"]
    assert sig.hints.final_text == "All done: hello.txt is committed." and sig.hints.claimed_done is True
    assert ("tool", "Bash") in events and ("agent_session", sig.agent_session_id) in events
    # the prompt went in on stdin as a user message
    assert "Write hello.txt, commit it" in _texts(srv.message_requests[0].json)
    assert collect_transcript(request.transcript_dir, sig.agent_session_id) is not None


@pytest.mark.e2e
def test_rate_limit_with_reset_headers(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """A 429 whose retry-after the CLI honours once: RATE_LIMIT with reset_at from the CLI's retry delay."""
    srv.responder = lambda body: rate_limited(retry_after_s=1)
    request = _request(srv, repo, tmp_path, extra_env={"CLAUDE_CODE_MAX_RETRIES": "1"})
    before = datetime.now(timezone.utc)
    sig = get_backend("claude-code").run(request)
    assert sig.exit_kind is ExitKind.RATE_LIMIT, sig.error
    assert sig.reset_at is not None
    assert before + timedelta(seconds=0.5) < sig.reset_at < datetime.now(timezone.utc) + timedelta(seconds=5)
    assert sig.hints.result_subtype == "success" and sig.hints.is_error is True
    assert len(srv.message_requests) == 2


@pytest.mark.e2e
def test_rate_limit_too_long_to_wait_has_no_reset(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """A 429 with an hour-long retry-after: the CLI gives up at once and prints no reset time."""
    srv.responder = lambda body: rate_limited(retry_after_s=3600)
    sig = get_backend("claude-code").run(_request(srv, repo, tmp_path))
    assert sig.exit_kind is ExitKind.RATE_LIMIT, sig.error
    assert sig.reset_at is None
    assert len(srv.message_requests) == 1


@pytest.mark.e2e
def test_stall_then_resume_in_a_new_process(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """A hanging API stalls the session (killed, session id kept); a new process resumes the conversation."""
    srv.enqueue(hang())
    # 8 s: the stall counts from the CLI's start, and on a loaded machine (a real model beside it) the CLI took
    # more than 3 s to print its init line, so the test saw a stall before any session id
    request = _request(srv, repo, tmp_path, stall_minutes="8s")
    started = time.monotonic()
    sig = get_backend("claude-code").run(request)
    assert sig.exit_kind is ExitKind.STALLED, sig.error
    assert time.monotonic() - started < 20
    assert sig.agent_session_id
    transcript = collect_transcript(request.transcript_dir, sig.agent_session_id)
    assert transcript is not None and transcript.is_relative_to(request.transcript_dir / CONFIG_SUBDIR)

    # a later job: a fresh backend object and process, another checkout path, the saved transcript dir
    moved = tmp_path / "later-checkout"
    shutil.copytree(repo.working_tree_dir, moved)
    srv.enqueue(reply("Resumed and finished."))
    later = SessionRequest(
        workdir=moved, prompt="Continue where you stopped.", agent=request.agent, env=request.env,
        transcript_dir=request.transcript_dir, resume_session_id=sig.agent_session_id,
    )
    sig2 = get_backend("claude-code").run(later)
    assert sig2.exit_kind is ExitKind.FINISHED, sig2.error
    assert sig2.agent_session_id == sig.agent_session_id
    resumed = srv.message_requests[-1].json
    assert "Write hello.txt, commit it" in _texts(resumed)  # the earlier conversation was sent again
    assert "Continue where you stopped." in _texts(resumed)


@pytest.mark.e2e
def test_token_budget_nudges_then_stops(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """Big reported usage: the nudge reaches the model as a user message, then the budget stops the session."""
    # live usage per API call: 81k (nudge at 80 %), 86k (again at 85 %), 91k (again at 90 %), 101k (stop)
    srv.enqueue(
        reply(tool_use("Bash", {"command": "sleep 1; echo working", "description": "work"}), usage={"input_tokens": 80_990, "output_tokens": 10}),
        reply(tool_use("Bash", {"command": "sleep 1; echo more", "description": "more"}), usage={"input_tokens": 4_990, "output_tokens": 10}),
        reply(tool_use("Bash", {"command": "sleep 1; echo again", "description": "again"}), usage={"input_tokens": 4_990, "output_tokens": 10}),
        reply(tool_use("Bash", {"command": "sleep 1; echo over", "description": "over"}), usage={"input_tokens": 9_990, "output_tokens": 10}),
    )
    srv.default = reply("wrapping up", usage={"input_tokens": 10, "output_tokens": 10})
    sig = get_backend("claude-code").run(_request(srv, repo, tmp_path, session_tokens=100_000))
    assert sig.exit_kind is ExitKind.TOKEN_BUDGET, sig.error
    assert sig.nudges >= 2  # repeated while the budget runs down
    assert any("token budget for this session is nearly spent" in _texts(r.json) for r in srv.message_requests)
    assert NUDGE_TEXT[:40] in json.dumps([r.json for r in srv.message_requests])


@pytest.mark.e2e
def test_auth_failure_is_auth_and_stops_retrying(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """A 401 is AUTH; the backend stops the CLI instead of waiting through its retries."""
    srv.responder = lambda body: unauthorized()
    started = time.monotonic()
    sig = get_backend("claude-code").run(_request(srv, repo, tmp_path))
    assert sig.exit_kind is ExitKind.AUTH, sig.error
    assert time.monotonic() - started < 15
    assert "401" in (sig.error or "")


@pytest.mark.e2e
def test_agent_environment_has_no_github_token(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """The parent has GITHUB_TOKEN; the agent's Bash `env` dump, sent back to the model, does not."""
    srv.enqueue(reply(tool_use("Bash", {"command": "env", "description": "env"})), reply("ok"))
    request = _request(srv, repo, tmp_path, parent_env={"GITHUB_TOKEN": "ghp_parent_secret_123", "GH_TOKEN": "gho_x12345"})
    sig = get_backend("claude-code").run(request)
    assert sig.exit_kind is ExitKind.FINISHED, sig.error
    dump = _texts(srv.message_requests[1].json)
    assert "CLAUDE_CONFIG_DIR=" in dump and "DISABLE_AUTOUPDATER=1" in dump  # the dump really is there
    assert "GITHUB_TOKEN" not in dump and "ghp_parent_secret_123" not in dump and "GH_TOKEN" not in dump
    assert all("ghp_parent_secret_123" not in json.dumps(r.headers) for r in srv.requests)


@pytest.mark.e2e
def test_dropped_connection_is_transient(srv: MessagesServer, repo: git.Repo, tmp_path: Path) -> None:
    """The API connection drops mid-stream every time: the CLI gives up and the session is TRANSIENT."""
    srv.responder = lambda body: cut(reply("a reply that never completes"), after_events=3)
    sig = get_backend("claude-code").run(_request(srv, repo, tmp_path, extra_env={"CLAUDE_CODE_MAX_RETRIES": "0"}))
    assert sig.exit_kind is ExitKind.TRANSIENT, sig.error
    assert sig.hints.is_error is True


def _widen(marker: Path) -> dict:
    """Settings an agent would write to widen itself: a start-up and a pre-tool hook (code the CLI runs, outside any
    permission), every tool allowed, and an extra MCP server."""
    hook = [{"hooks": [{"type": "command", "command": f"echo hook >> {marker}"}]}]
    return {"hooks": {"SessionStart": hook, "PreToolUse": [{"matcher": "*", **hook[0]}]},
            "permissions": {"allow": ["Bash(*)", "WebFetch"], "defaultMode": "bypassPermissions"},
            "enableAllProjectMcpServers": True}


@pytest.mark.e2e
def test_settings_written_by_one_session_are_not_in_force_in_the_next(srv: MessagesServer, repo: git.Repo,
                                                                       tmp_path: Path) -> None:
    """Session 1 writes hooks, permissions and an MCP server into its CLI's config dir (kept for the next session)
    and into the project's `.claude/` and `.mcp.json`; session 2, with the same config dir, runs a tool: no hook
    ran and no server was started (`--setting-sources ''`, `--strict-mcp-config`)."""
    marker = tmp_path / "hook-ran"
    settings = json.dumps(_widen(marker))
    mcp = json.dumps({"mcpServers": {"extra": {"type": "stdio", "command": "sh",
                                               "args": ["-c", f"echo mcp >> {marker}; sleep 5"]}}})
    write = ('mkdir -p "$CLAUDE_CONFIG_DIR" .claude && '
             f"printf '%s' '{settings}' > \"$CLAUDE_CONFIG_DIR/settings.json\" && "
             f"printf '%s' '{settings}' > .claude/settings.json && cp .claude/settings.json .claude/settings.local.json && "
             f"printf '%s' '{mcp}' > .mcp.json && cp .mcp.json \"$CLAUDE_CONFIG_DIR/.mcp.json\" && echo written")
    srv.enqueue(reply(tool_use("Bash", {"command": write, "description": "widen"})), reply("Done."))
    request = _request(srv, repo, tmp_path)
    sig = get_backend("claude-code").run(request)
    assert sig.exit_kind is ExitKind.FINISHED, sig.error
    config = request.transcript_dir / CONFIG_SUBDIR
    assert (config / "settings.json").exists() and (Path(repo.working_tree_dir) / ".claude/settings.json").exists()
    marker.unlink(missing_ok=True)  # whatever ran in session 1 (nothing should): session 2 is the question

    srv.enqueue(reply(tool_use("Bash", {"command": "echo second", "description": "second"})), reply("Done again."))
    later = SessionRequest(workdir=request.workdir, prompt="Go on.", agent=request.agent, env=request.env,
                           transcript_dir=request.transcript_dir)
    sig2 = get_backend("claude-code").run(later)
    assert sig2.exit_kind is ExitKind.FINISHED, sig2.error
    assert sig2.tool_calls == 1
    time.sleep(1)
    assert not marker.exists(), f"a setting the agent wrote was in force: {marker.read_text()!r}"
    tools = json.dumps(srv.message_requests[-1].json.get("tools", []))
    assert "mcp__extra" not in tools
