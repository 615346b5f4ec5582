"""A plan started on a branch other than the default one stays there (issue 45, item 6): every job of it after the
first dispatches its next session on the branch its sessions ran on (the `ref` of its `started` entries), whether
that job is a session, the clock's tick (which runs on the default branch) or a reply on the park issue (which runs
there too). Through the test GitHub server, which refuses a dispatch on a branch it does not have."""

from __future__ import annotations

import subprocess

import pytest

from runner.adapters import clock
from tests.e2e_act import world as w
from tests.integration.test_action_modes import Jobs
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration


def test_a_plan_started_on_a_branch_is_dispatched_there_by_every_later_job(tmp_path, monkeypatch):
    monkeypatch.setenv(clock.ENV, "12:00")
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=w.SCRIPT.replace("reset_in: 2,", "reset_in: 600,"))
        subprocess.run(["git", "branch", "feature", "main"], cwd=jobs.bare, check=True)
        on_feature = {"GITHUB_REF_NAME": "feature"}
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # Run workflow on `feature`: 1.1
        assert outputs["outcome"] == "Advanced", out
        assert [e["ref"] for e in jobs.ledger() if e["type"] == "started"] == ["feature"]
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # the dispatched run: a rate limit, a wait
        assert outputs["outcome"] == "LimitBackoff", out
        monkeypatch.setenv(clock.ENV, "12:15")
        rc, out, outputs, _, _ = jobs.run("schedule", w.schedule_event())  # the tick, on `main`, past the reset
        assert rc == 0 and len(srv.dispatches) == 2, out
        jobs.session(**on_feature)  # 1.2
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # the agent asks a human
        assert outputs["outcome"] == "NeedsHuman", out
        (issue,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
        cid = srv.add_comment(issue["number"], "/plan-runner resume\nEnglish.", user="maintainer")
        rc, out, outputs, _, _ = jobs.run("issue_comment", w.comment_event(issue, "/plan-runner resume\nEnglish.",
                                                                           "maintainer", cid))  # on `main`
        assert outputs["outcome"] == "accepted", out
        # the session's own dispatches, the tick's and the reply's: all on the plan's branch
        assert [d.ref for d in srv.dispatches] == ["feature"] * len(srv.dispatches) and len(srv.dispatches) == 4
        assert {srv.runs[d.run_id]["ref"] for d in srv.dispatches} == {"feature"}


def test_a_plan_run_on_the_default_branch_is_dispatched_there(tmp_path, monkeypatch):
    monkeypatch.setenv(clock.ENV, "12:00")
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, _, _ = jobs.session()
        assert outputs["outcome"] == "Advanced", out
        assert [d.ref for d in srv.dispatches] == ["main"]
        assert [e["ref"] for e in jobs.ledger() if e["type"] == "started"] == ["main"]
