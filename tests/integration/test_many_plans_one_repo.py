"""Twenty plans at once in ONE repository (one clone, as on a runner that checks out once): their sessions share
the object store, the worktrees' registry and the refs; none is blamed for another's git (issue 46)."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.test_many_plans import PLANS, _world
from tests.reliability_world import cli_env, git, ledger

pytestmark = pytest.mark.integration

AT_ONCE = 10


def _session(clone: Path, plan_id: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "runner", "session", f"plans/{plan_id}.md", "--json"], cwd=clone,
                          env=cli_env(), capture_output=True, text=True, timeout=400)
    assert "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return {"plan": plan_id, "rc": proc.returncode, "stderr": proc.stderr[-1500:], **out}


@pytest.mark.timeout(900)
def test_twenty_plans_at_once_in_one_repository_all_advance(tmp_path):
    """20 plans, two sessions each, ten at a time in the same clone: 40 of 40 sessions advance, none is parked,
    none blamed on the agent for a git failure of plan-runner's own."""
    bare, ids = _world(tmp_path)
    clone = tmp_path / "one"
    git(tmp_path, "clone", "-q", str(bare), str(clone))
    results = []
    with ThreadPoolExecutor(AT_ONCE) as pool:
        for _round in range(2):
            results += list(pool.map(lambda pid: _session(clone, pid), ids))
    bad = [(r["plan"], r["rc"], r.get("outcome"), r.get("reasons"), r["stderr"]) for r in results
           if r["rc"] != 0 or r.get("outcome") != "Advanced"]
    assert not bad, f"{2 * PLANS - len(bad)} of {2 * PLANS} advanced: {bad[:3]}"
    for plan_id in ids:
        outcomes = [e["outcome"] for e in ledger(bare, plan_id) if e["type"] == "session"]
        assert outcomes == ["Advanced", "Advanced"], (plan_id, outcomes)
