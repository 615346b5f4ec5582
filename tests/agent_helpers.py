"""Shared set-up for tests of the built-in `anthropic` agent: a real git repo and a SessionRequest."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import git

from runner.backends.anthropic.backend import AnthropicAgentBackend
from runner.backends.common.base import SessionRequest
from runner.core.plan import AgentConfig
from tests.git_repos import init_repo


def interruptible() -> None:
    """`preexec_fn` for a child the test will Ctrl-C: SIGINT back to its default before exec. A suite started as a
    shell's background job (`.ci/run &`) ignores SIGINT, an ignored signal is inherited across exec, and a Python
    started with SIGINT ignored installs no KeyboardInterrupt handler: the child would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

PLAN_TEXT = "# Plan\n\n## Stage 1: Greet <!-- sessions: 1 -->\n- [ ] 1.1 Add hello.py\n"


def make_repo(root: Path) -> git.Repo:
    """A repository with one commit holding the plan file."""
    return init_repo(root, {"plan.md": PLAN_TEXT}, "base", name="Test Agent", email="agent@example.com")


def agent_env(url: str, home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": url,
        "GIT_AUTHOR_NAME": "Test Agent",
        "GIT_AUTHOR_EMAIL": "agent@example.com",
        "GIT_COMMITTER_NAME": "Test Agent",
        "GIT_COMMITTER_EMAIL": "agent@example.com",
    }


def make_request(tmp_path: Path, url: str, *, prompt: str = "Do checkpoint 1.1", events: list | None = None,
                 resume: str | None = None, **agent: Any) -> SessionRequest:
    workdir = tmp_path / "repo"
    if not workdir.exists():
        make_repo(workdir)
    agent.setdefault("stall_minutes", "5s")
    agent.setdefault("time_limit_minutes", "60s")
    config = AgentConfig(backend="anthropic", model="claude-test-1", **agent)
    sink = events if events is not None else []
    return SessionRequest(
        workdir=workdir,
        prompt=prompt,
        agent=config,
        env=agent_env(url, tmp_path),
        transcript_dir=tmp_path / "transcripts",
        resume_session_id=resume,
        on_event=lambda event, detail: sink.append((event, detail)),
    )


def fast_backend(**kw: Any) -> AnthropicAgentBackend:
    """Zero backoff (the testing switch) so retries take no wall time."""
    kw.setdefault("backoff_s", 0.0)
    return AnthropicAgentBackend(**kw)


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool_result block the client sent in one request body."""
    found = []
    for msg in body["messages"]:
        if msg["role"] == "user" and isinstance(msg["content"], list):
            found += [b for b in msg["content"] if b.get("type") == "tool_result"]
    return found


def user_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for msg in body["messages"]:
        if msg["role"] != "user":
            continue
        content = msg["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts += [b["text"] for b in content if b.get("type") == "text"]
    return texts
