"""A refused workflow dispatch ends once: GitHub's 403 (the job's token lacks `actions: write`) or 422 (the
workflow has no `workflow_dispatch` trigger) parks the plan with the fix, and no tick asks GitHub again, not
even once the dispatch would count as lost. A maintainer's `/plan-runner resume` dispatches again.

GitHub's test server (tests/servers/github.py) answers as GitHub does, over real HTTP to PyGithub: a call the
token was not granted is 403 "Resource not accessible by integration" with `X-Accepted-GitHub-Permissions:
actions=write`; a dispatch of a workflow without the trigger is 422 "Workflow does not have
'workflow_dispatch' trigger". (The OpenAPI description of createWorkflowDispatch lists only its 200/204
answers; the refusals are GitHub's documented behaviour, cited in docs/github-actions.md.)
"""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import pytest

from runner.adapters.render.termreport import to_terminal  # bodies escape the text they quote

from runner.drivers.actions.main import run_action
from tests.e2e_act import world as w
from tests.reliability_world import GH_SCRIPT, GitHubJobs
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration
ALL_BUT_ACTIONS = {"contents": "write", "issues": "write", "pull-requests": "write", "metadata": "read"}


def park_issues(srv: GitHubServer) -> list[dict]:
    return [i for i in srv.issues.values() if "plan-runner" in i["labels"]]


def dispatch_posts(srv: GitHubServer) -> int:
    return srv.count("POST", r".*/actions/workflows/.*/dispatches")


def reply(jobs: GitHubJobs, issue: dict, body: str, user: str = "maintainer") -> dict[str, str]:
    cid = jobs.srv.add_comment(issue["number"], body, user=user)
    env = {**jobs.env("issue_comment", w.comment_event(issue, body, user, cid)), "PLAN_RUNNER_MODE": "reply"}
    rc = run_action(env, out=io.StringIO())
    assert rc == 0
    return w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())


def test_a_dispatch_refused_for_lack_of_actions_write_parks_once_and_no_tick_retries(tmp_path) -> None:
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        srv.set_permission("maintainer", "write")
        srv.token_scopes = dict(ALL_BUT_ACTIONS)
        outputs = jobs.session()
        # The session's work is recorded; the refused dispatch parks the plan with the permission to add.
        assert [e["outcome"] for e in jobs.ledger() if e["type"] == "session"] == ["Advanced"]
        assert outputs["outcome"] == "Advanced" and outputs["issue-url"], outputs
        (issue,) = park_issues(srv)
        assert "could not be started" in to_terminal(issue["body"]) and "actions: write" in to_terminal(issue["body"])
        assert "actions=write" in to_terminal(issue["body"])  # what GitHub's X-Accepted-GitHub-Permissions said
        assert "/plan-runner resume" in to_terminal(issue["body"])
        assert dispatch_posts(srv) == 1 and srv.dispatches == []
        # Ticks, now and long after the dispatch would count as lost, leave it parked and ask GitHub nothing.
        for shift in (timedelta(), timedelta(hours=2), timedelta(days=1)):
            line, went = jobs.tick(shift)
            assert not went
            assert line.startswith("parked, waiting for a human"), line
        assert dispatch_posts(srv) == 1 and len(park_issues(srv)) == 1
        assert [e["type"] for e in jobs.ledger()].count("park") == 1

        # The maintainer grants actions: write and answers: the next session is dispatched once.
        srv.token_scopes = None
        outputs = reply(jobs, issue, "/plan-runner resume")
        assert outputs["outcome"] == "accepted"
        assert [d.inputs for d in srv.dispatches] == [{"plan": "plans/greeter.md"}]
        assert jobs.session()["outcome"] == "Advanced"
        assert len(srv.dispatches) == 2


def test_a_workflow_without_a_dispatch_trigger_parks_with_the_trigger_to_add(tmp_path) -> None:
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        srv.add_workflow("plan-runner.yml", inputs=None)  # `on:` lacks workflow_dispatch
        jobs.session()
        (issue,) = park_issues(srv)
        assert "(422)" in to_terminal(issue["body"]) and "Workflow does not have 'workflow_dispatch' trigger" in to_terminal(issue["body"])
        assert "workflow_dispatch:" in to_terminal(issue["body"]) and "plan:" in to_terminal(issue["body"])
        assert jobs.tick(timedelta(hours=3))[0].startswith("parked, waiting for a human")
        assert dispatch_posts(srv) == 1 and srv.dispatches == []


def test_a_disabled_workflow_parks_with_enable_the_workflow(tmp_path) -> None:
    """GitHub refuses a dispatch of a disabled workflow (422 "Cannot trigger a 'workflow_dispatch' on a disabled
    workflow"): the fix is to enable it, never to add a trigger it already has."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        srv.workflow_states["plan-runner.yml"] = "disabled_inactivity"
        jobs.session()
        (issue,) = park_issues(srv)
        text = to_terminal(issue["body"])
        assert "Cannot trigger a 'workflow_dispatch' on a disabled workflow" in text
        assert "enable the workflow" in text and "gh workflow enable plan-runner.yml" in text
        assert "on:\n    workflow_dispatch:" not in text and "add to .github/workflows" not in text
        assert dispatch_posts(srv) == 1 and srv.dispatches == []


def test_a_tick_whose_redo_of_a_lost_dispatch_is_refused_parks_and_stops(tmp_path) -> None:
    """The tick's own redo of a lost dispatch (the job that recorded it died before the POST) meets the refusal:
    it parks (its job may not open issues: the park is recorded with the report in the job summary) and the
    ticks after it do nothing."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        jobs.killed_session("dispatch-recorded")  # intent recorded, never sent
        assert dispatch_posts(srv) == 0
        srv.token_scopes = {"contents": "write"}  # the tick job of `plan-runner init`, without actions: write
        line, _ = jobs.tick(timedelta(hours=1))
        assert line.startswith("parked:") and "actions: write" in line, line
        assert dispatch_posts(srv) == 1
        parks = [e for e in jobs.ledger() if e["type"] == "park"]
        assert len(parks) == 1 and parks[0]["issue_url"] is None
        for shift in (timedelta(hours=2), timedelta(days=2)):
            assert jobs.tick(shift)[0].startswith("parked, waiting for a human")
        assert dispatch_posts(srv) == 1


def test_a_resume_while_the_permission_is_still_missing_parks_again_once(tmp_path) -> None:
    """The maintainer answers before fixing the workflow: the reply's dispatch is refused once, the plan parks
    again in a new issue (no rocket: nothing started), and ticks still ask GitHub nothing."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        srv.set_permission("maintainer", "write")
        srv.token_scopes = dict(ALL_BUT_ACTIONS)
        jobs.session()
        (first,) = park_issues(srv)
        cid = srv.add_comment(first["number"], "/plan-runner resume", user="maintainer")
        env = {**jobs.env("issue_comment", w.comment_event(first, "/plan-runner resume", "maintainer", cid)),
               "PLAN_RUNNER_MODE": "reply"}
        assert run_action(env, out=io.StringIO()) == 0
        outputs = w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
        assert outputs["outcome"] == "parked" and outputs["issue-url"], outputs
        assert first["state"] == "closed" and {r["content"] for r in srv.reactions[cid]} == {"+1"}
        second = [i for i in park_issues(srv) if i["state"] == "open"]
        assert len(second) == 1 and "actions: write" in to_terminal(second[0]["body"])
        assert dispatch_posts(srv) == 2 and srv.dispatches == []
        assert jobs.tick(timedelta(hours=2))[0].startswith("parked, waiting for a human")
        assert dispatch_posts(srv) == 2
