"""Nothing polls while nothing waits (issue 23; docs/github-actions.md, "Billing").

The tick's `schedule` is a workflow of its own, the clock (plan-runner-clock.yml): a job that leaves a plan waiting on
a clock enables it (`PUT .../actions/workflows/{file}/enable`), the clock's tick that finds no plan waiting disables
it (`PUT .../disable`), and a disabled workflow's schedule starts no run (the test server keeps the state). A session
run that ended without succeeding is a `workflow_run` event: mode reconcile reconciles its plan at once, found by the
run id recorded at dispatch, without waiting out a deadline."""

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


def run_ended(run_id: int, conclusion: str, event: str = "workflow_dispatch") -> dict:
    return {"action": "completed", "workflow_run": {"id": run_id, "conclusion": conclusion, "event": event,
                                                    "path": ".github/workflows/plan-runner.yml", "name": "plan-runner"}}


def reconcile(jobs: Jobs, event: dict):
    return jobs.run("workflow_run", event, PLAN_RUNNER_MODE="reconcile",
                    GITHUB_WORKFLOW_REF="octo-org/demo/.github/workflows/plan-runner-reconcile.yml@refs/heads/main")


def test_a_wait_enables_the_clock_and_the_tick_that_ends_it_disables_it(tmp_path, monkeypatch):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        assert srv.enabled == [] and srv.disabled == [], "a dispatched session needs no clock"
        rc, out, outputs, summary, _ = jobs.session()  # the agent hits a rate limit: the plan waits
        assert outputs["outcome"] == "LimitBackoff", out
        assert srv.enabled == [CLOCK] and srv.schedule_fires(CLOCK)
        assert f"Clock `{CLOCK}`: enabled" in summary
        rc, out, outputs, summary, _ = tick(jobs)  # still waiting: the running clock stays as it is, no call
        assert rc == 0 and srv.enabled == [CLOCK] and srv.disabled == [], out
        monkeypatch.setenv(clock.ENV, "12:05")  # the reset (2 s after the session) has passed on plan-runner's clock
        rc, out, outputs, summary, _ = tick(jobs)  # the wait is over: dispatched, in the session workflow
        assert rc == 0 and outputs["outcome"] == "dispatched", out
        assert srv.dispatches[-1].workflow == "plan-runner.yml"
        assert jobs.ledger()[-1]["run_id"] == srv.dispatches[-1].run_id
        assert srv.disabled == [CLOCK] and not srv.schedule_fires(CLOCK)
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


def test_a_killed_dispatched_session_is_reconciled_from_its_runs_end(tmp_path):
    """Session 1 dispatched session 2 and GitHub named its run; that run is killed before its one push (the remote
    holds only the dispatch): its workflow_run event reconciles session 2 now and dispatches the next run."""
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        jobs.session()
        (run,) = [d.run_id for d in srv.dispatches]
        rc, out, outputs, summary, _ = reconcile(jobs, run_ended(run, "success"))  # a success: not a kill
        assert rc == 0 and outputs["outcome"] == "idle" and len(srv.dispatches) == 1, out
        rc, out, outputs, summary, _ = reconcile(jobs, run_ended(run + 1, "cancelled"))  # another run's end
        assert rc == 0 and outputs["outcome"] == "idle" and len(srv.dispatches) == 1, out
        rc, out, outputs, summary, _ = reconcile(jobs, run_ended(run, "cancelled", event="schedule"))
        assert rc == 0 and outputs["outcome"] == "idle" and len(srv.dispatches) == 1, out
        rc, out, outputs, summary, _ = reconcile(jobs, run_ended(run, "cancelled"))
        assert rc == 0 and outputs["outcome"] == "dispatched", out
        assert f"reconciled session 2 (run {run} ended without a word)" in out
        records = [e for e in jobs.ledger() if e["type"] == "session"]
        assert [r["n"] for r in records] == [1, 2] and records[-1]["outcome"] == "TimedOut"
        assert len(srv.dispatches) == 2 and srv.dispatches[-1].workflow == "plan-runner.yml"
        assert jobs.ledger()[-1]["run_id"] == srv.dispatches[-1].run_id
        assert srv.enabled == [] and srv.disabled == []  # a reconcile never disables; nothing waits


def test_reconcile_refuses_another_event(tmp_path):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event(), PLAN_RUNNER_MODE="reconcile")
        assert rc != 0 and "`reconcile` mode needs a workflow_run event" in out


def test_a_wait_in_a_repository_without_the_clock_file_warns_how_to_migrate(tmp_path):
    """The old single workflow has no plan-runner-clock.yml: the enable call answers 404, the session still
    succeeds, and the warning says what to do."""
    with GitHubServer() as srv:
        srv.add_workflow("plan-runner.yml")  # GitHub knows only the old single workflow
        jobs = Jobs(tmp_path, srv)
        jobs.session()
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "LimitBackoff", out
        assert "::warning title=plan-runner clock::could not enable the clock plan-runner-clock.yml" in out
        assert "plan-runner init --force" in out and srv.enabled == []
