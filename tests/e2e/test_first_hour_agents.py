"""A Codex plan and a Claude Code plan, each run by `plan-runner run` (the real CLI in a child process,
the real agent CLI over real HTTP against the scripted model servers): to a finish, and to a park
answered locally with `plan-runner reply`. The agent sees its own backend's credentials only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.reliability_world import fold_ledger, git, ledger
from tests.e2e.test_first_hour import AGENT_IDENTITY
from tests.servers import messages as m
from tests.servers import responses as r

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
GITHUB_TOKEN = "ghp_firstHourTokenThatNeverReachesTheAgent01"

PLAN = """\
---
agent:
  backend: {backend}
  executable: {executable}
  model: {model}
  stall_minutes: 60s
  time_limit_minutes: 150s
# the agent records what it saw in the test's own folder: it runs as the test's user
isolation: none
gates:
  - name: hello
    run: test -f hello.txt
budget:
  max_sessions: 6
---
# Hello

## Stage 1: Greeting <!-- sessions: 1 -->
- [ ] 1.1 write hello.txt
"""

WORK = ("echo hello > hello.txt && git add hello.txt && git commit -q -m 'Add hello' && "
        "sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/hello.md && git commit -q -am 'Tick 1.1' && env > {dump}")


def codex_exe() -> str:
    given = os.environ.get("PLAN_RUNNER_CODEX")
    if given:
        return given
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "install-codex.sh")], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"cannot install the Codex CLI (npm @openai/codex):\n{proc.stderr[-2000:]}"
    return proc.stdout.strip().splitlines()[-1]


def claude_exe() -> str:
    found = os.environ.get("PLAN_RUNNER_CLAUDE") or str(ROOT / ".ci/node/node_modules/.bin/claude")
    assert Path(found).exists(), "the Claude Code CLI is missing: run scripts/install-claude.sh"
    return found


def make_repo(tmp_path: Path, backend: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    exe, model = (codex_exe(), "gpt-5-codex") if backend == "codex" else (claude_exe(), "claude-sonnet-4-5")
    (repo / "plans" / "hello.md").write_text(PLAN.format(backend=backend, executable=exe, model=model))
    (repo / "README.md").write_text("hello\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Maintainer")
    git(repo, "config", "user.email", "m@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def cli(repo: Path, tmp_path: Path, *args: str, base_urls: dict[str, str]) -> subprocess.CompletedProcess:
    """The user's shell holds every key: Anthropic's, OpenAI's, a GitHub token."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home), GITHUB_TOKEN=GITHUB_TOKEN,
               ANTHROPIC_API_KEY="sk-ant-first-hour-0000", OPENAI_API_KEY="sk-openai-first-hour-0000",
               CLAUDE_CODE_MAX_RETRIES="1", **AGENT_IDENTITY, **base_urls)
    proc = subprocess.run([sys.executable, "-m", "runner", *args], cwd=repo, capture_output=True, text=True,
                          env=env, timeout=400)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def dumped_names(path: Path) -> set[str]:
    return {line.split("=", 1)[0] for line in path.read_text().splitlines() if "=" in line}


# --- Codex -----------------------------------------------------------------------------------------


def test_codex_plan_runs_to_a_finish_through_run(tmp_path):
    """`plan-runner run` on a Codex plan: Codex authenticates with OPENAI_API_KEY at OPENAI_BASE_URL, commits,
    ticks 1.1, the plan finishes; nothing of Anthropic's or GitHub's reaches Codex's shell."""
    repo = make_repo(tmp_path, "codex")
    dump = tmp_path / "codex-env"
    with r.ResponsesServer() as srv:
        srv.enqueue(r.reply("Working.", r.shell(WORK.format(dump=dump))), r.reply("Done: hello.txt is committed."))
        base = {"OPENAI_BASE_URL": srv.url, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/anthropic-not-for-codex"}
        proc = cli(repo, tmp_path, "run", "plans/hello.md", base_urls=base)
        auth = {{k.lower(): v for k, v in q.headers.items()}.get("authorization") for q in srv.response_requests}
    assert proc.returncode == 0, proc.stderr
    assert auth == {"Bearer sk-openai-first-hour-0000"}
    assert "git merge --no-ff plan-runner/hello" in proc.stderr
    state = fold_ledger(repo, "hello")
    assert state.finished and state.last.outcome.value == "Advanced" and state.last.backend == "codex"
    names = dumped_names(dump)
    assert "PATH" in names
    assert not names & {"ANTHROPIC_BASE_URL", "GITHUB_TOKEN"} and GITHUB_TOKEN not in dump.read_text()
    logs = cli(repo, tmp_path, "logs", "plans/hello.md", base_urls={})
    assert logs.returncode == 0, logs.stderr
    assert "agent: Working." in logs.stdout and "tool shell:" in logs.stdout and "Add hello" in logs.stdout


def test_codex_plan_parks_on_a_bad_key_and_a_local_reply_lets_it_finish(tmp_path):
    """A rejected key parks the Codex plan (NeedsHuman, no attempt burned on the agent); after
    `plan-runner reply PLAN resume`, `run` continues and finishes."""
    repo = make_repo(tmp_path, "codex")
    with r.ResponsesServer(default=r.unauthorized()) as srv:
        base = {"OPENAI_BASE_URL": srv.url}
        parked = cli(repo, tmp_path, "run", "plans/hello.md", base_urls=base)
        assert parked.returncode == 3, parked.stderr
        assert "plan-runner reply plans/hello.md" in parked.stderr + parked.stdout
        assert [e["outcome"] for e in ledger(repo, "hello") if e["type"] == "session"] == ["NeedsHuman"]

        replied = cli(repo, tmp_path, "reply", "plans/hello.md", "resume", "the key is fixed", base_urls=base)
        assert replied.returncode == 0, replied.stderr
        srv.default = r.reply("(no scripted turn)")
        srv.enqueue(r.reply("Working.", r.shell(WORK.format(dump=tmp_path / "env2"))), r.reply("Done."))
        done = cli(repo, tmp_path, "run", "plans/hello.md", base_urls=base)
        prompts = " ".join(str(q.json) for q in srv.response_requests[-2:])
    assert done.returncode == 0, done.stderr
    assert "the key is fixed" in prompts  # the reply's text reached the next prompt
    assert fold_ledger(repo, "hello").finished


# --- Claude Code -------------------------------------------------------------------------------------


def test_claude_code_plan_runs_to_a_finish_through_run(tmp_path):
    """`plan-runner run` on a Claude Code plan finishes; Claude Code's shell sees no OpenAI or GitHub variable."""
    repo = make_repo(tmp_path, "claude-code")
    dump = tmp_path / "claude-env"
    with m.MessagesServer() as srv:
        srv.enqueue(m.reply("Working.", m.tool_use("Bash", {"command": WORK.format(dump=dump), "description": "work"})),
                    m.reply("Done: hello.txt is committed and 1.1 is ticked."))
        proc = cli(repo, tmp_path, "run", "plans/hello.md",
                   base_urls={"ANTHROPIC_BASE_URL": srv.url, "OPENAI_BASE_URL": "http://127.0.0.1:9/openai-not-for-claude"})
    assert proc.returncode == 0, proc.stderr
    state = fold_ledger(repo, "hello")
    assert state.finished and state.last.backend == "claude-code"
    logs = cli(repo, tmp_path, "logs", "plans/hello.md", "1", base_urls={})
    assert logs.returncode == 0, logs.stderr
    assert "agent: Working." in logs.stdout and "tool Bash:" in logs.stdout and "agent: Done" in logs.stdout
    names = dumped_names(dump)
    assert "ANTHROPIC_BASE_URL" in names
    assert not names & {"OPENAI_API_KEY", "OPENAI_BASE_URL", "GITHUB_TOKEN"}


def test_claude_code_plan_parks_on_a_bad_key_and_a_local_reply_lets_it_finish(tmp_path):
    """A 401 parks the Claude Code plan; `plan-runner reply PLAN retry` and `run` finish it."""
    repo = make_repo(tmp_path, "claude-code")
    with m.MessagesServer() as srv:
        srv.responder = lambda body: m.unauthorized()
        base = {"ANTHROPIC_BASE_URL": srv.url}
        parked = cli(repo, tmp_path, "run", "plans/hello.md", base_urls=base)
        assert parked.returncode == 3, parked.stderr
        assert [e["outcome"] for e in ledger(repo, "hello") if e["type"] == "session"] == ["NeedsHuman"]
        assert cli(repo, tmp_path, "reply", "plans/hello.md", "retry", base_urls=base).returncode == 0
        srv.responder = None
        srv.enqueue(m.reply("Working.", m.tool_use("Bash", {"command": WORK.format(dump=tmp_path / "e2"),
                                                              "description": "work"})),
                    m.reply("Done."))
        done = cli(repo, tmp_path, "run", "plans/hello.md", base_urls=base)
    assert done.returncode == 0, done.stderr
    assert fold_ledger(repo, "hello").finished


def test_claude_code_waiting_out_a_rate_limit_is_shown_stopped_and_backed_off(tmp_path):
    """A 429 with `retry-after: 40`: Claude Code's own retry is shown as it happens, plan-runner stops the CLI
    instead of letting it wait inside the session, and backs off until the retry time the server gave."""
    repo = make_repo(tmp_path, "claude-code")
    with m.MessagesServer() as srv:
        srv.responder = lambda body: m.rate_limited(retry_after_s=40)
        home = tmp_path / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "ANTHROPIC_", "CLAUDE_CODE_"))}
        env.update(PYTHONPATH=str(ROOT), HOME=str(home), **AGENT_IDENTITY, ANTHROPIC_API_KEY="sk-ant-first-hour-0000",
                   ANTHROPIC_BASE_URL=srv.url)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/hello.md", "--json"], cwd=repo,
                              capture_output=True, text=True, env=env, timeout=300)
        elapsed = time.monotonic() - t0
    out = json.loads(proc.stdout)
    assert out["outcome"] == "LimitBackoff", (out, proc.stderr)
    assert "API retry by the agent: 429 rate_limit" in proc.stderr
    assert elapsed < 120  # well inside the 150 s time limit: the CLI was not left retrying until it
    record = [e for e in ledger(repo, "hello") if e["type"] == "session"][-1]
    started, finished = (datetime.fromisoformat(record[k]) for k in ("started_at", "finished_at"))
    until = datetime.fromisoformat(out["next_action"]["until"])
    # never before the server's 40 s; at most the CLI's own next try (it adds up to 25 % jitter)
    assert started + timedelta(seconds=40) <= until <= finished + timedelta(seconds=51), (started, until, finished)
    assert out["attempts"]["1"]["used"] == 0
