"""How often a session and a tick talk to the remote, counted by a `git` wrapper first on PATH (every git
process plan-runner starts, with real git behind it): a regression in round trips fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.common import child_env
from benchmarks.github_calls import TOKEN, _env
from benchmarks.state_bench import _two_sessions, _verb
from tests.servers.github import GitHubServer
from runner.adapters.store.state import ledger_text

pytestmark = pytest.mark.integration


def test_a_dispatched_session_makes_one_fetch_and_one_push(tmp_path: Path):
    """Session 2 (dispatched by session 1, whose record carries the intent): one fetch (state, work branch, base)
    and one atomic push (verdict, start, work branch), then one push of the run GitHub started for session 3 (its
    id, for a reconcile of that run); session 1, started by hand, also pushes its start before its agent runs, so a
    job killed outright is still found."""
    with GitHubServer(token=TOKEN) as srv:
        env = {**_env(srv), **child_env(PLAN_RUNNER_ISOLATION="none")}
        first, second = _two_sessions(tmp_path, "net", srv, env)
    assert first["outcome"] == second["outcome"] == "Advanced", (first, second)
    verbs = lambda s: [_verb(c) for c in s["network"]]  # noqa: E731
    assert verbs(second) == ["fetch", "push", "push"], "\n".join(second["network"])
    assert "--atomic" in second["network"][1]
    assert verbs(first) == ["fetch", "push", "push", "push"], first["network"]
    assert second["api_calls"] == 1  # the dispatch of session 3


def test_a_tick_over_many_due_plans_fetches_once_and_pushes_once(tmp_path: Path):
    """12 plans, 7 of them due: one glob fetch, one atomic push carrying every dispatched plan's intent, then
    the dispatch calls (each after its intent is on the remote), then one atomic push of the runs GitHub started."""
    from datetime import datetime, timezone

    from benchmarks.github_calls import _plan as gh_plan, _seed_tick_state, _with_origin
    from benchmarks.repos import build_repo, git
    from benchmarks.state_bench import NET_SCRIPT, _net, counting_git
    from runner.adapters.action_io import Reporter
    from runner.drivers.actions.tick import mode_tick
    from runner.adapters.github.events import GitHubContext
    from runner.adapters.github.client import GitHubDriver
    from runner.adapters.github.api import RetryPolicy

    env_base = child_env(PLAN_RUNNER_ISOLATION="none")
    script = tmp_path / "net.yaml"
    script.write_text(NET_SCRIPT)
    repo = tmp_path / "repo"
    build_repo(repo, 3, {f"plans/tick-{i:02d}.md": gh_plan(script) for i in range(12)}, env=env_base)
    _with_origin(repo, env_base)
    due = _seed_tick_state(repo, datetime.now(timezone.utc), 12)
    with GitHubServer(token=TOKEN) as srv:
        env = {**_env(srv), "PLAN_RUNNER_ISOLATION": "none", "GITHUB_EVENT_NAME": "schedule",
               "GITHUB_WORKSPACE": str(repo)}
        ctx = GitHubContext.from_env(env)
        with GitHubDriver(ctx, TOKEN, retry=RetryPolicy.fast()) as driver, open(tmp_path / "tick.log", "w") as log:
            (tmp_path / "t").mkdir()
            with counting_git(tmp_path / "t") as calls:
                result = mode_tick(ctx, env, driver, Reporter(env, out=log))
        assert result.outcome == "dispatched" and len(srv.dispatches) == due == 7, result.summary
    net = [_verb(c) for c in _net(calls)]
    assert net == ["fetch", "push", "push"], net
    origin = repo.parent / f"{repo.name}-origin.git"
    for i in range(12):  # every dispatched plan's intent is on the remote
        kinds = ledger_text(origin, f"refs/plan-runner/state/tick-{i:02d}")
        assert ('"dispatch"' in kinds) == (i % 10 < 5), (i, kinds)


def test_a_lost_lease_in_the_batched_push_leaves_that_plan_out_and_pushes_the_rest(tmp_path: Path):
    """Deferred appends of three plans; another clone advances one of them meanwhile: `flush` reports that plan's
    conflict, resets its local ref to the remote's, and lands the other two (git's --atomic rejected all once)."""
    from runner.adapters.store.state import GitStateStore
    from tests.integration.test_state import make_remote_pair, parked, remote_state

    bare, a, b = make_remote_pair(tmp_path)
    first = GitStateStore(a)
    for plan_id in ("p1", "p2", "p3"):
        first.append(plan_id, [parked(f"{plan_id} first")], first.read(plan_id)[1])
    tick = GitStateStore(a)
    assert tick.plans() == ["p1", "p2", "p3"]
    seen = {p: tick.read(p)[1] for p in ("p1", "p2", "p3")}
    other = GitStateStore(b)
    other.append("p2", [parked("p2 by b")], other.read("p2")[1])  # b advances p2 after the tick read it
    tick.defer_pushes()
    before = tick.network_ops
    news = {p: tick.append(p, [parked(f"{p} second")], seen[p]) for p in ("p1", "p2", "p3")}
    assert tick.network_ops == before  # nothing pushed yet
    lost = tick.flush()
    assert set(lost) == {"p2"}
    assert tick.network_ops == before + 3  # the rejected atomic push, one glob fetch, the push without p2
    assert remote_state(bare, "p1") == news["p1"] and remote_state(bare, "p3") == news["p3"]
    assert [e.reason for e in GitStateStore(b).read("p2")[0]] == ["p2 first", "p2 by b"]  # b's write stands
    assert GitStateStore(a, remote=None).read("p2")[1] == remote_state(bare, "p2")  # a's local p2 took it
