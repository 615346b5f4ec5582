"""`plan-runner session` with real agents: the Claude Code CLI and the built-in Anthropic agent,
over real HTTP against the scripted Messages server. Outcomes must follow the evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from servers.messages import MessagesServer, hang, rate_limited, reply, tool_use
from tests.conftest import agent_writable
from tests.reliability_world import git

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SECRET_GITHUB_TOKEN = "ghp_e2eSecretThatMustNeverReachTheAgent0001"

PLAN = """\
---
agent:
  backend: {backend}
  {executable}
  model: claude-sonnet-4-5
  stall_minutes: {stall}
  time_limit_minutes: 2m
  session_tokens: {tokens}
gates:
  - name: tests
    run: test -f hello.txt
budget:
  max_sessions: 10
---
# Hello

## Stage 1: Greeting <!-- sessions: 1 -->
- [ ] 1.1 write hello.txt
- [ ] 1.2 write bye.txt
"""


def claude_path() -> str:
    found = os.environ.get("PLAN_RUNNER_CLAUDE") or str(ROOT / ".ci/node/node_modules/.bin/claude")
    assert Path(found).exists(), "the Claude Code CLI is missing: run scripts/install-claude.sh (the tests never skip it)"
    return found


def shell(backend: str, command: str) -> dict:
    if backend == "claude-code":
        return tool_use("Bash", {"command": command, "description": "run"})
    return tool_use("run_shell", {"command": command})


def make_repo(tmp_path: Path, backend: str, stall: str = "20s", tokens: int = 600000) -> Path:
    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    executable = f"executable: {claude_path()}" if backend == "claude-code" else ""
    (repo / "plans" / "hello.md").write_text(PLAN.format(backend=backend, executable=executable, stall=stall, tokens=tokens))
    (repo / "README.md").write_text("hello\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Maintainer")
    git(repo, "config", "user.email", "m@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def session(repo: Path, srv: MessagesServer) -> dict:
    env = dict(os.environ, ANTHROPIC_BASE_URL=srv.url, ANTHROPIC_API_KEY="sk-ant-test-key-0000",
               GITHUB_TOKEN=SECRET_GITHUB_TOKEN, GH_TOKEN=SECRET_GITHUB_TOKEN)
    proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/hello.md", "--json"], cwd=repo,
                          capture_output=True, text=True, env=env, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout)


BACKENDS = ["claude-code", "anthropic"]
COMMIT_AND_TICK = ("echo hello > hello.txt && git add hello.txt && git commit -q -m 'Add hello' && "
                   "sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/hello.md && git commit -q -am 'Tick 1.1' && env >> {marker}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_real_agent_that_commits_and_ticks_is_advanced_and_never_sees_the_github_token(backend, tmp_path):
    """A real agent commits and flips 1.1: Advanced; its shell environment holds no GitHub token."""
    repo = make_repo(tmp_path, backend)
    # a file of the test's that the agent's user may append to (the agent's own /tmp is wiped when its lease ends)
    marker = agent_writable(repo, f"plan-runner-env-{backend}", "hello")
    with MessagesServer() as srv:
        srv.enqueue(reply("Working.", shell(backend, COMMIT_AND_TICK.format(marker=marker))),
                    reply("Done: hello.txt is committed and 1.1 is ticked."))
        out = session(repo, srv)
    assert out["outcome"] == "Advanced", out
    assert out["next_action"]["checkpoint"] == "1.2"
    assert "Add hello" in git(repo, "log", "--format=%s", "plan-runner/hello")
    dumped = marker.read_text()
    assert "PATH=" in dumped  # the dump really ran
    assert SECRET_GITHUB_TOKEN not in dumped and "GITHUB_TOKEN" not in dumped


@pytest.mark.parametrize("backend", BACKENDS)
def test_rate_limit_is_limit_backoff_until_the_reset_time_with_no_attempt_burned(backend, tmp_path):
    """A 429 with reset headers: LimitBackoff waiting until about that time; attempts untouched."""
    repo = make_repo(tmp_path, backend)
    reset = datetime.now(timezone.utc) + timedelta(seconds=40)
    with MessagesServer() as srv:
        srv.default = rate_limited(retry_after_s=40, reset_at=reset)
        out = session(repo, srv)
    assert out["outcome"] == "LimitBackoff" and out["blame"] == "environment", out
    assert out["next_action"]["action"] == "wait" and out["attempts"]["1"]["used"] == 0
    until = datetime.fromisoformat(out["next_action"]["until"])
    assert until > datetime.now(timezone.utc)


@pytest.mark.parametrize("backend", BACKENDS)
def test_silent_agent_is_stalled_then_resumed_with_the_same_session(backend, tmp_path):
    """The model never answers: Stalled; the next session resumes the same agent session id."""
    repo = make_repo(tmp_path, backend, stall="6s")
    with MessagesServer() as srv:
        srv.enqueue(reply("Starting.", shell(backend, "echo started")), hang())
        first = session(repo, srv)
        srv.release()
        assert first["outcome"] == "Stalled", first
        # The agent itself noticed the silence (its own 6 s stall, not the supervisor's backstop, which loses what the
        # agent reports): the tokens of its first turn are in the record.
        assert first["tokens"] > 0, first
        sid = first["next_action"]["resume_session_id"]
        assert first["next_action"]["kind"] == "resume" and sid
        srv.enqueue(reply("Resumed.", shell(backend, COMMIT_AND_TICK.format(marker=agent_writable(repo, "unused", "hello")))), reply("ok"))
        second = session(repo, srv)
        earlier = [r for r in srv.message_requests if "Starting." in json.dumps(r.json)]
    assert second["outcome"] == "Advanced", second
    assert len(earlier) >= 2, "the resumed session did not carry the earlier conversation"


@pytest.mark.parametrize("backend", BACKENDS)
def test_burning_the_token_budget_is_nudged_then_rolled_over(backend, tmp_path):
    """Usage past 80 % sends a nudge the model receives; past 100 % the session rolls over."""
    repo = make_repo(tmp_path, backend, tokens=100000)
    with MessagesServer() as srv:
        srv.enqueue(
            reply(shell(backend, "sleep 1; echo a"), usage={"input_tokens": 84000, "output_tokens": 10}),
            reply(shell(backend, "sleep 1; echo b"), usage={"input_tokens": 5000, "output_tokens": 10}),
            reply(shell(backend, "sleep 1; echo c"), usage={"input_tokens": 6000, "output_tokens": 10}),
            reply(shell(backend, "sleep 1; echo d"), usage={"input_tokens": 9000, "output_tokens": 10}),
            reply(shell(backend, "sleep 1; echo e"), usage={"input_tokens": 9000, "output_tokens": 10}),
        )
        out = session(repo, srv)
        sent = json.dumps([r.json for r in srv.message_requests])
    assert out["outcome"] == "RolledOver" and out["blame"] == "environment", out
    assert "handoff" in sent.lower() and out["next_action"]["kind"] == "handoff"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_stopped_at_its_token_budget_keeps_the_agents_claim(backend, tmp_path):
    """The agent commits, ticks 1.1, then says it is done in the turn whose usage crosses the budget, and is
    stopped: RolledOver; the tick is not credited (reverted, a rejected claim naming the outcome) but the record
    keeps the claim as data (its words in the hints, the ticked checkpoint in the rejected flips) and the commits
    (issue 46, the seed orchestrator's case)."""
    from runner.adapters.store.state import ledger_text

    repo = make_repo(tmp_path, backend, tokens=100000)
    tick = ("echo hello > hello.txt && git add hello.txt && git commit -q -m 'Add hello' && "
            "sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/hello.md && git commit -q -am 'Tick 1.1'")
    with MessagesServer() as srv:
        srv.enqueue(reply("Working.", shell(backend, tick), usage={"input_tokens": 50000, "output_tokens": 10}),
                    reply("All done: 1.1 is ticked and all tests pass.", shell(backend, "echo more; sleep 3"),
                          usage={"input_tokens": 60000, "output_tokens": 10}),
                    reply("Final."))
        out = session(repo, srv)
    assert out["outcome"] == "RolledOver" and out["blame"] == "environment", out
    record = [e for e in map(json.loads, ledger_text(repo, "refs/plan-runner/state/hello").splitlines())
              if e["type"] == "session"][0]
    assert record["hints"]["claimed_done"] is True and "all tests pass" in record["hints"]["claims"], record["hints"]
    assert "All done" in record["hints"]["final_text"]
    assert record["rejected_flips"] == ["1.1: the session ended RolledOver, and only an Advanced session credits a "
                                        "checkpoint"] and record["advanced"] == []
    assert record["work_commits"] == 1 and "Add hello" in git(repo, "log", "--format=%s", "plan-runner/hello")


@pytest.mark.parametrize("backend", BACKENDS)
def test_model_text_utf8_cannot_carry_ends_in_a_verdict_and_a_readable_record(backend, tmp_path):
    """The model's words hold lone surrogates and a NUL (JSON carries them, UTF-8 does not): the session is judged
    as any other (Advanced), never a crash of plan-runner's; the record is written and read back, the agent's words
    in it with each such character replaced (U+FFFD)."""
    from runner.adapters.store.state import ledger_text

    repo = make_repo(tmp_path, backend)
    with MessagesServer() as srv:
        srv.enqueue(reply("Working \ud800.", shell(backend, COMMIT_AND_TICK.format(marker="/dev/null"))),
                    reply("Done \udfff: 1.1 is ticked\x00 and all tests pass \ud83d."))
        out = session(repo, srv)
    assert out["outcome"] == "Advanced", (out["reasons"], out)
    record = [e for e in map(json.loads, ledger_text(repo, "refs/plan-runner/state/hello").splitlines())
              if e["type"] == "session"][0]
    final = record["hints"]["final_text"]
    assert "1.1 is ticked" in final and "\ufffd" in final and not any("\ud800" <= c <= "\udfff" for c in final)
