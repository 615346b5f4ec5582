"""The one contract every agent backend implements."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.errors import PlanRunnerError
from runner.evidence import SessionSignals
from runner.plan import AgentConfig


@dataclass(frozen=True)
class SessionRequest:
    """What a backend needs to run one agent session."""

    workdir: Path  # the work tree; the agent may only change things here
    prompt: str
    agent: AgentConfig
    env: dict[str, str]  # the allow-listed environment for the agent's process (see runner.agentenv)
    transcript_dir: Path  # backend-private: saved conversation / CLI transcript; kept with the state
    resume_session_id: str | None = None
    plan_path: Path | None = None  # the plan file in the work tree (the agent ticks checkboxes there)
    handoff_path: Path | None = None  # where the agent writes its handoff
    # where a process backend records the agent's process group while it runs (see supervise.reap_leftover)
    pid_file: Path | None = None
    # live progress for the terminal / summary: (event, detail), e.g. ("tool", "Bash"), ("tokens", "1234")
    on_event: Callable[[str, str], None] = field(default=lambda event, detail: None)


class AgentBackend(Protocol):
    """Run one session to the end and report what happened. Never raises for agent failures:
    a crash, a limit or a stall is a `SessionSignals.exit_kind`, not an exception."""

    name: str

    def run(self, request: SessionRequest) -> SessionSignals: ...


_REGISTRY: dict[str, Callable[[], AgentBackend]] = {}
_BUILTIN = {
    "claude-code": "runner.backends.claude_code",
    "anthropic": "runner.backends.anthropic_agent",
    "codex": "runner.backends.codex",
    "command": "runner.backends.command",
    "script": "runner.backends.script",
}


def register_backend(name: str, factory: Callable[[], AgentBackend]) -> None:
    _REGISTRY[name] = factory


def get_backend(name: str) -> AgentBackend:
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])  # the module calls register_backend on import
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise PlanRunnerError(
            what=f"unknown agent backend {name!r}",
            why="the plan's `agent.backend` names no registered backend",
            fix="use one of: " + ", ".join(sorted(set(_BUILTIN) | set(_REGISTRY))),
        ) from None
