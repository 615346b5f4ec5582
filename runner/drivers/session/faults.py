"""Where crash-consistency tests kill plan-runner (PLAN_RUNNER_FAULT=<point>): the boundaries between the
session's phases (runner.drivers.session.phases) and inside its two actions that talk to the world, each
listed once, in the order a session passes them (docs/reliability.md says what survives a kill at each)."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

FAULT_POINTS = (
    "after-start",        # begin -> run the agent: the start is recorded, nothing else
    "after-agent",        # the agent's work imported onto the judge's work branch, not judged yet
    "after-gates",        # judged (evidence collected), not decided yet
    "before-persist",     # decided: the record, the work branch and the session ref's removal not yet pushed
    "after-persist",      # the one atomic write is done: the next action is not applied yet
    "before-dispatch", "dispatch-recorded", "after-dispatch",  # apply: dispatch the next run
    "before-park", "park-opened", "after-park",                # apply: park the plan
)


def fault_point(env: Mapping[str, str], name: str) -> None:
    """Crash-consistency tests set PLAN_RUNNER_FAULT=<point> to be killed exactly here (SIGKILL:
    no cleanup, no finally, as when a runner is lost), or `<point>:raise` for plan-runner to fail there as a bug
    would (an unexpected exception: the session is recorded Crashed)."""
    assert name in FAULT_POINTS, name
    if env.get("PLAN_RUNNER_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if env.get("PLAN_RUNNER_FAULT") == f"{name}:raise":  # a bug of plan-runner's there: an unexpected exception
        raise RuntimeError(f"fault injected at {name} (PLAN_RUNNER_FAULT)")
