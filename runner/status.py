"""Status of every plan: stage, checkpoints done, attempts left, last outcome, what happens next."""

from __future__ import annotations

from pathlib import Path

from runner.actions import Wait, describe
from runner.local import local_drivers, local_workspace
from runner.policy import decide_start
from runner.session import Session


def plan_status(path: Path, drivers=None) -> dict:
    ws = local_workspace(path)
    s = Session(ws, drivers or local_drivers(ws))
    plan, state = s.plan, s.state
    nxt = plan.next_checkpoint(state.skipped)
    stage = plan.stage_of(nxt.id) if nxt else None
    action = decide_start(state, plan)
    if state.finished:
        next_text = f"finished ({state.pull_request or 'report written'})"
    elif state.open_session:
        next_text = f"session {state.open_session.n} started by {state.open_session.job}, not finished"
    else:
        next_text = describe(action)
    return {
        "plan": plan.id, "path": plan.path,
        "stage": f"{stage.number}: {stage.title}" if stage else "-",
        "checkpoint": nxt.id if nxt else None,
        "done": sum(c.state.value == "DONE" for c in plan.checkpoints), "checkpoints": len(plan.checkpoints),
        "attempts_left": (plan.stage_attempt_budget(stage) - state.stage_attempts.get(stage.number, 0)) if stage else 0,
        "sessions": state.sessions, "tokens": state.tokens, "cost_usd": round(state.cost_usd, 4),
        "last_outcome": state.last.outcome.value if state.last else None,
        "parked": state.parked, "finished": state.finished,
        "waiting_until": action.until.isoformat() if isinstance(action, Wait) else None,
        "next": next_text,
    }


def plan_statuses(paths: list[Path]) -> list[dict]:
    """Every plan's status from one read of the remote: one fetch brings all plans' state refs."""
    if not paths:
        return []
    first = local_workspace(paths[0])
    drivers = local_drivers(first)
    drivers.store.plans()
    return [plan_status(p, drivers if local_workspace(p).repo == first.repo else None) for p in paths]
