"""Crash consistency: plan-runner SIGKILLed at every named point of a session loses no work,
leaves a ledger that parses and folds, classifies the interrupted session, and never double-acts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from runner.adapters.sandbox.agent_clone import area_for
from runner.drivers.session import FAULT_POINTS
from tests.conftest import agent_visible, agent_writable
from tests.reliability_world import (
    GH_SCRIPT,
    MUL_STEP,
    PARK_SCRIPT,
    GitHubJobs,
    cli_env,
    fold_ledger,
    git,
    ledger,
    make_repo,
    result_json,
    run_session,
    script,
)
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

PARK_POINTS = ("before-park", "park-opened", "after-park")
RUN_POINTS = tuple(p for p in FAULT_POINTS if p not in PARK_POINTS)


def _work_script(shas: Path, park: bool) -> str:
    """Session 1 does real work (and asks a human when `park`); later sessions do more work. Every agent
    commit's sha is appended to `shas`, outside the repository, so the test knows what must survive."""
    record = {"run": f"git rev-parse HEAD >> {shas}"}
    first = [MUL_STEP, {"commit": "Add mul"}, record, {"check": "1.1"}, {"commit": "Tick 1.1"}, record,
             {"write": {"path": "notes.txt", "content": "left uncommitted\n"}}]
    if park:
        first.append({"handoff": "HUMAN: should division by zero raise or return None?"})
    later = [{"write": {"path": "calc/div.py", "content": "def div(a, b):\n    return a / b\n"}},
             {"commit": "Add div"}, record, {"check": "1.2"}, {"commit": "Tick 1.2"}, record]
    return script(first, later, later, later)


def _agent_commits(shas: Path) -> list[str]:
    return sorted(set(shas.read_text().split())) if shas.exists() else []


def _reachable(repo: Path, sha: str, refs: list[str]) -> bool:
    for ref in refs:
        if subprocess.run(["git", "merge-base", "--is-ancestor", sha, ref], cwd=repo).returncode == 0:
            return True
    return False


def _check_ledger(where: Path) -> list[dict]:
    """The ledger parses and folds; every started session has exactly one record; one dispatch per session."""
    state = fold_ledger(where)
    entries = ledger(where)
    started = Counter(e["n"] for e in entries if e["type"] == "started")
    records = Counter(e["n"] for e in entries if e["type"] == "session")
    assert all(c == 1 for c in started.values()), f"a session number was started twice: {started}"
    assert all(c == 1 for c in records.values()), f"a session was recorded twice: {records}"
    assert set(records) == set(started), f"interrupted session left unclassified: {started} vs {records}"
    assert state.open_session is None
    dispatches = Counter(e["for_session"] for e in entries if e["type"] == "dispatch")
    assert all(c == 1 for c in dispatches.values()), f"a run was dispatched twice: {dispatches}"
    return entries


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_sigkill_at_each_point_loses_nothing_and_the_next_session_carries_on(tmp_path, point):
    """Killed at `point`, the next session reconciles or continues: commits survive, the ledger folds, one of
    everything (record per session, dispatch per session, park report per plan)."""
    shas = agent_writable(tmp_path / "repo", "agent-commits")
    park = point in PARK_POINTS
    repo = make_repo(tmp_path, _work_script(shas, park))
    bare = tmp_path / "origin.git"

    killed = run_session(repo, fault=point)
    assert killed.returncode == -signal.SIGKILL, f"fault point {point} was never reached: {killed.stderr}"
    assert fold_ledger(repo) is not None  # whatever the moment, what is on the state branch parses

    nxt = run_session(repo)
    out = result_json(nxt)
    assert nxt.returncode in (0, 3), nxt.stderr
    if point in ("after-start", "after-agent", "after-gates", "before-persist"):
        first = [e for e in ledger(repo) if e["type"] == "session" and e["n"] == 1][0]
        assert first["reconciled"] is True and first["outcome"] == "TimedOut", first
    else:
        first = [e for e in ledger(repo) if e["type"] == "session" and e["n"] == 1][0]
        assert not first.get("reconciled"), first  # the verdict was recorded before the kill: kept as it was

    for where in (repo, bare):
        entries = _check_ledger(where)
    assert git(repo, "rev-parse", "refs/plan-runner/state/calc") == git(bare, "rev-parse", "refs/plan-runner/state/calc")

    commits = _agent_commits(shas)
    if point != "after-start":
        assert commits, "the agent ran and committed before this point"
    lost = [c for c in commits if not _reachable(bare, c, ["refs/heads/plan-runner/calc"])]
    assert not lost, f"agent commits not on the pushed work branch after a kill at {point}: {lost}"
    if point not in ("after-start",):
        # the file the agent left uncommitted was saved as a marked WIP commit, never lost
        assert git(bare, "show", "plan-runner/calc:notes.txt") == "left uncommitted"
        assert "Plan-Runner-WIP: true" in git(bare, "log", "--format=%B", "plan-runner/calc")

    reports = sorted(p.name for p in (repo / ".git" / "plan-runner" / "reports").glob("*")) \
        if (repo / ".git" / "plan-runner" / "reports").exists() else []
    parked = [e for e in entries if e["type"] == "park"]
    if park:
        assert out["status"] == "parked" and reports == ["calc-park.md"] and len(parked) == 1, (out, reports, parked)
        again = result_json(run_session(repo))  # run once more: still one park, nothing new
        assert again["status"] == "parked" and len([e for e in ledger(repo) if e["type"] == "park"]) == 1
    else:
        assert parked == [] and reports == []


def test_sigkill_of_the_whole_job_while_the_agent_works_keeps_its_commits_and_leftovers(tmp_path):
    """The job and its agent killed mid-session: the commit and the uncommitted file both survive as work/WIP,
    and the session is reconciled TimedOut."""
    shas = agent_writable(tmp_path / "repo", "agent-commits")
    working = agent_writable(tmp_path / "repo", "agent-working")  # the agent says here that it is in its wait
    stop = agent_visible(tmp_path / "repo", "stop")  # the replayed session (its cursor died with the job) must not wait again
    repo = make_repo(tmp_path, script(
        [MUL_STEP, {"commit": "Add mul"}, {"run": f"git rev-parse HEAD >> {shas}"},
         {"write": {"path": "calc/half.py", "content": "x = 1\n"}},
         {"run": f"echo waiting >> {working}; while [ ! -e {stop} ]; do sleep 0.1; done"}],
        [{"say": "resumed"}]))
    proc = subprocess.Popen([sys.executable, "-m", "runner", "session", "plans/calc.md"], cwd=repo,
                            env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    # The agent works in its own clone: its files reach this one only after it ends. Its own word (a file
    # outside the repository) says it is waiting; the kill must come then, well before its 5 s stall limit.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not working.read_text():
        assert proc.poll() is None, "plan-runner ended before its agent reached its wait"
        time.sleep(0.05)
    assert working.read_text(), "the agent never reached its wait"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    stop.touch()
    out = result_json(run_session(repo))
    assert out["outcome"] is not None
    entries = _check_ledger(tmp_path / "origin.git")
    assert entries[1]["type"] == "session" and entries[1]["reconciled"] and entries[1]["outcome"] == "TimedOut"
    bare = tmp_path / "origin.git"
    assert all(_reachable(bare, c, ["refs/heads/plan-runner/calc"]) for c in _agent_commits(shas))
    assert git(bare, "show", "plan-runner/calc:calc/half.py") == "x = 1"



def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.parametrize("isolation", ["none", "auto"])
def test_an_agent_left_running_by_a_killed_plan_runner_is_stopped_before_its_work_is_saved(tmp_path, isolation):
    """Only plan-runner is SIGKILLed. Unconfined (`isolation: none`) its agent, a process group of its own, keeps
    writing: the next session stops exactly that group before it saves the leftovers and says so in the record. In
    the room (kernel namespaces, `--die-with-parent`) the agent dies with its plan-runner by construction. Either
    way the next session records the killed one and loses no work."""
    shas, stop = agent_writable(tmp_path / "repo", "agent-commits"), agent_visible(tmp_path / "repo", "stop")
    late = "calc/late.txt"
    repo = make_repo(tmp_path, script(
        [MUL_STEP, {"commit": "Add mul"}, {"run": f"git rev-parse HEAD >> {shas}"},
         {"write": {"path": "calc/half.py", "content": "x = 1\n"}},
         {"run": f"while [ ! -e {stop} ]; do echo . >> {late}; sleep 0.05; done"}],
        [{"say": "resumed"}]), front_extra=f"isolation: {isolation}\n")
    pid_file = repo / ".git" / "plan-runner" / "calc" / "agent.pid"
    # the agent's writes: in a room, in its upper layer (its tree at work/ is an overlay only its room shows); unconfined,
    # in work/ itself (runner.adapters.sandbox.agent_clone)
    area = area_for(repo, "calc")
    written = (area.work if isolation == "none" else area.upper) / late
    proc = subprocess.Popen([sys.executable, "-m", "runner", "session", "plans/calc.md"], cwd=repo,
                            env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not written.exists() and proc.poll() is None:
            time.sleep(0.05)
        assert written.exists(), f"the agent never wrote (plan-runner exit {proc.poll()})"
        agent_group = json.loads(pid_file.read_text())["pgid"]
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stop.touch()
        raise
    os.kill(proc.pid, signal.SIGKILL)  # plan-runner only
    proc.wait()
    if isolation == "none":
        time.sleep(0.3)
        assert _group_alive(agent_group), "unconfined, the agent outlives its plan-runner"
    else:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _group_alive(agent_group):
            time.sleep(0.1)
        assert not _group_alive(agent_group), "in the room, the agent did not die with its plan-runner"
    try:
        out = result_json(run_session(repo))
        assert not _group_alive(agent_group), "the leftover agent was not stopped"
        size = written.stat().st_size if written.exists() else 0
        time.sleep(0.3)
        assert (written.stat().st_size if written.exists() else 0) == size, "something still writes"
    finally:
        stop.touch()
    assert out["outcome"] is not None and not pid_file.exists()
    entries = _check_ledger(tmp_path / "origin.git")
    reconciled = entries[1]
    assert reconciled["reconciled"] and reconciled["outcome"] == "TimedOut"
    if isolation == "none":
        assert f"process group {agent_group}" in " ".join(reconciled["reasons"])
    bare = tmp_path / "origin.git"
    assert all(_reachable(bare, c, ["refs/heads/plan-runner/calc"]) for c in _agent_commits(shas))
    assert git(bare, "show", "plan-runner/calc:calc/half.py") == "x = 1"


def test_a_stale_agent_record_never_stops_an_unrelated_process(tmp_path):
    """A pid file naming a live process that plan-runner did not start (its start time differs) is dropped."""
    from runner.adapters.sandbox.supervise import reap_leftover

    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        pid_file = tmp_path / "agent.pid"
        pid_file.write_text(json.dumps({"pgid": other.pid, "start": "1", "by": 1}))
        assert reap_leftover(pid_file) is None
        assert other.poll() is None and not pid_file.exists()
        pid_file.write_text("not json")
        assert reap_leftover(pid_file) is None and not pid_file.exists()
    finally:
        other.kill()
        other.wait()

# --- the same on GitHub: a job killed, the next job on a fresh checkout -------------------------------------


@pytest.mark.parametrize("point", ["after-agent", "after-gates", "before-persist", "after-persist",
                                   "before-dispatch", "dispatch-recorded", "after-dispatch"])
def test_github_job_killed_at_each_point_is_reconciled_and_dispatched_at_most_once(tmp_path, point):
    """A session job killed at `point`: the tick reconciles or redoes the dispatch, exactly one run per session
    is dispatched (counted at the server), and the next job continues on what was pushed."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        jobs.killed_session(point)
        before = len(srv.dispatches)
        assert before == (1 if point == "after-dispatch" else 0)
        seen = jobs.tick()  # right away: a session that may still run is never touched, nothing is dispatched twice
        # The record carries the intent to dispatch (one write): killed before the call, the intent ages first.
        assert len(srv.dispatches) == before, seen
        if not srv.dispatches:  # an orphan, or an intent whose call never happened: the tick acts once they age
            later = jobs.tick(timedelta(hours=3))
            assert len(srv.dispatches) == 1, (seen, later, jobs.ledger())
        assert len(srv.dispatches) == 1
        records = [e for e in jobs.ledger() if e["type"] == "session"]
        assert len(records) == 1 and records[0]["n"] == 1
        if point in ("after-agent", "after-gates", "before-persist"):
            assert records[0]["reconciled"] and records[0]["outcome"] == "TimedOut"
        outputs = jobs.session()  # the dispatched run
        assert outputs["outcome"] not in ("error", "superseded"), outputs
        jobs.tick()  # session 3 is already dispatched: the tick adds nothing
        entries = jobs.ledger()
        started = Counter(e["n"] for e in entries if e["type"] == "started")
        assert set(started) == {1, 2} and all(c == 1 for c in started.values())
        intents = {e["for_session"] for e in entries if e["type"] == "dispatch"}
        assert len(srv.dispatches) == 2 and intents == {2, 3}, (entries, srv.dispatches)  # one call per session
        assert fold_ledger(jobs.bare, "greeter").open_session is None


@pytest.mark.parametrize("point", ["after-start", "after-agent", "before-persist"])
def test_a_dispatched_job_killed_outright_is_found_by_its_intent_and_classified_once(tmp_path, point):
    """Session 2, dispatched by session 1 (whose record carries the intent), is killed outright before its one
    push: the remote shows only the intent. A tick while it may still run does nothing; once the intent is older
    than any session can run, the tick dispatches session 2 again (as for a lost call: nothing burned); when that
    run goes silent too, the tick records session 2 TimedOut (reconciled) and dispatches session 3, once."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        assert jobs.session()["outcome"] not in ("error", "superseded")
        assert len(srv.dispatches) == 1
        jobs.killed_session(point)
        assert [e["type"] for e in jobs.ledger() if not e.get("confirmed") and e["type"] != "place"] == [
            "started", "session", "dispatch"]  # nothing of session 2 (the place: where its progress shows)
        jobs.tick()
        jobs.tick(timedelta(minutes=40))
        assert len(srv.dispatches) == 1  # it may still be running
        jobs.tick(timedelta(hours=3))
        jobs.tick(timedelta(hours=3))
        assert len(srv.dispatches) == 2 and not [e for e in jobs.ledger() if e["type"] == "session" and e["n"] == 2]
        jobs.killed_session(point)  # the run dispatched again is killed as well
        jobs.tick(timedelta(hours=6))
        jobs.tick(timedelta(hours=6))
        assert len(srv.dispatches) == 3
        entries = jobs.ledger()
        second = [e for e in entries if e["type"] == "session" and e["n"] == 2]
        assert len(second) == 1 and second[0]["reconciled"] and second[0]["outcome"] == "TimedOut", second
        assert "never started" in second[0]["reasons"][0]
        assert Counter(e["n"] for e in entries if e["type"] == "started") == {1: 1, 2: 1}
        assert [e["for_session"] for e in entries if e["type"] == "dispatch" and not e.get("confirmed")] == [2, 2, 3]
        assert fold_ledger(jobs.bare, "greeter").open_session is None


@pytest.mark.parametrize("point", PARK_POINTS)
def test_github_job_killed_around_the_park_issue_opens_exactly_one(tmp_path, point):
    """Killed before, during or after opening the park issue: after the next job there is exactly one open park
    issue for the plan and one `parked` entry."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, PARK_SCRIPT)
        jobs.killed_session(point)
        outputs = jobs.session()
        assert outputs["outcome"] == "parked", outputs
        jobs.session()  # and once more, as a duplicate dispatch would
        issues = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
        assert len(issues) == 1 and issues[0]["state"] == "open", issues
        assert "<!-- plan-runner:park plan=greeter -->" in issues[0]["body"]
        assert len([e for e in jobs.ledger() if e["type"] == "park"]) == 1
        assert srv.dispatches == []
