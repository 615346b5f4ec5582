"""MCP servers and tool permissions as plan keys: validated, in the schema, passed to Claude Code and Codex in
their own formats, plan-runner's own tools always kept."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from runner.adapters.sandbox.agentenv import backend_agent_env
from runner.backends import get_backend
from runner.backends.common.base import SessionRequest
from runner.backends.claude_code.backend import ALLOWED_TOOLS, STREAM_LOG, build_claude_argv, mcp_config
from runner.backends.codex.backend import build_codex_argv
from runner.core.errors import PlanRunnerError
from runner.core.evidence import ExitKind
from runner.core.plan import REQUIRED_TOOLS, AgentConfig
from runner.core.planfile import parse_plan
from tests.git_repos import init_repo
from tests.servers.messages import MessagesServer, reply, tool_use
from tests.integration.test_backend_claude_code import _claude

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "servers" / "mcp_stdio.py"


def _plan(agent: str) -> str:
    return ("---\nagent:\n" + agent + "gates:\n  - name: t\n    run: 'true'\n---\n# P\n\n## Stage 1\n\n"
            "- [ ] 1.1 do it\n")


def _agent(**kw) -> AgentConfig:
    return AgentConfig(**kw)


def test_validate_refuses_what_would_break_or_bypass_plan_runners_list():
    """Each refusal says what and how to fix: a denied required tool, a permission flag in agent.args (it would
    replace plan-runner's list: refused, not merged), a tool of no declared server, a codex built-in tool rule."""
    cases = {
        "  disallowed_tools: [Edit]\n": "may not deny Edit",
        "  args: [--allowedTools, Bash]\n": "may not set --allowedTools",
        "  args: ['--permission-mode=bypassPermissions']\n": "may not set --permission-mode",
        "  args: [--mcp-config, x.json]\n": "may not set --mcp-config",
        "  allowed_tools: [mcp__nope__x]\n": "names no server",
        "  backend: codex\n  allowed_tools: [WebFetch]\n": "Codex has no per-tool list",
        "  backend: anthropic\n  allowed_tools: [WebFetch]\n": "its own fixed tools",
        "  mcp_servers:\n    a__b: {command: x}\n": "single '_'",
        "  mcp_servers:\n    docs: {command: x, url: 'http://h'}\n": "give one of them",
        "  mcp_servers:\n    docs: {command: x, env: [GITHUB_TOKEN]}\n": "GitHub credentials never",
        "  mcp_servers:\n    docs: {command: x, env: ['NOT A NAME']}\n": "variable names",
    }
    for agent, words in cases.items():
        with pytest.raises(PlanRunnerError) as err:
            parse_plan(_plan(agent), "plans/p.md")
        assert words in err.value.render(), (agent, err.value.render())
    ok = parse_plan(_plan("  mcp_servers:\n    docs: {command: node, args: [s.js], env: [DOCS_KEY]}\n"
                          "  allowed_tools: [WebFetch, 'Bash(npm test:*)', mcp__docs__search]\n"
                          "  disallowed_tools: ['Bash(rm:*)', mcp__docs__delete]\n"), "plans/p.md")
    assert ok.config.agent.passed_env == ("DOCS_KEY",)


def test_the_schema_has_the_tool_keys():
    schema = json.loads((ROOT / "docs/plan.schema.json").read_text())
    text = json.dumps(schema)
    for key in ("mcp_servers", "allowed_tools", "disallowed_tools", "McpServer"):
        assert key in text


def test_claude_code_gets_its_own_list_merged_with_the_plans():
    """--allowedTools: plan-runner's tools first, then the plan's and each server's mcp__<name>; --disallowedTools
    as given; the MCP config names variables, never their values."""
    agent = _agent(mcp_servers={"docs": {"command": "node", "args": ["s.js"], "env": ["DOCS_KEY"]},
                                "web": {"url": "https://mcp.example.com/mcp"}},
                   allowed_tools=["WebFetch"], disallowed_tools=["Bash(rm:*)"])
    argv = build_claude_argv("claude", model=None, resume_session_id=None, agent=agent, mcp_config_path=Path("/c.json"))
    allowed = argv[argv.index("--allowedTools") + 1].split(",")
    assert allowed[:len(ALLOWED_TOOLS)] == list(ALLOWED_TOOLS) and set(REQUIRED_TOOLS) <= set(allowed)
    assert allowed[len(ALLOWED_TOOLS):] == ["WebFetch", "mcp__docs", "mcp__web"]
    assert argv[argv.index("--disallowedTools") + 1] == "Bash(rm:*)"
    assert argv[argv.index("--mcp-config") + 1] == "/c.json" and argv.count("--permission-mode") == 1
    assert mcp_config(agent) == {"mcpServers": {
        "docs": {"type": "stdio", "command": "node", "args": ["s.js"], "env": {"DOCS_KEY": "${DOCS_KEY}"}},
        "web": {"type": "http", "url": "https://mcp.example.com/mcp"}}}


def test_codex_gets_the_servers_as_its_own_config():
    agent = _agent(backend="codex", mcp_servers={"docs": {"command": "node", "args": ["s.js"], "env": ["DOCS_KEY"]}},
                   allowed_tools=["mcp__docs__search"], disallowed_tools=["mcp__docs__delete"])
    argv = build_codex_argv("codex", model=None, workdir=Path("/w"), env={}, resume_thread_id=None, agent=agent)
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert pairs == ['mcp_servers.docs.command="node"', 'mcp_servers.docs.args=["s.js"]',
                     'mcp_servers.docs.env_vars=["DOCS_KEY"]', 'mcp_servers.docs.enabled_tools=["search"]',
                     'mcp_servers.docs.disabled_tools=["delete"]']


@pytest.fixture
def repo(tmp_path: Path):
    r = init_repo(tmp_path / "work", {"PLAN.md": "# Demo\n\n- [ ] hi\n"}, "plan", name="A", email="a@example.com")
    yield r
    r.close()


def test_the_real_claude_code_calls_the_plans_mcp_server_and_is_denied_the_disallowed_tool(repo, tmp_path):
    """The real CLI starts the plan's stdio MCP server with the variable the plan names (its value from the agent's
    environment), calls its allowed tool, and is refused the tool the plan disallows."""
    log = tmp_path / "mcp.log"
    agent = _agent(backend="claude-code", executable=_claude(), stall_minutes="30s", time_limit_minutes="90s",
                   mcp_servers={"standin": {"command": sys.executable, "args": [str(SERVER), str(log)],
                                            "env": ["STANDIN_VALUE"]}},
                   disallowed_tools=["mcp__standin__secret"])
    with MessagesServer() as srv:
        srv.enqueue(reply(tool_use("mcp__standin__echo", {"text": "hi"})),
                    reply(tool_use("mcp__standin__secret", {})), reply("done"))
        parent = {"PATH": os.environ["PATH"], "GITHUB_TOKEN": "ghp_x_0123456789", "STANDIN_VALUE": "value-42",
                  "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": srv.url}
        env = backend_agent_env(parent, "claude-code", agent.passed_env)
        (tmp_path / "home").mkdir()
        request = SessionRequest(workdir=Path(repo.working_tree_dir), prompt="Use the tools.", agent=agent,
                                 env={**env, "HOME": str(tmp_path / "home")}, transcript_dir=tmp_path / "t")
        signals = get_backend("claude-code").run(request)
        bodies = [json.dumps(r.json) for r in srv.message_requests]
    assert signals.exit_kind is ExitKind.FINISHED, signals.error
    results = [b for b in bodies if "tool_result" in b]
    assert any("echo:hi env:value-42" in b for b in results), results
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["params"]["name"] for c in calls if c.get("method") == "tools/call"] == ["echo"]  # secret: denied
    init = next(json.loads(line) for line in (tmp_path / "t" / STREAM_LOG).read_text().splitlines()
                if '"init"' in line)
    assert ("standin", "connected") in [(m.get("name"), m.get("status")) for m in init.get("mcp_servers", [])]
    assert set(ALLOWED_TOOLS) & set(init.get("tools", [])) >= {"Bash", "Edit", "Write", "Read"}


def test_the_documented_example_is_a_valid_agent():
    """docs/claude-code.md's example of the tool keys passes the plan's validation as written."""
    text = (ROOT / "docs/claude-code.md").read_text()
    block = next(b for b in text.split("```yaml\n")[1:] if "mcp_servers" in b).split("```", 1)[0]
    agent = AgentConfig(**yaml.safe_load(block)["agent"])
    assert set(agent.mcp_servers) == {"docs", "tracker"} and agent.passed_env == ("DOCS_API_KEY",)


def test_the_real_codex_starts_the_plans_mcp_server(tmp_path):
    """The real Codex CLI, given the plan's server as its own config, starts it (initialize, tools/list) with the
    variable the plan names forwarded."""
    from runner.backends.codex.backend import CodexBackend
    from tests.servers.responses import ResponsesServer, reply as codex_reply
    from tests.integration.test_credentials import _codex_exe

    exe = os.environ.get("PLAN_RUNNER_CODEX") or _codex_exe()
    log = tmp_path / "mcp.log"
    workdir = tmp_path / "repo"
    init_repo(workdir, {"README.md": "hi\n"}, "init", name="A", email="a@example.com").close()
    (tmp_path / "home").mkdir()
    agent = _agent(backend="codex", executable=exe, model="gpt-5-codex", stall_minutes="60s",
                   time_limit_minutes="120s",
                   mcp_servers={"standin": {"command": sys.executable, "args": [str(SERVER), str(log)],
                                            "env": ["STANDIN_VALUE"]}})
    with ResponsesServer(default=codex_reply("hello")) as srv:
        parent = {"PATH": os.environ["PATH"], "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.url,
                  "STANDIN_VALUE": "value-42", "GITHUB_TOKEN": "ghp_x_0123456789"}
        env = backend_agent_env(parent, "codex", agent.passed_env)
        request = SessionRequest(workdir=workdir, prompt="Say hello.", agent=agent,
                                 env={**env, "HOME": str(tmp_path / "home")}, transcript_dir=tmp_path / "t")
        signals = CodexBackend().run(request)
        tools_offered = json.dumps([r.json.get("tools") for r in srv.response_requests])
    assert signals.exit_kind is ExitKind.FINISHED, signals.error
    methods = [json.loads(line).get("method") for line in log.read_text().splitlines()]
    assert "initialize" in methods and "tools/list" in methods
    assert "echo" in tools_offered  # the server's tool reached the model's tool list


def test_the_preflight_names_an_mcp_server_whose_command_is_missing(tmp_path):
    from runner.drivers.session.preflight import problems

    plan = parse_plan(_plan(f"  executable: {_claude()}\n  mcp_servers:\n    docs: {{command: no-such-mcp-server-1}}\n"
                            "    ok: {command: sh}\n"), "plans/p.md")
    found = problems(plan, {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "k"}, tmp_path, commands=False)
    assert [p.what for p in found] == ["MCP server 'docs': command 'no-such-mcp-server-1' cannot be found"]
