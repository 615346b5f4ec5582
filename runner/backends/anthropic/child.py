"""The built-in agent's loop in a process of its own, run as the agent's identity (docs/security.md, "The mechanism").

Its tools (shell commands, file writes) are the agent's actions: they must not run
inside plan-runner's process, where they could read the GitHub token or write the
judge's files. The parent (`AnthropicAgentBackend` with an isolated identity)
starts `python -I -m runner.backends.anthropic.child` under supervision, writes the
request as one JSON line on stdin, and reads progress events and, last, the
session's signals as JSON lines on stdout. What the child prints is the agent's
account: the verdict is still computed from evidence.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from runner.backends.common.base import SessionRequest
from runner.core.plan import AgentConfig


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    from runner.backends.anthropic.backend import AnthropicAgentBackend

    payload = json.loads(sys.stdin.readline())
    state_dir = Path(payload["state_dir"])
    request = SessionRequest(
        workdir=Path(payload["workdir"]), prompt=payload["prompt"],
        agent=AgentConfig.model_validate(payload["agent"]), env=dict(os.environ),
        transcript_dir=state_dir, resume_session_id=payload.get("resume_session_id"),
        plan_path=Path(payload["plan_path"]) if payload.get("plan_path") else None,
        handoff_path=Path(payload["handoff_path"]) if payload.get("handoff_path") else None,
        on_event=lambda kind, detail: _emit({"event": kind, "detail": detail}),
    )
    signals = AnthropicAgentBackend(**payload.get("options", {})).run(request)
    _emit({"signals": json.loads(signals.model_dump_json())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
