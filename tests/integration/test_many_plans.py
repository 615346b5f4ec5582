"""Many plans in one repository: sessions of different plans overlap in separate clones of one remote,
with ticks reading every plan alongside; each plan's state is its own, so nothing is lost or misjudged."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import pytest

from runner.drivers.actions.tick import tick_plan
from runner.core.errors import StateConflict
from runner.drivers.cli.local import LocalDispatcher, LocalParker
from runner.drivers.session import Ports, Workspace
from runner.adapters.store.state import GitStateStore
from tests.reliability_world import PLAN, cli_env, git, ledger, script, write_calc_project

pytestmark = pytest.mark.integration

PLANS = 20
JOBS_AT_ONCE = 8


def _plan_script(i: int) -> str:
    """Session 1 works on 1.1 (slowly, so other plans' jobs run meanwhile), session 2 on 1.2."""
    mod = f"calc/m{i:02d}.py"
    return script(
        [{"write": {"path": mod, "content": f"def f{i}(a):\n    return a + {i}\n"}}, {"sleep": 1.0},
         {"commit": f"Add m{i:02d}"}, {"check": "1.1"}, {"commit": "Tick 1.1"}],
        [{"write": {"path": f"calc/d{i:02d}.py", "content": f"X = {i}\n"}}, {"sleep": 0.5},
         {"commit": f"Add d{i:02d}"}, {"check": "1.2"}, {"commit": "Tick 1.2"}],
    )


def _world(tmp: Path) -> tuple[Path, list[str]]:
    """A bare remote whose main holds PLANS plans, each driven by its own scripted agent."""
    seed = tmp / "seed"
    write_calc_project(seed)
    ids = [f"p{i:02d}" for i in range(PLANS)]
    for i, plan_id in enumerate(ids):
        script_path = tmp / f"{plan_id}.script.yaml"
        script_path.write_text(_plan_script(i))
        (seed / "plans" / f"{plan_id}.md").write_text(PLAN.format(
            script=script_path, gate=f"{sys.executable} -m unittest discover -s tests -q", agent_extra="",
            front_extra=""))
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "init")
    bare = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    git(seed, "remote", "add", "origin", str(bare))
    git(seed, "push", "-q", "origin", "main")
    return bare, ids


def _clone(bare: Path, clone: Path, tries: int = 3) -> None:
    """The job's checkout. A clone taken while other jobs push to the same bare repository can fail on a ref that
    moved under it (seen once in CI: exit 128); a runner's checkout retries, and so does this one, saying why at the
    end if every try failed."""
    for attempt in range(tries):
        proc = subprocess.run(["git", "clone", "-q", str(bare), str(clone)], cwd=bare.parent, capture_output=True,
                              text=True)
        if proc.returncode == 0:
            return
        subprocess.run(["rm", "-rf", str(clone)], check=False)
        time.sleep(0.2 * (attempt + 1))
    raise AssertionError(f"git clone of {bare} failed {tries} times: {proc.stderr.strip()}")


def _job(bare: Path, clone: Path, plan_id: str) -> dict:
    """One session job of `plan_id` in its own clone (cloned on first use, as a runner would)."""
    if not clone.exists():
        _clone(bare, clone)
    proc = subprocess.run([sys.executable, "-m", "runner", "session", f"plans/{plan_id}.md", "--json"], cwd=clone,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, (plan_id, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return {"plan": plan_id, **json.loads(proc.stdout)}


def _ticker(bare: Path, clone: Path, ids: list[str], stop: threading.Event, seen: list) -> None:
    """Ticks over every plan until `stop`: one glob fetch for all plans, then each plan's tick decision."""
    _clone(bare, clone)
    while not stop.is_set():
        store = GitStateStore(clone, remote="origin")
        with_state = set(store.plans())
        for plan_id in ids:
            if plan_id not in with_state:
                continue
            ws = Workspace(repo=clone, plan_path=f"plans/{plan_id}.md", remote="origin", job="tick")
            ports = Ports(store=store, dispatcher=LocalDispatcher(), parker=LocalParker(clone / ".git" / "r"))
            try:
                seen.append((plan_id, tick_plan(ws, ports)))
            except StateConflict:  # the tick lost a race with the plan's own session: it yields, as mode_tick does
                seen.append((plan_id, ("yielded", False)))
        store.close()
        time.sleep(0.2)


def _intervals(entries: list[dict]) -> list[tuple[datetime, datetime]]:
    return [(datetime.fromisoformat(e["started_at"]), datetime.fromisoformat(e["finished_at"]))
            for e in entries if e["type"] == "session"]


def test_twenty_plans_with_overlapping_sessions_and_ticks_all_advance_and_lose_nothing(tmp_path):
    """20 plans, two sessions each, run as overlapping jobs in separate clones with ticks alongside: every
    plan advances twice, every ledger holds exactly its own entries, and no session is judged tampering."""
    bare, ids = _world(tmp_path)
    stop, ticks = threading.Event(), []
    ticker = threading.Thread(target=_ticker, args=(bare, tmp_path / "tick", ids, stop, ticks))
    ticker.start()
    results = []
    try:
        with ThreadPoolExecutor(JOBS_AT_ONCE) as pool:
            for _round in range(2):
                results += list(pool.map(lambda pid: _job(bare, tmp_path / f"job-{pid}", pid), ids))
    finally:
        stop.set()
        ticker.join(timeout=120)
    assert not ticker.is_alive()
    assert ticks, "the ticker never saw a plan with state"

    assert [r["status"] for r in results] == ["ran"] * (2 * PLANS), [(r["plan"], r["status"], r.get("message"))
                                                                    for r in results if r["status"] != "ran"]
    assert all(r["outcome"] == "Advanced" for r in results), [(r["plan"], r["outcome"], r.get("reasons"))
                                                              for r in results if r["outcome"] != "Advanced"]
    spans = []
    for plan_id in ids:
        entries = ledger(bare, plan_id)
        assert [e["type"] for e in entries] == ["started", "session", "dispatch"] * 2, (plan_id, entries)
        assert [e["outcome"] for e in entries if e["type"] == "session"] == ["Advanced", "Advanced"]
        assert not any("moved" in r or "restored" in r for e in entries for r in e.get("reasons", ()))
        spans += [(plan_id, *span) for span in _intervals(entries)]
    overlapping = {(a[0], b[0]) for a in spans for b in spans if a[0] < b[0] and a[1] < b[2] and b[1] < a[2]}
    assert len(overlapping) >= PLANS, f"sessions of different plans hardly overlapped: {len(overlapping)} pairs"
    refs = git(bare, "for-each-ref", "--format=%(refname)", "refs/plan-runner/state/").split()
    assert refs == [f"refs/plan-runner/state/{p}" for p in ids]
    assert git(bare, "for-each-ref", "refs/heads/plan-runner/state") == ""
