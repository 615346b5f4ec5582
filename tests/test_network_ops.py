"""How often a session and a tick talk to the remote, counted by a `git` wrapper first on PATH (every git
process plan-runner starts, with real git behind it): a regression in round trips fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.common import child_env
from benchmarks.github_calls import TOKEN, _env
from benchmarks.state_bench import _two_sessions, _verb
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration


def test_a_dispatched_session_makes_one_fetch_and_one_push(tmp_path: Path):
    """Session 2 (dispatched by session 1, whose record carries the intent): one fetch (state, work branch, base)
    and one atomic push (verdict, start, work branch); session 1, started by hand, also pushes its start before
    its agent runs, so a job killed outright is still found by the tick."""
    with GitHubServer(token=TOKEN) as srv:
        env = {**_env(srv), **child_env(PLAN_RUNNER_ISOLATION="none")}
        first, second = _two_sessions(tmp_path, "net", srv, env)
    assert first["outcome"] == second["outcome"] == "Advanced", (first, second)
    verbs = lambda s: [_verb(c) for c in s["network"]]  # noqa: E731
    assert verbs(second) == ["fetch", "push"], second["network"]
    assert "--atomic" in second["network"][1]
    assert verbs(first) == ["fetch", "push", "push"], first["network"]
    assert second["api_calls"] == 1  # the dispatch of session 3


def test_the_early_push_opt_in_still_pushes_before_the_agent_and_the_gates(tmp_path: Path):
    """PLAN_RUNNER_EARLY_PUSH=1: the start, the session ref and the remote tamper check come back (5 in all)."""
    with GitHubServer(token=TOKEN) as srv:
        env = {**_env(srv), **child_env(PLAN_RUNNER_ISOLATION="none"), "PLAN_RUNNER_EARLY_PUSH": "1"}
        _first, second = _two_sessions(tmp_path, "early", srv, env)
    assert [_verb(c) for c in second["network"]] == ["fetch", "push", "fetch", "push", "push"], second["network"]
    assert any("refs/plan-runner/sessions/work/2" in c for c in second["network"])
