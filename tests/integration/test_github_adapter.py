"""Tests for runner.adapters.github.client: PyGithub over real HTTP against the local GitHub server."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from runner.core.errors import PlanRunnerError, Refused, ServiceUnavailable
from runner.core.exits import Exit
from runner.adapters.github.events import GitHubContext
from runner.adapters.github.client import GitHubDriver, ParkIssue, park_marker, parse_park_marker
from runner.adapters.github.api import RetryPolicy
from runner.adapters.github.checks import classify_checks
from runner.core.plan import GateConfig
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

TOKEN = "ghs_s3cr3tTokenValue0123456789"
WORKFLOW_REF = "octo-org/demo/.github/workflows/plan-runner.yml@refs/heads/main"


def context(srv: GitHubServer, **extra: str) -> GitHubContext:
    env = {"GITHUB_API_URL": srv.url, "GITHUB_REPOSITORY": f"{srv.owner}/{srv.repo}",
           "GITHUB_WORKFLOW_REF": WORKFLOW_REF, "GITHUB_REF_NAME": "main", "GITHUB_RUN_ID": "77", **extra}
    return GitHubContext.from_env(env)


@pytest.fixture
def srv() -> Iterator[GitHubServer]:
    with GitHubServer(token=TOKEN) as server:
        yield server


@pytest.fixture
def driver(srv: GitHubServer) -> Iterator[GitHubDriver]:
    with GitHubDriver(context(srv), TOKEN, retry=RetryPolicy.fast()) as d:
        yield d


# ---- dispatch ---------------------------------------------------------------

def test_dispatch_is_exactly_one_http_call(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Dispatching the next session makes one POST with the workflow file, the ref and the plan input."""
    before = srv.count()
    driver.dispatch_next("plans/add-auth.md", "add-auth#3")
    assert srv.count() - before == 1
    assert srv.calls[-1].method == "POST"
    assert srv.calls[-1].path == "/repos/octo-org/demo/actions/workflows/plan-runner.yml/dispatches"
    assert [(d.workflow, d.ref, d.inputs) for d in srv.dispatches] == [
        ("plan-runner.yml", "main", {"plan": "plans/add-auth.md"})]


def test_dispatch_of_unknown_workflow_is_a_user_error(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A 404 for the workflow is a clear PlanRunnerError, not an outage."""
    srv.add_workflow("other.yml")
    with pytest.raises(PlanRunnerError) as info:
        driver.dispatch_next("plans/a.md", "a#1")
    assert not isinstance(info.value, ServiceUnavailable)
    assert "404" in info.value.what and info.value.fix


def test_dispatch_without_ref_name_explains(srv: GitHubServer) -> None:
    """Without GITHUB_REF_NAME the dispatch refuses before any request."""
    with GitHubDriver(context(srv, GITHUB_REF_NAME=""), TOKEN, retry=RetryPolicy.fast()) as d:
        with pytest.raises(PlanRunnerError, match="GITHUB_REF_NAME"):
            d.dispatch_next("plans/a.md", "a#1")
    assert srv.count() == 0


def test_missing_token_is_a_clear_error(srv: GitHubServer) -> None:
    """An empty token fails at construction with the YAML to fix it."""
    with pytest.raises(PlanRunnerError, match="no GitHub token"):
        GitHubDriver(context(srv), "")


def test_bad_token_is_a_user_error_not_an_outage(srv: GitHubServer) -> None:
    """A 401 becomes a PlanRunnerError about the token, and the token is not in it."""
    with GitHubDriver(context(srv), "wrong-" + TOKEN, retry=RetryPolicy.fast()) as d:
        with pytest.raises(PlanRunnerError) as info:
            d.dispatch_next("plans/a.md", "a#1")
    assert not isinstance(info.value, ServiceUnavailable)
    assert "401" in info.value.what
    assert TOKEN not in info.value.render()


# ---- park issues ------------------------------------------------------------

def test_park_creates_label_and_issue_with_marker(srv: GitHubServer, driver: GitHubDriver) -> None:
    """The first park creates the missing label and one labelled issue carrying the hidden marker."""
    url = driver.open_park("add-auth", "plan-runner: add-auth needs a human", "Why: gates red twice.")
    assert url == f"{srv.html_url}/issues/1"
    issue = srv.issues[1]
    assert issue["labels"] == ["plan-runner"]
    assert issue["body"].startswith("<!-- plan-runner:park plan=add-auth -->\n")
    assert "Why: gates red twice." in issue["body"]
    assert srv.labels["plan-runner"]["color"] == "5319e7"


def test_second_park_of_same_plan_reuses_the_issue(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Parking the same plan again updates the open issue and comments on it, never a duplicate."""
    first = driver.open_park("add-auth", "first", "report one")
    second = driver.open_park("add-auth", "second", "report two")
    assert first == second
    assert len(srv.issues) == 1
    assert "report two" in srv.issues[1]["body"] and srv.issues[1]["title"] == "second"
    assert [c["body"].splitlines()[0] for c in srv.comments_on(1)] == [
        "plan-runner parked `add-auth` again: second"]
    assert srv.count("POST", r".*/labels") == 1


def test_other_plans_and_closed_issues_get_new_issues(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Another plan gets its own issue; after its issue is closed a plan gets a fresh one."""
    a = driver.open_park("a", "A", "a")
    b = driver.open_park("b", "B", "b")
    assert a != b
    driver.close_issue(1)
    assert srv.issues[1]["state"] == "closed"
    again = driver.open_park("a", "A again", "a2")
    assert again == f"{srv.html_url}/issues/3"


def test_park_finds_its_issue_on_a_later_page(srv: GitHubServer, driver: GitHubDriver) -> None:
    """The park issue is found even behind 100 other open plan-runner issues."""
    srv.add_issue("old", park_marker("target"), labels=("plan-runner",))
    for n in range(105):
        srv.add_issue(f"other {n}", park_marker(f"p{n}"), labels=("plan-runner",))
    found = driver.find_park_issue("target")
    assert found is not None and found.number == 1
    assert srv.count("GET", r".*/issues") == 2


def test_unlabelled_issue_with_marker_is_not_a_park_issue(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A stranger's issue that copies the marker but lacks the label is ignored."""
    forged = srv.add_issue("forged", park_marker("add-auth"), user="mallory")
    assert driver.find_park_issue("add-auth") is None
    assert driver.plan_id_of_issue(forged) is None


def test_plan_id_of_issue_reads_the_marker_from_github(srv: GitHubServer, driver: GitHubDriver) -> None:
    """The plan id comes from the labelled issue's body as GitHub has it now."""
    driver.open_park("add-auth", "t", "b")
    assert driver.plan_id_of_issue(1) == "add-auth"
    assert driver.plan_id_of_issue(ParkIssue(1, "", "", "no marker", "open", ("plan-runner",), False)) is None


def test_marker_round_trip_and_bad_plan_id() -> None:
    """The marker parses back to its plan id; an id that could break out of the comment is refused."""
    assert parse_park_marker("x\n" + park_marker("add-auth.v2_x") + "\ny") == "add-auth.v2_x"
    assert parse_park_marker(None) is None
    with pytest.raises(PlanRunnerError):
        park_marker("a --> <script>")


# ---- pull requests ----------------------------------------------------------

def test_finish_opens_then_reuses_a_pull_request(srv: GitHubServer, driver: GitHubDriver) -> None:
    """The finish opens one pull request from the work branch and later updates it instead of a second."""
    srv.set_branch("plan-runner/add-auth")
    srv.actions_can_create_prs = True
    first = driver.open_finish("add-auth", "plan-runner/add-auth", "main", "Add auth", "report 1")
    second = driver.open_finish("add-auth", "plan-runner/add-auth", "main", "Add auth", "report 2")
    assert first == second == f"{srv.html_url}/pull/1"
    assert srv.issues[1]["body"] == "<!-- plan-runner:watch plan=add-auth -->\nreport 2"  # the watch marker
    assert srv.issues[1]["pull"]["head"] == "plan-runner/add-auth"


def test_finish_without_commits_is_a_clear_error(srv: GitHubServer, driver: GitHubDriver) -> None:
    """GitHub's 422 "No commits between" reaches the user as a PlanRunnerError with its message."""
    srv.set_branch("plan-runner/empty", srv.branches["main"])
    srv.actions_can_create_prs = True
    with pytest.raises(PlanRunnerError) as info:
        driver.open_finish("empty", "plan-runner/empty", "main", "t", "b")
    assert "No commits between" in info.value.why


# ---- permissions, comments, reactions ----------------------------------------

@pytest.mark.parametrize("role, steer", [("admin", True), ("maintain", True), ("write", True),
                                         ("triage", False), ("read", False), ("none", False)])
def test_only_write_and_above_can_steer(srv: GitHubServer, driver: GitHubDriver, role: str, steer: bool) -> None:
    """The API's `permission` decides: admin, maintain and write may steer, the rest may not."""
    srv.set_permission("mona", role)
    assert driver.can_steer("mona") is steer


@pytest.mark.parametrize("base, steer", [("maintain", True), ("write", True), ("triage", False), ("read", False)])
def test_custom_role_steers_by_its_base_permission(srv: GitHubServer, driver: GitHubDriver, base: str,
                                                   steer: bool) -> None:
    """A custom repository role is judged by its base permission, never by its name (`role_name`)."""
    srv.add_custom_role("plan-shepherd", base)
    srv.set_permission("mona", "plan-shepherd")
    assert driver.can_steer("mona") is steer


def test_finish_refused_by_the_repository_setting_says_which_setting(srv: GitHubServer,
                                                                      driver: GitHubDriver) -> None:
    """A 403 on pull request creation names the repository setting as the fix, not `pull-requests: write`."""
    srv.set_branch("plan-runner/add-auth")
    with pytest.raises(Refused) as info:
        driver.open_finish("add-auth", "plan-runner/add-auth", "main", "Add auth", "report")
    assert "Allow GitHub Actions to create and approve pull requests" in info.value.fix
    assert "pull-requests: write` is already there" in info.value.fix
    assert srv.count("POST", r".*/pulls") == 1  # asked once, never again in the same job


def test_park_on_a_repository_without_issues_is_refused_once(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Issues disabled (410) ends in one Refused naming the Issues setting and where the report is."""
    srv.has_issues = False
    with pytest.raises(Refused) as info:
        driver.open_park("add-auth", "t", "report")
    assert "410" in info.value.what and "Features > [x] Issues" in info.value.fix
    assert info.value.report_url == driver.ctx.run_url
    assert srv.count("POST", r".*/issues") == 1


def test_a_missing_token_permission_is_refused_with_the_permissions_block(srv: GitHubServer,
                                                                          driver: GitHubDriver) -> None:
    """A 403 "Resource not accessible by integration" ends in one Refused listing the permissions to grant."""
    srv.token_scopes = {"issues": "write", "actions": "read"}
    with pytest.raises(Refused) as info:
        driver.dispatch_next("plans/a.md", "a#1")
    assert "actions: write" in info.value.fix and srv.count("POST") == 1


def test_long_park_report_is_capped_below_githubs_limit(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A park report over 65,536 characters is shortened so GitHub accepts it (no 422), with a note."""
    report = "## why\n\n> the question\n\n#### Commits\n\n" + "- `abc` commit\n" * 6000
    driver.open_park("add-auth", "t", report)
    body = srv.issues[1]["body"]
    assert len(body) <= 65_536 and "> the question" in body and "left out" in body
    assert all(c.status != 422 for c in srv.calls)


def test_unknown_user_and_bot_cannot_steer(driver: GitHubDriver) -> None:
    """A user with no role, and an app bot GitHub answers 404 for, both have `none`."""
    assert driver.permission("stranger") == "none"
    assert driver.permission("dependabot[bot]") == "none"
    assert not driver.can_steer("dependabot[bot]")


def test_react_comment_and_close(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Reacting twice is fine (201 then 200), a comment returns its URL, closing closes."""
    number = srv.add_issue("park", labels=("plan-runner",))
    comment_id = srv.add_comment(number, "/plan-runner resume", user="mona")
    driver.react(comment_id, "rocket")
    driver.react(comment_id, "rocket")
    assert [c.status for c in srv.calls[-2:]] == [201, 200]
    assert [r["content"] for r in srv.reactions[comment_id]] == ["rocket"]
    url = driver.comment(number, "Resumed.")
    assert url.endswith(f"/issues/{number}#issuecomment-{srv.comments_on(number)[-1]['id']}")
    driver.close_issue(number)
    assert srv.issues[number]["state"] == "closed"


# ---- checks gate --------------------------------------------------------------

def gate(*names: str) -> GateConfig:
    return GateConfig(name="ci", checks=names)


def test_checks_gate_green_from_runs_and_statuses(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Success, neutral and skipped check runs and a success status make a green gate."""
    for name, conclusion in (("tests", "success"), ("docs", "neutral"), ("deploy", "skipped")):
        srv.set_check_run("abc", name, conclusion=conclusion)
    srv.set_status("abc", "ci/lint", "success")
    result = driver.checks_gate(gate("tests", "docs", "deploy", "ci/lint"), "abc", timeout_s=2, poll_s=0.05)
    assert result.passed and result.kind == "checks" and not result.timed_out
    assert "docs: neutral" in result.output_tail


@pytest.mark.parametrize("conclusion", ["failure", "cancelled", "timed_out", "action_required"])
def test_checks_gate_red_conclusions(srv: GitHubServer, driver: GitHubDriver, conclusion: str) -> None:
    """Each red conclusion makes the gate red at once, without waiting for the timeout."""
    srv.set_check_run("abc", "tests", conclusion=conclusion)
    srv.set_check_run("abc", "slow", status="in_progress")
    started = time.monotonic()
    result = driver.checks_gate(gate("tests", "slow"), "abc", timeout_s=5, poll_s=0.05)
    assert not result.passed and not result.timed_out
    assert result.fingerprint == "checks:tests=red"
    assert time.monotonic() - started < 2


def test_checks_gate_waits_for_pending_checks(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A check that is still running is polled until it completes."""
    srv.set_check_run("abc", "tests", status="queued")
    timer = threading.Timer(0.3, lambda: srv.set_check_run("abc", "tests", conclusion="success"))
    timer.start()
    try:
        result = driver.checks_gate(gate("tests"), "abc", timeout_s=5, poll_s=0.05)
    finally:
        timer.cancel()
    assert result.passed
    assert srv.count("GET", r".*/check-runs") >= 2


def test_checks_gate_missing_check_is_red_at_timeout(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A named check that never reports makes the gate red when the bounded wait ends, with a clear error."""
    srv.set_check_run("abc", "tests")
    result = driver.checks_gate(gate("tests", "integration"), "abc", timeout_s=0.3, poll_s=0.05)
    assert not result.passed and result.timed_out
    assert result.error is not None and "integration (not reported)" in result.error
    assert result.fingerprint == "checks:integration=missing"


def test_checks_gate_status_failure_is_red(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A failing commit status makes the gate red; the newest status of a context wins."""
    srv.set_status("abc", "ci/lint", "success")
    srv.set_status("abc", "ci/lint", "failure")
    result = driver.checks_gate(gate("ci/lint"), "abc", timeout_s=1, poll_s=0.05)
    assert not result.passed


def test_classify_checks_newest_run_wins() -> None:
    """A re-run (larger id) of a failed check replaces the failure."""
    runs = [{"id": 1, "name": "t", "status": "completed", "conclusion": "failure"},
            {"id": 2, "name": "t", "status": "completed", "conclusion": "success"}]
    assert [s.state for s in classify_checks(["t"], runs, [])] == ["green"]


# ---- faults ------------------------------------------------------------------

def test_two_502s_then_success_is_retried(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Two bad gateways and then an answer: a read succeeds after three attempts."""
    srv.fail_next(2, status=502)
    assert driver.permission(srv.owner) == "admin"
    assert [c.status for c in srv.calls] == [502, 502, 200]


@pytest.mark.parametrize("act", ["dispatch", "issue", "comment"])
def test_a_post_answered_5xx_is_never_resent(srv: GitHubServer, driver: GitHubDriver, act: str) -> None:
    """A POST answered 502 may have been carried out: it is sent once and fails as ServiceUnavailable."""
    number = srv.add_issue("park", labels=("plan-runner",))
    srv.fail_next(1, status=502, match=r"^POST .*/(dispatches|issues|comments)$")
    with pytest.raises(ServiceUnavailable):
        if act == "dispatch":
            driver.dispatch_next("plans/a.md", "a#1")
        elif act == "issue":
            driver.open_park("other", "t", "b")
        else:
            driver.comment(number, "hello")
    assert srv.count("POST", r".*/(dispatches|issues|comments)") == 1


def test_patch_is_retried_too(srv: GitHubServer, driver: GitHubDriver) -> None:
    """Closing an issue (a PATCH) survives a 502 like every other call."""
    number = srv.add_issue("park")
    srv.fail_next(1, status=502)
    driver.close_issue(number)
    assert srv.issues[number]["state"] == "closed"
    assert [c.status for c in srv.calls] == [502, 200]


def test_secondary_rate_limit_waits_retry_after(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A secondary rate limit with Retry-After: 1 is waited out, then the call succeeds."""
    srv.secondary_rate_limit(1, retry_after=1)
    started = time.monotonic()
    assert driver.permission(srv.owner) == "admin"
    assert time.monotonic() - started >= 0.9
    assert [c.status for c in srv.calls] == [403, 200]


def test_secondary_rate_limit_without_retry_after_uses_the_configured_wait(srv: GitHubServer) -> None:
    """Without Retry-After the secondary-limit wait is `secondary_rate_wait` (tiny in tests)."""
    srv.secondary_rate_limit(1, retry_after=None)
    with GitHubDriver(context(srv), TOKEN, retry=RetryPolicy.fast(secondary_rate_wait=0.2)) as d:
        started = time.monotonic()
        d.react(srv.add_comment(srv.add_issue("x"), "hi", user="mona"), "+1")
        assert time.monotonic() - started >= 0.2
    assert [c.status for c in srv.calls] == [403, 201]


def test_primary_rate_limit_waits_for_reset(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A primary rate limit (remaining 0) is waited out until x-ratelimit-reset, then retried."""
    srv.primary_rate_limit(1, reset_in=0)
    assert driver.permission(srv.owner) == "admin"
    assert [c.status for c in srv.calls] == [403, 200]


@pytest.mark.parametrize("inject", ["primary", "retry-after"])
def test_rate_limit_longer_than_budget_is_service_unavailable(srv: GitHubServer, driver: GitHubDriver,
                                                              inject: str) -> None:
    """A rate limit that lifts later than max_rate_limit_wait fails fast as ServiceUnavailable."""
    if inject == "primary":
        srv.primary_rate_limit(1, reset_in=3600)
    else:
        srv.secondary_rate_limit(1, retry_after=3600)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable) as info:
        driver.dispatch_next("plans/a.md", "a#1")
    assert time.monotonic() - started < 3
    assert "rate limit" in info.value.what and info.value.fix


def test_rate_limit_429_is_retried(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A 429 answer is retried like a 5xx."""
    srv.primary_rate_limit(1, reset_in=0, status=429)
    driver.dispatch_next("plans/a.md", "a#1")
    assert [c.status for c in srv.calls] == [429, 200]  # 200: return_run_details


def test_service_staying_down_is_service_unavailable(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A GitHub that keeps answering 503 past the retry budget raises ServiceUnavailable with what/why/fix."""
    srv.fail_next(50, status=503)
    with pytest.raises(ServiceUnavailable) as info:
        driver.open_park("a", "t", "b")
    assert info.value.what and info.value.why and "githubstatus" in info.value.fix
    assert info.value.exit_code == Exit.SERVICE_UNAVAILABLE != Exit.PARKED
    assert srv.count() == RetryPolicy.fast().total + 1


def test_connection_reset_is_retried(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A connection reset by the server is retried and the call succeeds."""
    srv.reset_next(1)
    assert driver.permission(srv.owner) == "admin"
    assert [c.status for c in srv.calls] == [0, 200]


def test_slow_response_times_out_and_is_retried(srv: GitHubServer) -> None:
    """A response slower than the timeout is abandoned and the retry succeeds."""
    srv.delay_next(1, seconds=2.5)
    with GitHubDriver(context(srv), TOKEN, retry=RetryPolicy.fast(timeout=1)) as d:
        started = time.monotonic()
        assert d.permission(srv.owner) == "admin"
        assert time.monotonic() - started < 2.4


def test_unreachable_github_is_service_unavailable(srv: GitHubServer) -> None:
    """A closed port (GitHub unreachable) raises ServiceUnavailable, not a requests traceback."""
    ctx = context(srv)
    srv.close()
    with GitHubDriver(ctx, TOKEN, retry=RetryPolicy.fast()) as d:
        with pytest.raises(ServiceUnavailable, match="unavailable"):
            d.dispatch_next("plans/a.md", "a#1")


def test_forbidden_is_a_permissions_error(srv: GitHubServer, driver: GitHubDriver) -> None:
    """A plain 403 (no rate limit) is a PlanRunnerError whose fix is the workflow permissions block."""
    srv.fail_next(1, status=403)
    with pytest.raises(PlanRunnerError) as info:
        driver.dispatch_next("plans/a.md", "a#1")
    assert not isinstance(info.value, ServiceUnavailable)
    assert "actions: write" in info.value.fix
    assert srv.count() == 1


def test_token_never_reaches_logs_or_errors(srv: GitHubServer, caplog: pytest.LogCaptureFixture) -> None:
    """With debug logging on, no log record, repr or error contains the token."""
    caplog.set_level(logging.DEBUG)
    srv.fail_next(1, status=502, match="^GET")
    srv.fail_next(50, status=500, match=r"/labels")
    with GitHubDriver(context(srv), TOKEN, retry=RetryPolicy.fast()) as d:
        d.permission("mona")
        d.dispatch_next("plans/a.md", "a#1")
        with pytest.raises(ServiceUnavailable) as info:
            d.open_park("a", "t", "b")
        assert TOKEN not in repr(d)
    assert TOKEN not in info.value.render()
    assert caplog.records, "PyGithub should have logged the requests at debug level"
    assert all(TOKEN not in record.getMessage() for record in caplog.records)


def test_checks_that_a_job_token_push_cannot_start_need_a_human_not_a_red_gate(srv: GitHubServer,
                                                                              driver: GitHubDriver) -> None:
    """Pushed with GITHUB_TOKEN and nothing reports on the commit: the gate stops early with `needs_human`
    naming the push-token fix, instead of waiting out its timeout and counting red."""
    started = time.monotonic()
    result = driver.checks_gate(gate("tests"), "abc", timeout_s=30, poll_s=0.05, pushed_with_job_token=True,
                                no_ci_after_s=0.3)
    assert time.monotonic() - started < 5
    assert not result.passed and not result.timed_out and "push-token" in (result.needs_human or "")
    assert "GitHub starts no workflow" in result.needs_human


def test_checks_from_webhook_ci_are_still_awaited_after_a_job_token_push(srv: GitHubServer,
                                                                        driver: GitHubDriver) -> None:
    """A status from CI that webhooks start (not Actions) shows CI is running: the gate waits for its names."""
    srv.set_status("abc", "ci/circleci", "pending")
    srv.set_check_run("abc", "tests", status="in_progress")
    result = driver.checks_gate(gate("tests"), "abc", timeout_s=0.6, poll_s=0.05, pushed_with_job_token=True,
                                no_ci_after_s=0.1)
    assert result.needs_human is None and result.timed_out
