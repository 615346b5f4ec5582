"""`plan-runner session` with the real Codex CLI against the scripted Responses server (issue 46): what one session
writes into Codex's own configuration (`$CODEX_HOME/config.toml`: a `notify` program, an extra MCP server) is not in
force in the next session (item 3: of the agent's CLI state plan-runner keeps only session transcripts,
runner/adapters/judge/agent_state.py); usage past the token budget, which Codex reports only when a turn ends, so
that it cannot be stopped mid-turn, decides RolledOver (item 7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.adapters.store.state import ledger_text
from tests.conftest import agent_writable
from tests.reliability_world import git
from tests.servers.responses import ResponsesServer, reply, shell

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

PLAN = """\
---
agent:
  backend: codex
  executable: {codex}
  model: gpt-5-codex
  stall_minutes: 60s
  time_limit_minutes: 3m{tokens}
gates:
  - name: tests
    run: test -f hello.txt
budget:
  max_sessions: 10
---
# Hello

## Stage 1: Greeting <!-- sessions: 2 -->
- [ ] 1.1 write hello.txt
- [ ] 1.2 write bye.txt
"""


@pytest.fixture(scope="module")
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


def session(repo: Path, srv: ResponsesServer) -> dict:
    env = dict(os.environ, OPENAI_API_KEY="sk-test-codex-0000", OPENAI_BASE_URL=srv.url)
    proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/hello.md", "--json"], cwd=repo,
                          capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def tick(cid: str, name: str) -> str:
    return (f"echo {name} > {name}.txt && git add {name}.txt && git commit -q -m 'Add {name}' && "
            f"sed -i 's/- \\[ \\] {cid}/- [x] {cid}/' plans/hello.md && git commit -q -am 'Tick {cid}'")


SERVER = ROOT / "tests" / "servers" / "mcp_stdio.py"
WIDENED = ['notify = ["sh", "-c", "true"]', "[mcp_servers.extra]", f'command = "{sys.executable}"',
           f'args = ["{SERVER}", "/dev/null"]']


def offered(bodies) -> str:
    return json.dumps([b.get("tools") for b in bodies])


def test_the_widened_configuration_is_in_force_where_it_is_kept(codex_exe, tmp_path):
    """The control: Codex run directly with that `config.toml` in its CODEX_HOME offers the extra server's tools."""
    from runner.backends.codex.backend import CodexBackend
    from runner.backends.common.base import SessionRequest
    from runner.core.plan import AgentConfig

    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text("\n".join(WIDENED) + "\n")
    (tmp_path / "w").mkdir()
    git(tmp_path / "w", "init", "-q")
    with ResponsesServer(default=reply("hello")) as srv:
        agent = AgentConfig(backend="codex", model="gpt-5-codex", executable=codex_exe, stall_minutes="60s",
                            time_limit_minutes="120s")
        request = SessionRequest(workdir=tmp_path / "w", prompt="Say hello.", agent=agent,
                                 env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home),
                                      "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.url},
                                 transcript_dir=tmp_path / "t")
        CodexBackend().run(request)
        tools = offered(r.json for r in srv.response_requests)
    assert "extra" in tools and "echo" in tools, tools


def test_codex_configuration_written_by_one_session_is_not_in_force_in_the_next(codex_exe, tmp_path):
    """Session 1 appends a `notify` program and an MCP server to `$CODEX_HOME/config.toml` (the CLI's own config
    folder, in plan-runner's saved state) and advances; session 2 runs Codex again on the same plan: the extra
    server's tools are not offered to the model (the control above: they would be, were the file in force)."""
    repo = codex_repo(tmp_path, codex_exe)
    marker = agent_writable(repo, "codex-config-written", "hello")
    lines = " ".join("'" + line + "'" for line in WIDENED)
    widen = (f"mkdir -p \"$CODEX_HOME\" && printf '%s\\n' {lines} >> \"$CODEX_HOME/config.toml\" && "
             f"cat \"$CODEX_HOME/config.toml\" >> {marker}")
    with ResponsesServer() as srv:
        srv.enqueue(reply("Widening.", shell(widen)), reply("Working.", shell(tick("1.1", "hello"))),
                    reply("Done: 1.1."))
        first = session(repo, srv)
        assert first["outcome"] == "Advanced", first
        assert "[mcp_servers.extra]" in marker.read_text(), marker.read_text()
        done = len(srv.response_requests)
        srv.enqueue(reply("Working.", shell(tick("1.2", "bye"))), reply("Done: 1.2."))
        second = session(repo, srv)
        tools = offered(r.json for r in srv.response_requests[done:])
    assert second["outcome"] == "Advanced", second
    assert len(srv.response_requests) > done and "extra" not in tools, tools


def codex_repo(tmp_path: Path, codex: str, tokens: str = "") -> Path:
    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    (repo / "plans" / "hello.md").write_text(PLAN.format(codex=codex, tokens=tokens))
    (repo / "README.md").write_text("hello\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Maintainer")
    git(repo, "config", "user.email", "m@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


@pytest.mark.parametrize("ticks", [False, True], ids=["work-only", "ticked"])
def test_live_usage_past_the_budget_decides_rolled_over_with_the_real_codex(codex_exe, tmp_path, ticks):
    """Codex commits work and reports 20,000 tokens against a budget of 10,000: RolledOver (not Progress), no
    attempt burned, the claim in the record; the same with a genuine tick is Advanced (the checkpoint is done)."""
    repo = codex_repo(tmp_path, codex_exe, tokens="\n  session_tokens: 10000")
    work = "echo hello > hello.txt && git add hello.txt && git commit -q -m 'Add hello'"
    if ticks:
        work += " && sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/hello.md && git commit -q -am 'Tick 1.1'"
    with ResponsesServer() as srv:
        srv.enqueue(reply("Working.", shell(work), usage={"input_tokens": 12000, "output_tokens": 100}),
                    reply("Done: all tests pass.", usage={"input_tokens": 8000, "output_tokens": 100}))
        out = session(repo, srv)
    assert out["tokens"] >= 20000, out
    if ticks:
        assert out["outcome"] == "Advanced", out
        return
    assert out["outcome"] == "RolledOver" and out["blame"] == "environment", out
    assert any("counted live" in r for r in out["reasons"]), out["reasons"]
    assert out["next_action"]["kind"] == "handoff" and out["attempts"]["1"]["used"] == 0
    record = [e for e in map(json.loads, ledger_text(repo, "refs/plan-runner/state/hello").splitlines())
              if e["type"] == "session"][0]
    assert record["hints"]["claimed_done"] is True and "all tests pass" in record["hints"]["claims"]
    assert "Add hello" in git(repo, "log", "--format=%s", "plan-runner/hello")
