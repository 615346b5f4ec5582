"""Nothing polls while nothing waits (issue 23; docs/github-actions.md, "Billing").

The tick's `schedule` is a workflow of its own, the clock (plan-runner-clock.yml): a job that leaves a plan waiting on
a clock enables it (`PUT .../actions/workflows/{file}/enable`), the clock's tick that finds no plan waiting disables
it (`PUT .../disable`), and a disabled workflow's schedule starts no run (the test server keeps the state). The clock
also runs while a session runs or is dispatched: GitHub starts no workflow for the events of the job's token but the
two dispatches, so the end of a run one session dispatched for the next is no `workflow_run` event (the test server
follows that rule: `srv.complete_run` returns the event GitHub delivers, or None). The clock's tick asks GitHub how the
run ended and reconciles the session at once; a `workflow_run` comes only for a run a person started (mode
reconcile)."""

from __future__ import annotations

import pytest

from runner.adapters import clock
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.integration.test_action_modes import Jobs

pytestmark = pytest.mark.integration

CLOCK = "plan-runner-clock.yml"
CLOCK_ENV = {"GITHUB_WORKFLOW_REF": f"octo-org/demo/.github/workflows/{CLOCK}@refs/heads/main",
             "PLAN_RUNNER_SESSION_WORKFLOW": "plan-runner.yml"}


@pytest.fixture(autouse=True)
def _noon(monkeypatch):
    """Off the keep-alive hour: these tests count the enable and disable calls, so plan-runner's clock
    (runner/adapters/clock.py) reads noon of today."""
    monkeypatch.setenv(clock.ENV, "12:00")


def tick(jobs: Jobs):
    return jobs.run("schedule", w.schedule_event(), **CLOCK_ENV)


def reconcile(jobs: Jobs, event: dict):
    return jobs.run("workflow_run", event, PLAN_RUNNER_MODE="reconcile",
                    GITHUB_WORKFLOW_REF="octo-org/demo/.github/workflows/plan-runner-reconcile.yml@refs/heads/main")


def test_a_session_turns_the_clock_on_a_wait_keeps_it_and_a_parked_plan_turns_it_off(tmp_path, monkeypatch):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=w.SCRIPT.replace("reset_in: 2,", "reset_in: 600,"))
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        # enabled once, before session 1 ran: a job that dies must still be found; the dispatched session 2 keeps it on
        assert srv.enabled == [CLOCK] and srv.disabled == [] and srv.schedule_fires(CLOCK)
        assert f"Clock `{CLOCK}`: enabled (`greeter` session 1 starting)" in summary
        rc, out, outputs, summary, _ = jobs.session()  # the agent hits a rate limit: the plan waits
        assert outputs["outcome"] == "LimitBackoff", out
        assert srv.enabled == [CLOCK], "the dispatched run found the clock on: no call"
        rc, out, outputs, summary, _ = tick(jobs)  # still waiting: the running clock stays as it is, no call
        assert rc == 0 and srv.enabled == [CLOCK] and srv.disabled == [], out
        monkeypatch.setenv(clock.ENV, "12:15")  # the reset (10 min after the session) has passed on plan-runner's clock
        rc, out, outputs, summary, _ = tick(jobs)  # the wait is over: dispatched, in the session workflow
        assert rc == 0 and outputs["outcome"] == "dispatched", (out, jobs.ledger())
        assert srv.dispatches[-1].workflow == "plan-runner.yml"
        assert jobs.ledger()[-1]["run_id"] == srv.dispatches[-1].run_id
        assert srv.disabled == [] and srv.schedule_fires(CLOCK), "the dispatched session keeps the clock on"
        rc, out, outputs, summary, _ = jobs.session()  # session 3 advances, dispatches 4
        rc, out, outputs, summary, _ = jobs.session()  # session 4 parks for a human
        assert outputs["outcome"] == "NeedsHuman" and srv.enabled == [CLOCK], out
        rc, out, outputs, summary, _ = tick(jobs)  # nothing runs, nothing waits on time: off
        assert rc == 0 and srv.disabled == [CLOCK] and not srv.schedule_fires(CLOCK), out
        assert f"Clock `{CLOCK}`: disabled" in summary


def test_an_idle_repository_disables_the_clock_on_its_first_tick(tmp_path):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = tick(jobs)
        assert rc == 0 and outputs["outcome"] == "idle", out
        assert srv.disabled == [CLOCK] and not srv.schedule_fires(CLOCK)
        assert srv.count("POST") == 0


def test_the_old_single_workflow_is_never_disabled_and_says_how_to_migrate(tmp_path):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        jobs.session()
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event())  # plan-runner.yml's own schedule
        assert rc == 0 and srv.disabled == [] and srv.schedule_fires("plan-runner.yml"), out
        assert "::warning title=plan-runner migrate the workflow::" in out
        assert "plan-runner init --force" in summary and "plan-runner-clock.yml" in summary


def test_a_killed_dispatched_session_is_reconciled_by_the_clock_with_no_workflow_run(tmp_path):
    """Session 1 dispatched session 2 and GitHub named its run; that job dies before its one push (a lost runner,
    a cancel the salvage could not finish): the remote holds only the dispatch. GitHub delivers no `workflow_run`
    for the run (the job's token dispatched it); the clock, on since session 1, asks GitHub how the run is: running,
    nothing happens; ended without succeeding, session 2 is reconciled at once and session 3 dispatched."""
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session()
        assert len(srv.dispatches) == 1, (rc, outputs, out)  # once seen with none in a loaded run: say why
        (run,) = [d.run_id for d in srv.dispatches]
        assert srv.runs[run]["actor"] == "github-actions[bot]" and srv.schedule_fires(CLOCK)
        srv.start_run(run)
        rc, out, outputs, summary, _ = tick(jobs)  # it runs: left alone, one GET of the run
        assert rc == 0 and outputs["outcome"] == "idle" and len(srv.dispatches) == 1, out
        assert srv.count("GET", rf"/repos/octo-org/demo/actions/runs/{run}") == 1
        assert srv.complete_run(run, "failure") is None  # no workflow_run event: nothing but the clock sees it
        rc, out, outputs, summary, _ = tick(jobs)
        assert rc == 0 and outputs["outcome"] == "dispatched", out
        assert f"reconciled session 2 (run {run} ended without a word)" in out
        records = [e for e in jobs.ledger() if e["type"] == "session"]
        assert [r["n"] for r in records] == [1, 2] and records[-1]["outcome"] == "TimedOut"
        assert len(srv.dispatches) == 2 and jobs.ledger()[-1]["run_id"] == srv.dispatches[-1].run_id
        assert srv.schedule_fires(CLOCK) and srv.disabled == []  # session 3 is dispatched: the clock stays on
        rc, out, outputs, summary, _ = jobs.session(GITHUB_RUN_ID=str(srv.dispatches[-1].run_id))  # the plan goes on
        assert rc == 0 and "plan-runner session: 3 delivery 1.2" in out, out
        assert [e["n"] for e in jobs.ledger() if e["type"] == "session"] == [1, 2, 3]


def test_a_session_a_person_started_is_reconciled_from_its_workflow_run(tmp_path):
    """A run a person dispatched (the Actions tab, `plan-runner start`) is not the job token's: its end is a
    `workflow_run` event, and mode reconcile reconciles its open session at once; a success, another run's end or a
    run no dispatch started changes nothing."""
    from runner.adapters.store.state import GitStateStore
    from runner.core.ledger import SessionStarted

    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        done = srv.add_run(actor="maintainer")
        event = srv.complete_run(done, "success")
        assert event is not None and event["workflow_run"]["event"] == "workflow_dispatch"
        rc, out, outputs, summary, _ = reconcile(jobs, event)  # a success: not a kill
        assert rc == 0 and outputs["outcome"] == "idle" and srv.dispatches == [], out
        run = srv.add_run(actor="maintainer", inputs={"plan": "plans/greeter.md"})
        srv.start_run(run)
        clone = w.checkout(jobs.bare, jobs.root / "started")  # session 1 pushed its start, then its job died
        store = GitStateStore(clone)
        _, version = store.read("greeter")
        store.append("greeter", [SessionStarted(n=1, kind="delivery", checkpoint="1.1", base_sha="0" * 40,
                                                started_at=clock.now(), job=str(run))], version)
        other = srv.add_run("plan-runner.yml", event="schedule", actor="maintainer")
        rc, out, outputs, summary, _ = reconcile(jobs, srv.complete_run(other, "cancelled"))  # not a dispatched run
        assert rc == 0 and outputs["outcome"] == "idle" and srv.dispatches == [], out
        rc, out, outputs, summary, _ = reconcile(jobs, srv.complete_run(run, "cancelled"))
        assert rc == 0 and outputs["outcome"] == "dispatched", out
        records = [e for e in jobs.ledger() if e["type"] == "session"]
        assert [r["n"] for r in records] == [1] and records[-1]["outcome"] == "TimedOut" and records[-1]["reconciled"]
        assert len(srv.dispatches) == 1 and srv.dispatches[-1].workflow == "plan-runner.yml"
        assert srv.disabled == []  # a reconcile never disables


def test_reconcile_refuses_another_event(tmp_path):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event(), PLAN_RUNNER_MODE="reconcile")
        assert rc != 0 and "`reconcile` mode needs a workflow_run event" in out


def test_a_repository_without_the_clock_file_warns_how_to_migrate(tmp_path):
    """The old single workflow has no plan-runner-clock.yml: the enable call (before the session) answers 404,
    the session still succeeds, and the warning says what to do."""
    with GitHubServer() as srv:
        srv.add_workflow("plan-runner.yml")  # GitHub knows only the old single workflow
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        assert "::warning title=plan-runner clock::could not enable the clock plan-runner-clock.yml" in out
        assert "plan-runner init --force" in out and srv.enabled == []
