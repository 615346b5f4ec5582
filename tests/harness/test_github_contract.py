"""The test GitHub server, and every request plan-runner sends, checked against GitHub's published
OpenAPI description of the endpoints plan-runner uses (tests/data/github-openapi-subset.json)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from runner.core.errors import Refused, ServiceUnavailable
from runner.adapters.github.events import GitHubContext
from runner.adapters.github.client import GitHubDriver
from runner.adapters.github.api import RetryPolicy
from runner.core.plan import GateConfig
from tests.github_contract import GENERAL_STATUSES, check_exchange, operation, spec, validate
from tests.servers.github import GitHubServer
from tests.servers.github_routes import ROUTES

pytestmark = pytest.mark.integration
TOKEN = "contract-token"


@pytest.fixture
def srv() -> Iterator[GitHubServer]:
    with GitHubServer(token=TOKEN) as server:
        yield server


def driver_for(srv: GitHubServer) -> GitHubDriver:
    ctx = GitHubContext.from_env({"GITHUB_API_URL": srv.url, "GITHUB_REPOSITORY": f"{srv.owner}/{srv.repo}",
                                  "GITHUB_WORKFLOW_REF": f"{srv.owner}/{srv.repo}/.github/workflows/plan-runner.yml@refs/heads/main",
                                  "GITHUB_REF_NAME": "main", "GITHUB_RUN_ID": "12"})
    return GitHubDriver(ctx, TOKEN, retry=RetryPolicy.fast())


def problems_of(srv: GitHubServer) -> list[str]:
    out = []
    for call in srv.calls:
        if call.status == 0:  # a connection reset by fault injection: no answer to check
            continue
        if call.path == "/graphql":  # GraphQL, not in the REST description: its one mutation is tested apart
            continue
        out += check_exchange(call.method, call.path, call.query, call.body, call.status, call.response)
    return out


def test_every_route_of_the_server_is_a_documented_operation() -> None:
    """Each route the test server implements names a method and path GitHub's description documents."""
    missing = [f"{r.method} {r.spec}" for r in ROUTES
               if r.method.lower() not in spec()["paths"].get(r.spec, {})]
    assert missing == []
    gone = [f"{r.method} {r.spec}" for r in ROUTES if r.gone_without_issues
            and 410 not in operation(r.method, r.spec.replace("{owner}", "o").replace("{repo}", "r")).statuses]
    assert gone == []  # 410 only where GitHub documents it


def test_the_checker_finds_what_github_would_not_accept() -> None:
    """The checker reports a missing required field, a wrong type, an undocumented request field and status."""
    issue = spec()["paths"]["/repos/{owner}/{repo}/issues/{issue_number}"]["get"]["responses"]["200"]
    schema = issue["content"]["application/json"]["schema"]
    assert any("'number' is missing" in p for p in validate(schema, {"id": 1}))
    assert any("documented as integer" in p for p in validate({"type": "integer"}, "7"))
    assert check_exchange("POST", "/repos/o/r/issues", {}, {"title": "t", "colour": "red"}, 201, None) == [
        "POST /repos/{owner}/{repo}/issues request $: field 'colour' is not documented",
        "POST /repos/{owner}/{repo}/issues 201 response $: null, but the schema does not allow null"]
    assert check_exchange("POST", "/repos/o/r/pulls", {}, {"head": "a", "base": "b"}, 410,
                          {"message": "Gone"}) == ["POST /repos/{owner}/{repo}/pulls: answered 410, documented "
                                                   "[201, 403, 422]"]
    assert check_exchange("GET", "/repos/o/r/nowhere", {}, None, 200, None) == [
        "GET /repos/o/r/nowhere: no such operation in GitHub's description"]


def test_every_request_plan_runner_sends_and_every_answer_match_githubs_description(srv: GitHubServer) -> None:
    """Parking, replying, dispatching, finishing (refused, then allowed), checks, permissions and every
    refusal: each request and answer is as GitHub documents it, and every route of the server is exercised."""
    srv.add_workflow("plan-runner.yml", inputs=("plan",))
    srv.add_custom_role("shepherd", "maintain")
    srv.set_permission("mona", "shepherd")
    srv.set_permission("rita", "read")
    srv.set_branch("plan-runner/a")
    srv.set_check_run("abc", "tests")
    srv.set_status("abc", "ci/lint", "success")
    with driver_for(srv) as d:
        url = d.open_park("a", "plan-runner: a needs a human", "## why\n\n> question")
        assert d.open_park("a", "again", "## why\n\n> question 2") == url
        number = d.find_park_issue("a").number
        assert d.plan_id_of_issue(number) == "a"
        comment = srv.add_comment(number, "/plan-runner resume", user="mona")
        assert d.can_steer("mona") and not d.can_steer("rita") and not d.can_steer("dependabot[bot]")
        d.react(comment, "+1")
        d.react(comment, "+1")
        d.comment(number, "accepted")
        place, place_url = d.open_issue("plan-runner: a", "each session's progress")  # a session's progress
        progress, _ = d.post_comment(place, "session 1 is running")
        d.edit_comment(progress, "session 1 ended: Advanced")
        assert place_url.endswith(f"/issues/{place}") and "ended: Advanced" in srv.comments[progress]["body"]
        d.react_review(srv.add_review_comment(number, "shorter", user="mona", path="a.py"), "+1")
        d.close_issue(number)
        run = d.dispatch_next("plans/a.md", "a#2")
        assert run is not None and not d.run_ended(run)  # queued
        assert srv.complete_run(run, "cancelled") is None and d.run_ended(run)  # the job token's run: no event
        with pytest.raises(Refused):
            d.open_finish("a", "plan-runner/a", "main", "plan-runner: a", "report")
        srv.actions_can_create_prs = True
        # the watch view: a draft (POST with draft), closed at a park (PATCH state), reopened and taken out of
        # draft by the finish (PATCH state, then GraphQL: no REST operation does that)
        watch = d.update_watch("a", "plan-runner/a", "main", "plan-runner: a", "view", "draft")
        assert d.update_watch("a", "plan-runner/a", "main", "plan-runner: a", "parked", "closed") == watch
        pr = d.open_finish("a", "plan-runner/a", "main", "plan-runner: a", "report")
        assert pr == watch and srv.ready_for_review == [int(pr.rsplit("/", 1)[-1])]
        assert d.open_finish("a", "plan-runner/a", "main", "plan-runner: a", "report 2") == pr
        from runner.adapters.github.verdict_check import VerdictCheck

        verdict = VerdictCheck(name="plan-runner / a", conclusion="action_required", title="NeedsHuman: session 1",
                               summary="| gate | |\n", text="why", details_url=url)
        assert d.publish_check(verdict, "a" * 40).endswith("/runs/" + str(srv.checks_on("a" * 40)[0]["id"]))
        gate = GateConfig(name="ci", checks=["tests", "ci/lint"])
        assert d.checks_gate(gate, "abc", timeout_s=1, poll_s=0.01).passed
        d.keep_workflow_enabled()
        d.set_workflow_enabled("plan-runner.yml", False)
        d.set_workflow_enabled("plan-runner.yml", True)
        srv.has_issues = False
        with pytest.raises(Refused):
            d.open_park("b", "t", "b")
        srv.has_issues = True
        srv.token_scopes = {"actions": "read"}
        with pytest.raises(Refused):
            d.dispatch_next("plans/a.md", "a#3")
        srv.token_scopes = None
        srv.fail_next(1, 502, match="^POST .*/comments$")
        with pytest.raises(ServiceUnavailable):
            d.comment(number, "lost")
    # The routes plan-runner itself does not call, asked directly so the server's every answer is checked.
    with httpx.Client(base_url=srv.repo_api, headers={"Authorization": f"token {TOKEN}"}) as http:
        assert http.get("").status_code == 200
        assert http.get("/labels").status_code == 200
        assert http.get("/actions/workflows/plan-runner.yml").json()["state"] == "active"
        assert http.post(f"/issues/{number}/labels", json={"labels": ["x"]}).status_code == 200
        assert http.get(f"/issues/{number}/comments").status_code == 200
        assert http.get(f"/issues/comments/{comment}/reactions").status_code == 200
        assert http.get(f"/pulls/{pr.rsplit('/', 1)[-1]}").status_code == 200
        assert http.post("/issues", json={"title": "t", "body": "x" * 65_537}).status_code == 422
        run = srv.checks_on("a" * 40)[0]["id"]
        assert http.patch(f"/check-runs/{run}", json={"conclusion": "success"}).status_code == 200
        # plan-runner asks for the run's details (200); GitHub's answer without them is 204
        assert http.post("/actions/workflows/plan-runner.yml/dispatches", json={"ref": "main"}).status_code == 204
    assert problems_of(srv) == []
    used = {(c.method, operation(c.method, c.path).path) for c in srv.calls if c.status and c.path != "/graphql"}
    assert [f"{r.method} {r.spec}" for r in ROUTES if (r.method, r.spec) not in used] == []
    assert {c.status for c in srv.calls} >= {200, 201, 204, 403, 404, 410, 422, 502}
    assert GENERAL_STATUSES >= {403, 502}
