"""The one contract every agent backend implements."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.core.backend_spec import BACKENDS, spec_of
from runner.core.errors import PlanRunnerError
from runner.core.evidence import SessionSignals
from runner.core.plan import AgentConfig
from runner.adapters.sandbox.identity import Identity


@dataclass(frozen=True)
class SessionRequest:
    """What a backend needs to run one agent session."""

    workdir: Path  # the work tree; the agent may only change things here
    prompt: str
    agent: AgentConfig
    env: dict[str, str]  # the allow-listed environment for the agent's process (see runner.adapters.sandbox.agentenv)
    transcript_dir: Path  # backend-private: saved conversation / CLI transcript; kept with the state
    resume_session_id: str | None = None
    plan_path: Path | None = None  # the plan file in the work tree (the agent ticks checkboxes there)
    handoff_path: Path | None = None  # where the agent writes its handoff
    # where a process backend records the agent's process group while it runs (see proc.reap_leftover)
    pid_file: Path | None = None
    # live progress for the terminal / summary: (event, detail), e.g. ("tool", "Bash"), ("tokens", "1234")
    on_event: Callable[[str, str], None] = field(default=lambda event, detail: None)
    # who the agent's processes run as (runner.adapters.sandbox.identity); the default is plan-runner's own user
    identity: Identity = field(default_factory=Identity)
    # a directory the agent's processes may write (a CLI's config, sessions to resume); None: transcript_dir.
    # transcript_dir itself is plan-runner's: only the backend's parent process writes there.
    agent_state_dir: Path | None = None
    # where plan-runner puts files the agent reads but must not change (a prompt file, a script); None: state_dir
    input_dir: Path | None = None
    # the agent's credential files plan-runner wrote (runner.adapters.sandbox.agent_creds), by name: e.g. a Codex
    # login's "auth.json"; readable by the agent's user alone
    credential_files: Mapping[str, Path] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.agent_state_dir or self.transcript_dir

    def state_subdir(self, name: str) -> Path:
        """A folder in the agent's state directory that the agent's processes can write (a CLI's config dir): in a
        room they run as plan-runner's own uid, in the agent's area, which the room grants them."""
        path = Path(self.state_dir).resolve() / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_input(self, name: str, text: str) -> Path:
        """A file plan-runner hands the agent (a prompt, a script): written before the agent starts, into
        the agent's state directory, never through a link planted there; readable, not writable, by it."""
        folder = Path(self.input_dir or self.state_dir).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        if path.is_symlink() or path.exists():
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(path, 0o644)
        return path


class AgentBackend(Protocol):
    """Run one session to the end and report what happened. Never raises for agent failures:
    a crash, a limit or a stall is a `SessionSignals.exit_kind`, not an exception."""

    name: str

    def run(self, request: SessionRequest) -> SessionSignals: ...


def executable_of(name: str, agent: AgentConfig, env: Mapping[str, str] | None = None) -> str:
    """The program a CLI backend starts: `agent.executable`, else the spec's override variable in plan-runner's
    own environment (`env`, default os.environ), else the spec's default name on the agent's PATH. The preflight
    reads the same (runner.drivers.session.preflight.agent_executable)."""
    spec = spec_of(name)
    if agent.executable:
        return agent.executable
    if spec is None or spec.executable is None:
        raise PlanRunnerError(what=f"the {name} backend needs `agent.executable`", why="it names no default program",
                              fix="set `agent.executable` in the plan")
    return (os.environ if env is None else env).get(spec.executable.override_env) or spec.executable.default


def get_backend(name: str) -> AgentBackend:
    """A new instance of the backend `name`, from its row in runner.core.backend_spec.BACKENDS (a plain table:
    see there why a backend is not a plugin)."""
    spec = spec_of(name)
    if spec is None:
        raise PlanRunnerError(
            what=f"unknown agent backend {name!r}",
            why="the plan's `agent.backend` names no backend plan-runner has",
            fix="use one of: " + ", ".join(BACKENDS),
        )
    module, _, attr = spec.factory.partition(":")
    return getattr(importlib.import_module(module), attr)()
