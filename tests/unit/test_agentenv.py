"""The agent's environment is an allow-list that never carries GitHub credentials."""

from __future__ import annotations

import os
import sys

import pytest

from runner.adapters.sandbox.agentenv import OPENAI_VARS, build_agent_env
from runner.adapters.secrets import is_github_credential
from runner.core.errors import PlanRunnerError
from runner.adapters.sandbox.supervise import supervise

JOB_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/runner",
    "USER": "runner",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "xterm",
    "TMPDIR": "/tmp",
    "TZ": "UTC",
    "SHELL": "/bin/bash",
    "GIT_AUTHOR_NAME": "plan-runner",
    "ANTHROPIC_API_KEY": "sk-ant-secret-value",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9999",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth-token-value",
    "OPENAI_API_KEY": "sk-openai-value",
    "CODEX_HOME": "/home/runner/.codex",
    "GITHUB_TOKEN": "ghs_job_token_value",
    "GH_TOKEN": "ghp_personal_token",
    "GITHUB_REPOSITORY": "octo/repo",
    "GITHUB_PAT": "ghp_other",
    "ACTIONS_RUNTIME_TOKEN": "runtime-token",
    "ACTIONS_ID_TOKEN_REQUEST_URL": "https://token.example",
    "NPM_TOKEN": "npm-token-value",
    "DB_PASSWORD": "hunter2hunter2",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "MY_TOOL_HOME": "/opt/tool",
    "RANDOM_THING": "x",
}


def test_defaults_pass_basics_and_anthropic_credentials_only():
    """Without extra names the agent gets shell basics and Anthropic/Claude Code variables, nothing else."""
    env = build_agent_env(JOB_ENV)
    assert set(env) == {
        "PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ", "SHELL", "GIT_AUTHOR_NAME",
        "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN",
    }
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-secret-value"


def test_openai_variables_only_when_asked():
    """OPENAI_*/CODEX_* reach the agent only when the backend asks for them."""
    assert "OPENAI_API_KEY" not in build_agent_env(JOB_ENV)
    env = build_agent_env(JOB_ENV, api_key_vars=OPENAI_VARS)
    assert env["OPENAI_API_KEY"] == "sk-openai-value"
    assert env["CODEX_HOME"] == "/home/runner/.codex"
    assert "ANTHROPIC_API_KEY" not in env


def test_plan_listed_names_are_passed_exactly():
    """Names from agent.env pass, including a secret-looking one named exactly."""
    env = build_agent_env(JOB_ENV, allow=["MY_TOOL_HOME", "NPM_TOKEN"])
    assert env["MY_TOOL_HOME"] == "/opt/tool"
    assert env["NPM_TOKEN"] == "npm-token-value"
    assert "DB_PASSWORD" not in env and "RANDOM_THING" not in env


def test_patterns_never_match_secret_looking_names():
    """A wildcard in agent.env does not smuggle in tokens, secrets or passwords."""
    env = build_agent_env(JOB_ENV, allow=["*"])
    assert "RANDOM_THING" in env
    for name in ("NPM_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN"):
        assert name not in env


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "GH_TOKEN", "GITHUB_PAT", "ACTIONS_RUNTIME_TOKEN", "GITHUB_*"])
def test_plan_asking_for_github_credentials_is_an_error(name):
    """A plan that lists a GitHub credential in agent.env is refused with a fix."""
    with pytest.raises(PlanRunnerError) as info:
        build_agent_env(JOB_ENV, allow=[name])
    assert "agent.env" in info.value.fix


def test_github_credentials_never_pass_even_via_api_key_patterns():
    """Even a backend's own credential pattern cannot pick up a GitHub token."""
    env = build_agent_env(JOB_ENV, api_key_vars=("GH_*", "GITHUB_*"))
    assert not any(is_github_credential(name) for name in env)
    assert "GITHUB_TOKEN" not in env and "GH_TOKEN" not in env


def test_extra_variables_are_set_but_not_github_tokens():
    """plan-runner's own variables for the agent are set verbatim; a GitHub token there is refused."""
    env = build_agent_env(JOB_ENV, extra={"PLAN_RUNNER_HANDOFF": "plans/x.handoff.md"})
    assert env["PLAN_RUNNER_HANDOFF"] == "plans/x.handoff.md"
    with pytest.raises(PlanRunnerError):
        build_agent_env(JOB_ENV, extra={"GH_TOKEN": "x"})


@pytest.mark.integration
def test_child_process_sees_no_github_token(tmp_path):
    """A real child started with the built environment finds no GitHub token and has its API key."""
    parent = dict(JOB_ENV, PATH=os.environ["PATH"])
    lines: list[str] = []
    code = "import os\nfor k in sorted(os.environ): print(k)"
    result = supervise(
        [sys.executable, "-c", code], cwd=tmp_path, env=build_agent_env(parent), stall_s=5, time_limit_s=10,
        on_line=lambda line, ctl: lines.append(line),
    )
    assert result.returncode == 0
    assert "ANTHROPIC_API_KEY" in lines
    for name in ("GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN", "NPM_TOKEN", "DB_PASSWORD"):
        assert name not in lines
