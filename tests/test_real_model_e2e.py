"""The one end-to-end run of the largest small model: Qwen2.5-Coder-1.5B-Instruct (GGUF, CPU, one
thread) on a real one-line bug through `plan-runner run` with the built-in `anthropic` backend,
and the verdict checked against a clean clone of the commit plan-runner pushed, gated by hand.

It takes minutes (the model decodes a few tokens a second on a shared 2-core machine), so it is
the only test that loads this model. Nothing is scripted: whatever the model does (in the runs of
docs/real-model.md it fixed the code but edited the plan file instead of ticking, which plan-runner
reverted and parked for a human), the verdict must match the evidence.
"""

from __future__ import annotations

import pytest

from tests.real_model_world import clean_clone_gate, describe, make_project, run_plan
from tests.servers.llama import LlamaServer, model_path

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3300)]  # minutes of CPU inference: see docs/real-model.md

MODEL = "qwen-1.5b"


def test_the_1_5b_model_on_a_real_plan_gets_the_verdict_a_clean_clone_of_the_pushed_commit_shows(tmp_path):
    """Whatever the 1.5B model does, a credit is backed by the fix, the tick and a green gate in a fresh clone of the pushed commit, and anything it broke in the plan file is restored there."""
    repo = make_project(tmp_path, model=MODEL, time_limit="15m", max_sessions=2, attempts=2)
    with LlamaServer(model_path(MODEL), max_tokens_cap=1024) as srv:
        result = run_plan(repo, srv.url, timeout_s=3000)
        replies = srv.replies()
    assert "Traceback" not in result.stderr, result.stderr
    check = clean_clone_gate(tmp_path)
    sessions = result.sessions
    story = describe(result) + f"\n{check}\n" + "\n".join(r["raw"] for r in replies)
    assert sessions and check.commit is not None and replies, story
    assert result.exit_code in (0, 3), story  # finished, or parked with the reason in the ledger
    credited = [s for s in sessions if "1.1" in s["advanced"]]
    assert all(s["outcome"] == "Advanced" for s in credited), story
    # The tick in the pushed commit is there exactly when plan-runner credited it, and a credit
    # means the fix is really there and the gate really passes in a fresh clone.
    assert bool(credited) == check.ticked, story
    if credited:
        assert check.gate_passed and check.calc_fixed, story
    assert result.exit_code != 0 or credited, story
    # The gate plan-runner recorded for the last session is the gate run by hand on what it pushed.
    last_gate = next(g for g in sessions[-1]["gates"] if g["name"] == "tests")
    assert last_gate["passed"] is check.gate_passed, story
    # Whatever the model wrote into the plan file, the pushed plan keeps the maintainer's front
    # matter, stage and checkpoint line (only the box may differ).
    assert check.plan_intact, story
    assert all(r["stop_reason"] in ("tool_use", "end_turn", "max_tokens") for r in replies), story
