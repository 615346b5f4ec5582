"""The seed orchestrator's verdict cases of issue 46 (item 7), through the real CLI: a command agent's "try again in
30s" is a wait with no attempt burned; a session that rolls over keeps in its record what the agent claimed (data,
never evidence) and its commits. Live usage deciding RolledOver, with the real Codex CLI, is in
tests/e2e/test_codex_session_cli.py; the claim kept by Claude Code and the built-in agent stopped at their budget in
tests/e2e/test_session_real_agents.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from runner.adapters.store.state import ledger_text
from tests.integration.test_session_local import MUL, make_repo, session
from tests.reliability_world import git

pytestmark = pytest.mark.integration


def records(repo: Path) -> list[dict]:
    return [e for e in map(json.loads, ledger_text(repo, "refs/plan-runner/state/calc").splitlines())
            if e["type"] == "session"]


def test_a_command_agents_try_again_in_30s_is_a_wait_with_no_attempt_burned(tmp_path):
    """A command agent that says only "try again in 30s" and exits 1: LimitBackoff until about 30 s later, on
    nobody's attempt; running again before then runs nothing."""
    repo = make_repo(tmp_path, agent="#!/bin/sh\necho 'Error: the service is busy, try again in 30s'\nexit 1\n")
    before = datetime.now(timezone.utc)
    code, out, err = session(repo)
    assert out["outcome"] == "LimitBackoff" and out["blame"] == "environment", (out, err)
    assert out["next_action"]["action"] == "wait" and out["attempts"]["1"]["used"] == 0
    until = datetime.fromisoformat(out["next_action"]["until"])
    assert before + timedelta(seconds=25) <= until <= datetime.now(timezone.utc) + timedelta(seconds=35), until
    code, again, _ = session(repo)
    assert again["status"] == "waiting" and again["outcome"] is None
    assert [r["outcome"] for r in records(repo)] == ["LimitBackoff"]


def test_a_session_that_rolls_over_keeps_the_agents_claim_and_its_commits(tmp_path):
    """The agent commits its work, ticks 1.1, writes a handoff and says it is done; then its token budget runs out.
    RolledOver: the tick is not credited (only Advanced credits) and is reverted, but the record keeps the claim as
    data (the ticked checkpoint in its rejected flips, its words in its hints); the commits stay, and the next
    session's verdict counts them."""
    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
            - commit: "Add mul"
            - check: "1.1"
            - commit: "Tick 1.1"
            - handoff: "mul is done and ticked; 1.2 next"
            - say: "All done: 1.1 is complete and all tests pass."
            - tokens: 12000
          - - check: "1.1"
            - commit: "Tick 1.1 again"
        """)
    _, out, _ = session(repo)
    assert out["outcome"] == "RolledOver" and out["blame"] == "environment", out
    first = records(repo)[0]
    assert first["advanced"] == []
    assert first["hints"]["claimed_done"] is True and "all tests pass" in first["hints"]["claims"]
    assert "All done" in first["hints"]["final_text"]
    assert any(r.startswith("1.1: the session ended RolledOver") for r in first["rejected_flips"])
    assert "Add mul" in git(repo, "log", "--format=%s", "plan-runner/calc")
    assert "- [ ] 1.1" in git(repo, "show", "plan-runner/calc:plans/calc.md")  # not credited, so not ticked
    assert out["next_action"]["kind"] == "handoff" and out["attempts"]["1"]["used"] == 0
    _, second, _ = session(repo)
    assert second["outcome"] == "Advanced", second  # the handoff session's tick, with the carried work
    assert any("counting 1 work commit(s) of the earlier session(s)" in r for r in second["reasons"]), second
