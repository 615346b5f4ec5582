"""3. The loop under weather: the same seeded plans, as raw signals, through plan-runner and three baselines."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict

from benchmarks.sim_loops import PlanRun, run_claim_driven, run_naive, run_plan_runner, run_sensible
from benchmarks.sim_world import FaultModel, generate_plans

LOOPS = (("plan-runner", run_plan_runner), ("sensible", run_sensible), ("naive", run_naive),
         ("claim-driven", run_claim_driven))


def summarise(runs: list[PlanRun]) -> dict:
    finished_cps = sum(r.finished_checkpoints for r in runs)
    sessions = sum(r.sessions for r in runs)
    tokens = sum(r.tokens for r in runs)
    finishable = [r for r in runs if r.can_finish]
    reasons = Counter(_reason_class(r.park_reason) for r in runs if r.parks)
    return {
        "plans": len(runs),
        "plans_finished": sum(r.finished for r in runs),
        "plans_finished_truly": sum(r.finished_truly for r in runs),
        "finishable_plans": len(finishable),
        "finishable_finished": sum(r.finished_truly for r in finishable),
        "checkpoints_marked_done": sum(r.marked_done for r in runs),
        "checkpoints_finished": finished_cps,
        "false_done": sum(r.false_done for r in runs),
        "sessions": sessions,
        "tokens": tokens,
        "attempts_burned": sum(r.attempts_burned for r in runs),
        "attempts_burned_by_environment": sum(r.attempts_burned_env for r in runs),
        "sessions_per_finished_checkpoint": round(sessions / finished_cps, 3) if finished_cps else None,
        "tokens_per_finished_checkpoint": round(tokens / finished_cps) if finished_cps else None,
        "parks": sum(r.parks for r in runs),
        "parks_needed": sum(r.parks_needed for r in runs),
        "park_reasons": dict(sorted(reasons.items())),
        "simulated_hours": round(sum(r.hours for r in runs), 1),
    }


def _reason_class(reason: str) -> str:
    """Park reasons without their numbers, so they group."""
    for key in ("needs a human", "advisor asks for a human", "backoffs in a row", "no output at all",
                "max_sessions", "max sessions", "failed attempts", "asked for a human", "BLOCKED"):
        if key in reason:
            return key
    return reason[:60]


def bench_loop(plans: int, seed: int = 20260105, faults: FaultModel | None = None) -> dict:
    faults = faults or FaultModel()
    truths = generate_plans(plans, seed, faults)
    results, timings = {}, {}
    for name, loop in LOOPS:
        started = time.perf_counter()
        results[name] = summarise([loop(t, seed, faults) for t in truths])
        timings[name] = round(time.perf_counter() - started, 2)
    pr, naive, sensible = results["plan-runner"], results["naive"], results["sensible"]
    targets = {
        "zero_false_done": {"value": pr["false_done"], "met": pr["false_done"] == 0},
        "zero_attempts_burned_by_environment": {"value": pr["attempts_burned_by_environment"],
                                                "met": pr["attempts_burned_by_environment"] == 0},
        "every_finishable_plan_finishes": {"value": f"{pr['finishable_finished']} of {pr['finishable_plans']}",
                                           "met": pr["finishable_finished"] == pr["finishable_plans"]},
        "fewer_sessions_per_checkpoint_than_naive": {
            "value": f"{pr['sessions_per_finished_checkpoint']} vs {naive['sessions_per_finished_checkpoint']}",
            "met": (pr["sessions_per_finished_checkpoint"] or 1e9) < (naive["sessions_per_finished_checkpoint"] or 1e9)},
        "finishes_at_least_what_the_sensible_loop_finishes": {
            "value": f"{pr['finishable_finished']} vs {sensible['finishable_finished']}",
            "met": pr["finishable_finished"] >= sensible["finishable_finished"]},
        "fewer_sessions_per_checkpoint_than_sensible": {
            "value": f"{pr['sessions_per_finished_checkpoint']} vs {sensible['sessions_per_finished_checkpoint']}",
            "met": (pr["sessions_per_finished_checkpoint"] or 1e9) < (sensible["sessions_per_finished_checkpoint"] or 1e9)},
    }
    return {"seed": seed, "plans": plans, "fault_model": asdict(faults), "loops": results,
            "loop_seconds": timings, "targets": targets}
