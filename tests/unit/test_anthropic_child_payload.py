"""The built-in agent's isolated child reads back the agent's configuration the parent sends it
(runner.backends.anthropic.backend.agent_payload): the same stall and time limit, in seconds, not read as minutes."""

from __future__ import annotations

import json

import pytest

from runner.backends.anthropic.backend import agent_payload
from runner.core.plan import AgentConfig


@pytest.mark.parametrize("duration", ["6s", "0.5s", "90m", "2h", 12, 0.25, "1234.5678s"])
def test_the_child_reads_the_same_configuration_the_parent_holds(duration):
    agent = AgentConfig.model_validate({"backend": "anthropic", "model": "m", "stall_minutes": duration,
                                        "time_limit_minutes": duration, "session_tokens": 5000})
    child = AgentConfig.model_validate(json.loads(json.dumps(agent_payload(agent))))  # as it crosses the pipe
    assert child == agent
    assert child.stall_s == agent.stall_s and child.time_limit_s == agent.time_limit_s
