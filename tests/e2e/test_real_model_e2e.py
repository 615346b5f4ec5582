"""The one end-to-end run of the largest small model: Qwen2.5-Coder-1.5B-Instruct (GGUF, CPU, one
thread, temperature 0, an 8,192-token context, sha256-pinned weights, pinned node-llama-cpp) on a
real one-line bug through `plan-runner run` with the built-in `anthropic` backend, and the verdict
checked against a clean clone of the commit plan-runner pushed, gated by hand.

It takes minutes (the model decodes a few tokens a second on a shared 2-core machine), so it is
the only test that loads this model. Nothing is scripted: the model's replies are whatever greedy
decoding of plan-runner's prompt gives. With the prompt that points at the work (docs/real-model.md)
the model earns the checkpoint, and this test requires it: Advanced with 1.1 credited, the tick in
the pushed commit, the fix and a green gate in a fresh clone. The limits are generous (a slow
machine only makes it slower); the assertion of the credit is strict. On failure it prints every
call the model made and what it was shown.
"""

from __future__ import annotations

import time

import pytest

from tests.real_model_world import clean_clone_gate, describe, make_project, run_plan
from tests.servers.llama import LlamaServer, calls_text, model_path

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]  # minutes of CPU inference: see docs/real-model.md

MODEL = "qwen-1.5b"


def test_the_1_5b_model_earns_checkpoint_1_1_and_a_clean_clone_of_the_pushed_commit_backs_the_credit(tmp_path):
    """The 1.5B model fixes the bug, commits and ticks: Advanced with 1.1 credited, and a fresh clone of the pushed commit has the tick, the fix, a green gate and the maintainer's plan lines."""
    repo = make_project(tmp_path, model=MODEL, time_limit="25m", max_sessions=2, attempts=2, stall="5m")
    started = time.monotonic()
    with LlamaServer(model_path(MODEL), max_tokens_cap=1024) as srv:
        result = run_plan(repo, srv.url, timeout_s=3300)
        replies = srv.replies()
    check = clean_clone_gate(tmp_path)
    sessions = result.sessions
    story = (describe(result) + f"\n{check}\n" + calls_text(replies)
             + f"\n[{time.monotonic() - started:.0f} s with the server start]")
    print(story)  # shown with -s, and kept in the report of a failure
    assert "Traceback" not in result.stderr, story
    assert sessions and check.commit is not None and replies, story
    credited = [s for s in sessions if "1.1" in s["advanced"]]
    # Every session that lists 1.1 as advanced is Advanced (the record is consistent), and the model
    # earned it: the plan is finished.
    assert all(s["outcome"] == "Advanced" for s in credited), story
    assert credited and result.exit_code == 0, story
    # The tick in the pushed commit is there exactly when plan-runner credited it, and the credit
    # means the fix is really there and the gate really passes in a fresh clone.
    assert check.ticked, story
    assert check.gate_passed and check.calc_fixed and check.work_commits >= 1, story
    # The gate plan-runner recorded for the crediting session is the gate run by hand on what it pushed.
    last_gate = next(g for g in credited[-1]["gates"] if g["name"] == "tests")
    assert last_gate["passed"] is check.gate_passed, story
    # The pushed plan keeps the maintainer's front matter, stage and checkpoint lines (only the box differs).
    assert check.plan_intact, story
    assert all(r["stop_reason"] in ("tool_use", "end_turn", "max_tokens") for r in replies), story
