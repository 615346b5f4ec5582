"""Action start-up: time from a job's start to the agent's start, cold and warm.

Runs the real composite action under `act` (the end-to-end harness in
tests/test_act_e2e.py): the first job installs plan-runner's venv into a fresh
tool cache (cold), the next job of the same plan reuses it (warm). "Agent
start" is the `started` ledger entry, written right before the agent process
is spawned; the job's start is when `act` is launched.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path


def _started_at(world, n: int) -> datetime:
    entries = [e for e in world.ledger() if e["type"] == "started" and e["n"] == n]
    return datetime.fromisoformat(entries[0]["started_at"])


def bench_action_startup(workdir: Path) -> dict:
    from tests.e2e_act import world as w
    from tests.servers.github import GitHubServer
    from tests.test_act_e2e import PLAN, ActWorld

    with GitHubServer() as srv:
        root = workdir / "act-startup"
        root.mkdir(parents=True)
        world = ActWorld(root, srv)
        figures = {}
        for label, n in (("cold", 1), ("warm", 2)):
            event = w.dispatch_event(PLAN)
            start = datetime.now(timezone.utc)
            t0 = time.perf_counter()
            world.act("workflow_dispatch", event)
            figures[f"{label}_job_s"] = round(time.perf_counter() - t0, 2)
            figures[f"{label}_to_agent_s"] = round((_started_at(world, n) - start).total_seconds(), 2)
            world.new_dispatches()  # the job dispatched the next one; we start it ourselves above
    return {"measured": True, **figures}
