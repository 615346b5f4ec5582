"""Status of every plan: stage, checkpoints done, attempts left, last outcome, what happens next."""

from __future__ import annotations

import os
from pathlib import Path

from runner.core.actions import Wait, describe
from runner.core.compaction import summary_line
from runner.core.ledger import Summary
from runner.core.errors import PlanRunnerError
from runner.drivers.cli.local import local_ports, local_workspace, repo_root
from runner.core.policy import decide_start
from runner.drivers.session import load_session


def plan_status(path: Path, ports=None) -> dict:
    ws = local_workspace(path)
    s = load_session(ws, ports or local_ports(ws))
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
        # a compacted ledger's summary (its first entry) answers for the sessions it stands for
        "cost_known": any(getattr(e, "cost_usd", None) is not None or getattr(e, "cost_known", False)
                          for e in s.entries),
        # a session cut short (or one that reported no cost) makes the total a lower bound
        "cost_lower_bound": any(getattr(e, "cost_lower_bound", False) for e in s.entries),
        "compacted": summary_line(first) if isinstance(first := s.entries[0] if len(s.entries) else None, Summary)
        else None,
        "last_outcome": state.last.outcome.value if state.last else None,
        "parked": state.parked, "finished": state.finished,
        "waiting_until": action.until.isoformat() if isinstance(action, Wait) else None,
        "next": next_text,
    }


def default_plan_paths(cwd: Path) -> list[Path]:
    """Every plan in the repository around `cwd` (`plans/*.md`, handoffs excluded), from any subdirectory.
    Outside a repository: a PlanRunnerError (exit 2), never an empty table."""
    plans = repo_root(cwd) / "plans"
    return sorted(p for p in plans.glob("*.md") if not p.name.endswith(".handoff.md"))


def plan_statuses(paths: list[Path]) -> list[dict]:
    """One row per plan; a plan that cannot be read is a row with `error`, never hiding the others. Every
    plan's state comes from one read of the remote: one fetch brings all plans' state refs."""
    shared, repo = None, None
    try:
        first = local_workspace(paths[0]) if paths else None
        if first is not None:
            shared, repo = local_ports(first), first.repo
            shared.store.plans()
    except PlanRunnerError:
        shared = None  # each plan reads its own state; its row says what is wrong
    rows = []
    for p in paths:
        try:
            same = shared is not None and local_workspace(p).repo == repo
            rows.append(plan_status(p, shared if same else None))
        except PlanRunnerError as exc:
            shown = os.path.relpath(p.absolute(), Path.cwd())  # as the user would type it again
            problems = getattr(exc, "problems", None)
            first_problem = f": line {problems[0].line}: {problems[0].what}" if problems else ""
            rows.append({"plan": p.stem, "path": shown, "error": exc.what + first_problem,
                         "fix": f"plan-runner validate {shown}" if problems else (exc.fix or f"plan-runner validate {shown}")})
    return rows
