"""4. GitHub API calls per operation, counted by the local GitHub test server (`srv.calls`).

* a dispatching session: a real `run_session` (script agent, one commit, a trivial
  gate) with the GitHub driver as dispatcher and parker; every call it makes is counted;
* a parking session: the same, with an agent that asks for a human (first park, then a
  second park of the same plan, which reuses the issue);
* the reply path: `mode_reply` on an `issue_comment` event (permission, react, comment,
  close, dispatch), when runner/drivers/actions/reply.py exists; else the driver operations;
* a tick over 20 plans (10 in --quick) with state (some due, some waiting, parked or finished) through
  `mode_tick`, then a second tick (everything already dispatched).
"""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.common import child_env
from benchmarks.repos import build_repo, git
from runner.core.actions import Finish, Park, RunSession, SessionKind, Wait
from runner.adapters.github.events import GitHubContext
from runner.adapters.github.client import GitHubDriver
from runner.adapters.github.api import RetryPolicy
from runner.core.ledger import Finished, Parked, SessionRecord
from runner.core.outcome import Blame, Outcome
from runner.drivers.session import Ports, Workspace
from runner.adapters.store.state import GitStateStore
from runner.drivers.session.phases import run_session
from tests.servers.github import GitHubServer

TOKEN = "ghs_benchmarkTokenValue0123456789"
WORKFLOW_REF = "octo-org/demo/.github/workflows/plan-runner.yml@refs/heads/main"
TARGET_DISPATCH_CALLS = 3

SCRIPTS = {
    "work": """sessions:\n  - - write: {path: app/f.py, content: "x = 1\\n"}\n    - commit: "Add f"\n""",
    "human": """sessions:\n  - - handoff: "HUMAN: which database should this use?"\n    - say: "I need a decision"\n"""
              """  - - handoff: "HUMAN: still need the database decision"\n""",
}


def _plan(script: Path) -> str:
    return f"""---
agent: {{backend: script, script: {script}, stall_minutes: 10s}}
gates:
  - name: trivial
    run: "true"
---
# Plan

## Stage 1: Work <!-- sessions: 1 -->
- [ ] 1.1 Do it
"""


def _env(srv: GitHubServer, **extra: str) -> dict[str, str]:
    return child_env(GITHUB_API_URL=srv.url, GITHUB_REPOSITORY=f"{srv.owner}/{srv.repo}", GITHUB_WORKFLOW_REF=WORKFLOW_REF,
                     GITHUB_REF_NAME="main", GITHUB_TOKEN=TOKEN, GITHUB_RUN_ID="1", **extra)


def _counted(srv: GitHubServer, fn) -> tuple[int, list[str], object]:
    before = len(srv.calls)
    value = fn()
    calls = srv.calls[before:]
    return len(calls), [f"{c.method} {c.path.split('/repos/octo-org/demo')[-1]}" for c in calls], value


def _session_calls(srv: GitHubServer, repo: Path, plan_path: str, env: dict[str, str]) -> tuple[int, list[str], str]:
    ctx = GitHubContext.from_env(env)
    with GitHubDriver(ctx, TOKEN, retry=RetryPolicy.fast()) as driver:
        ws = Workspace(repo=repo, plan_path=plan_path, env=env, remote="origin")
        ports = Ports(store=GitStateStore(repo, remote="origin"), dispatcher=driver, parker=driver)
        n, calls, result = _counted(srv, lambda: run_session(ws, ports))
    return n, calls, result.status


def _reply_calls(srv: GitHubServer, repo: Path, workdir: Path, env: dict[str, str], issue: int) -> dict:
    if importlib.util.find_spec("runner.drivers.actions.reply") is None:
        return {"measured": False, "why": "runner/drivers/actions/reply.py does not exist yet"}
    from runner.adapters.action_io import Reporter
    from runner.drivers.actions.reply import mode_reply

    srv.set_permission("maintainer", "write")
    body = "/plan-runner retry use SQLite"
    comment_id = srv.add_comment(issue, body, user="maintainer")
    payload = {"action": "created", "issue": {"number": issue, "labels": [{"name": "plan-runner"}]},
               "comment": {"id": comment_id, "body": body, "user": {"login": "maintainer", "type": "User"}},
               "repository": {"full_name": f"{srv.owner}/{srv.repo}"}, "sender": {"login": "maintainer", "type": "User"}}
    event = workdir / "event.json"
    event.write_text(json.dumps(payload), encoding="utf-8")
    renv = {**env, "GITHUB_EVENT_NAME": "issue_comment", "GITHUB_EVENT_PATH": str(event), "GITHUB_WORKSPACE": str(repo)}
    ctx = GitHubContext.from_env(renv)
    with GitHubDriver(ctx, TOKEN, retry=RetryPolicy.fast()) as driver, open(workdir / "reply.log", "w") as log:
        n, calls, result = _counted(srv, lambda: mode_reply(ctx, renv, driver, Reporter(renv, out=log)))
    return {"measured": True, "calls": n, "requests": calls, "outcome": result.outcome}


def _seed_tick_state(repo: Path, now: datetime, plans: int) -> int:
    """Plans with state, per ten: 3 due, 2 whose wait is over, 2 still waiting, 2 parked, 1 finished."""
    store = GitStateStore(repo, remote="origin")
    due = 0
    for i in range(plans):
        plan_id = f"tick-{i:02d}"
        run = RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="progress")
        kind = i % 10
        if kind < 3:
            action, extra = run, []
        elif kind < 5:
            action, extra = Wait(until=now - timedelta(minutes=5), then=run, reason="rate limit"), []
        elif kind < 7:
            action, extra = Wait(until=now + timedelta(hours=2), then=run, reason="rate limit"), []
        elif kind < 9:
            action = Park(reason="the session needs a human")
            extra = [Parked(at=now, reason="needs a human", issue_url=f"https://github.com/octo-org/demo/issues/{i}")]
        else:
            action, extra = Finish(reason="every checkpoint is done"), [Finished(at=now, reason="done")]
        due += kind < 5
        record = SessionRecord(n=1, kind=SessionKind.DELIVERY, checkpoint="1.1", stage=1, started_at=now - timedelta(hours=1),
                               finished_at=now - timedelta(minutes=30), outcome=Outcome.PROGRESS, blame=Blame.NONE,
                               rule=10, next_action=action)
        _, version = store.read(plan_id)
        store.append(plan_id, [record, *extra], version)
    return due


def _with_origin(repo: Path, env: dict[str, str]) -> None:
    """A bare repository as `origin`, as in an Actions checkout: state and work branches are pushed there."""
    origin = repo.parent / f"{repo.name}-origin.git"
    git(repo.parent, "init", "-q", "--bare", "-b", "main", str(origin), env=env)
    git(repo, "remote", "add", "origin", str(origin), env=env)
    git(repo, "push", "-q", "origin", "main", env=env)
    git(repo, "fetch", "-q", "origin", env=env)


def _tick_calls(srv: GitHubServer, workdir: Path, script: Path, env: dict[str, str], plans: int) -> dict:
    if importlib.util.find_spec("runner.drivers.actions.tick") is None:
        return {"measured": False, "why": "runner/drivers/actions/tick.py does not exist yet"}
    from runner.adapters.action_io import Reporter
    from runner.drivers.actions.tick import mode_tick

    repo = workdir / "repo-tick"
    build_repo(repo, 10, {f"plans/tick-{i:02d}.md": _plan(script) for i in range(plans)}, env=env)
    _with_origin(repo, env)
    due = _seed_tick_state(repo, datetime.now(timezone.utc), plans)
    tenv = {**env, "GITHUB_EVENT_NAME": "schedule", "GITHUB_WORKSPACE": str(repo)}
    ctx = GitHubContext.from_env(tenv)
    rows = []
    with GitHubDriver(ctx, TOKEN, retry=RetryPolicy.fast()) as driver, open(workdir / "tick.log", "w") as log:
        for label in ("first tick", "second tick"):
            dispatches = len(srv.dispatches)
            n, calls, result = _counted(srv, lambda: mode_tick(ctx, tenv, driver, Reporter(tenv, out=log)))
            rows.append({"tick": label, "calls": n, "dispatches": len(srv.dispatches) - dispatches,
                         "outcome": result.outcome})
    return {"measured": True, "plans": plans, "due": due, "ticks": rows,
            "met": rows[0]["calls"] == due and rows[1]["calls"] == 0}


def bench_github_calls(workdir: Path, tick_plans: int = 20) -> dict:
    env_base = child_env()
    scripts = {}
    for name, text in SCRIPTS.items():
        scripts[name] = workdir / f"gh-{name}.yaml"
        scripts[name].write_text(text, encoding="utf-8")
    repo = workdir / "repo-github"
    build_repo(repo, 10, {"plans/work.md": _plan(scripts["work"]), "plans/human.md": _plan(scripts["human"])}, env=env_base)
    _with_origin(repo, env_base)
    with GitHubServer(token=TOKEN) as srv:
        env = _env(srv)
        dispatch_n, dispatch_calls, dispatch_status = _session_calls(srv, repo, "plans/work.md", env)
        git(repo, "checkout", "-q", "main", env=env)
        park1_n, park1_calls, _ = _session_calls(srv, repo, "plans/human.md", env)
        issue = next(iter(srv.issues))
        reply = _reply_calls(srv, repo, workdir, env, issue)
        git(repo, "checkout", "-q", "main", env=env)
        park2_n, park2_calls, _ = _session_calls(srv, repo, "plans/human.md", env)
        tick = _tick_calls(srv, workdir, scripts["work"], env, tick_plans)
    return {
        "dispatching_session": {"calls": dispatch_n, "requests": dispatch_calls, "status": dispatch_status},
        "parking_session_first": {"calls": park1_n, "requests": park1_calls},
        "parking_session_again": {"calls": park2_n, "requests": park2_calls},
        "reply": reply,
        "tick": tick,
        "targets": {
            "dispatching_session_calls": {"target": f"<= {TARGET_DISPATCH_CALLS}", "value": dispatch_n,
                                          "met": dispatch_n <= TARGET_DISPATCH_CALLS},
            "tick_calls_equal_due_plans": {"value": (f"{tick['ticks'][0]['calls']} calls for {tick['due']} due, "
                                                     f"then {tick['ticks'][1]['calls']}") if tick.get("measured") else "not measured",
                                           "met": tick.get("met")},
        },
    }
