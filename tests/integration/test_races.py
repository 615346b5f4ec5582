"""Racing jobs: two runs for one plan at once; exactly one advances it, the other yields cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e_act import world as w
from tests.reliability_world import (
    MUL_STEP,
    cli_env,
    fold_ledger,
    git,
    ledger,
    make_repo,
    script,
)
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

SLOW_WORK = script([MUL_STEP, {"commit": "Add mul"}, {"sleep": 1.0}, {"check": "1.1"}, {"commit": "Tick 1.1"}],
                   [{"say": "second session"}], [{"say": "third session"}])


def _start(repo: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], cwd=repo,
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    return proc.returncode, (json.loads(out) if out.strip() else {}), err


def _assert_one_session(where: Path) -> None:
    entries = ledger(where)
    assert Counter(e["type"] for e in entries if e["type"] in ("started", "session")) == {"started": 1, "session": 1}, entries
    assert fold_ledger(where).sessions == 1


@pytest.mark.parametrize("layout", ["one clone", "two clones"])
def test_two_sessions_started_at_once_advance_the_plan_once(tmp_path, layout):
    """Two `session` runs of one plan at the same moment (in one clone, or in two clones of one remote, as two
    jobs would): one runs the session, the other says it was superseded or busy and exits 0 without a trace."""
    repo = make_repo(tmp_path, SLOW_WORK)
    other = repo
    if layout == "two clones":
        other = tmp_path / "other"
        git(tmp_path, "clone", "-q", str(tmp_path / "origin.git"), str(other))
    procs = [_start(repo), _start(other)]
    results = [_finish(p) for p in procs]
    statuses = sorted(str(r[1].get("status")) for r in results)
    assert all(r[0] == 0 for r in results), results
    winners = [r for r in results if r[1].get("status") == "ran"]
    losers = [r for r in results if r[1].get("status") in ("superseded", "busy")]
    assert len(winners) == 1 and len(losers) == 1, statuses
    assert winners[0][1]["outcome"] == "Advanced"
    assert losers[0][1]["outcome"] is None and losers[0][1]["message"]
    _assert_one_session(tmp_path / "origin.git")
    assert git(repo, "status", "--porcelain") == ""  # the loser left nothing in the work tree


def test_a_session_started_while_another_runs_is_busy_and_touches_nothing(tmp_path):
    """A second run while the first one's agent works is `busy` (its job is alive) and changes nothing."""
    repo = make_repo(tmp_path, script([MUL_STEP, {"sleep": 2.0}, {"commit": "Add mul"}]))
    first = _start(repo)
    try:
        for _ in range(200):  # wait until the first one has recorded its start
            if ledger(repo):
                break
            __import__("time").sleep(0.05)
        code, out, _ = _finish(_start(repo))
        assert code == 0 and out["status"] == "busy" and "still running" in out["message"]
    finally:
        code, out, err = _finish(first)
    assert code == 0 and out["status"] == "ran", err
    _assert_one_session(repo)


# --- GitHub: reply racing tick, reply racing reply -----------------------------------------------------------


def _park(tmp_path: Path, srv: GitHubServer) -> tuple[Path, dict]:
    script_text = ("sessions:\n  - - handoff: 'HUMAN: English or French?'\n"
                   "  - - write: {path: a.txt, content: x}\n    - commit: a\n")
    bare = w.make_remote(tmp_path, {"plans/greeter.md": w.PLAN, "plans/greeter.script.yaml": script_text})
    srv.branches = w.BareBranches(bare)
    srv.set_permission("maintainer", "write")
    srv.set_permission("other-maintainer", "admin")
    proc = _action(tmp_path, srv, bare, "job0", "workflow_dispatch", w.dispatch_event("plans/greeter.md"))
    proc.communicate(timeout=120)
    (issue,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
    return bare, issue


def _action(tmp_path: Path, srv: GitHubServer, bare: Path, name: str, event_name: str, event: dict,
            run_id: int = 1) -> subprocess.Popen:
    ws = w.checkout(bare, tmp_path / name)
    mode = {"schedule": "tick", "issue_comment": "reply"}.get(event_name, "session")
    env = {**w.job_env(srv, ws, tmp_path / f"runner-{name}", event_name, event, run_id), "PLAN_RUNNER_MODE": mode,
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen([sys.executable, "-m", "runner", "action"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _outcome(proc: subprocess.Popen) -> tuple[int, str]:
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, out + err
    lines = [line for line in out.splitlines() if line.startswith("plan-runner: ")]
    return proc.returncode, lines[-1] if lines else out[-500:]


def test_two_maintainers_replying_at_once_dispatch_one_run(tmp_path):
    """Two accepted replies on one park issue at the same moment: one is recorded and dispatches; the other
    yields (superseded or not parked any more). One dispatch in all."""
    with GitHubServer() as srv:
        bare, issue = _park(tmp_path, srv)
        c1 = srv.add_comment(issue["number"], "/plan-runner resume English", user="maintainer")
        c2 = srv.add_comment(issue["number"], "/plan-runner retry French", user="other-maintainer")
        procs = [_action(tmp_path, srv, bare, "reply1", "issue_comment",
                         w.comment_event(issue, "/plan-runner resume English", "maintainer", c1), 2),
                 _action(tmp_path, srv, bare, "reply2", "issue_comment",
                         w.comment_event(issue, "/plan-runner retry French", "other-maintainer", c2), 3)]
        results = [_outcome(p) for p in procs]
        assert len(srv.dispatches) == 1, results
        entries = w.ledger(bare, "greeter")
        assert len([e for e in entries if e["type"] == "reply"]) == 1, entries
        assert len([e for e in entries if e["type"] == "dispatch" and not e.get("confirmed")]) == 1
        assert sum("accepted" in line for _, line in results) == 1, results


def test_a_tick_racing_a_reply_dispatches_one_run(tmp_path):
    """A schedule tick and a maintainer's reply at the same moment: one run is dispatched, never two."""
    with GitHubServer() as srv:
        bare, issue = _park(tmp_path, srv)
        cid = srv.add_comment(issue["number"], "/plan-runner resume", user="maintainer")
        procs = [_action(tmp_path, srv, bare, "reply", "issue_comment",
                         w.comment_event(issue, "/plan-runner resume", "maintainer", cid), 2),
                 _action(tmp_path, srv, bare, "tick", "schedule", w.schedule_event(), 3)]
        results = [_outcome(p) for p in procs]
        assert len(srv.dispatches) == 1, results
        entries = w.ledger(bare, "greeter")
        assert Counter(e["for_session"] for e in entries if e["type"] == "dispatch" and not e.get("confirmed")) \
            == {2: 1}, entries
        # and a tick afterwards sees the dispatch and adds nothing
        code, line = _outcome(_action(tmp_path, srv, bare, "tick2", "schedule", w.schedule_event(), 4))
        assert code == 0 and len(srv.dispatches) == 1, line
