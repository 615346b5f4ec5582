"""The user-written worlds' budget (tests/real_model_worlds.py): pinned, max_sessions is the stage's `sessions:`
(CI's world and the earlier rounds' tables); with no `budget:`, what a user who writes none gets: max_sessions 60
and the stage's attempt budget `sessions` x slack. The plan's text is otherwise the same, byte for byte."""

from __future__ import annotations

import pytest

from runner.core.planfile import parse_plan
from tests.real_model_worlds import PINNED, WORLDS, plan_text


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_a_world_pinned_or_as_a_user_writes_it(name: str) -> None:
    world = WORLDS[name]
    pinned = parse_plan(plan_text(world, "qwen-1.5b", budget=PINNED), "plans/work.md")
    user = parse_plan(plan_text(world, "qwen-1.5b", budget=None), "plans/work.md")
    assert pinned.config.budget.max_sessions == world.sessions == 2
    assert user.config.budget.max_sessions == 60 and "budget:" not in plan_text(world, "m", budget=None)
    assert [user.stage_attempt_budget(s) for s in user.stages] == [4]  # sessions: 2 x slack 2.0
    assert plan_text(world, "m", budget=PINNED).replace(f"budget:\n  max_sessions: {world.sessions}\n", "") \
        == plan_text(world, "m", budget=None)
