"""GitHub's refusals and replies at the level of whole jobs: each refusal ends once with the right fix, a
tick never retries it, and replies act only on a maintainer's command on the plan's current park issue."""

from __future__ import annotations

import time

import pytest

from runner.adapters.render.termreport import to_terminal

from runner.adapters.github.client import COMMENT_MARKER
from runner.core.replies import HELP
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.integration.test_action_watch import finish_posts
from tests.integration.test_action_modes import Jobs, _park

pytestmark = pytest.mark.integration

ONE_STEP_PLAN = w.PLAN.split("# Greeter")[0] + """# Greeter

## Stage 1: Greeting <!-- sessions: 2 -->
- [ ] 1.1 `greet()` says hello
"""
ONE_STEP_SCRIPT = w.SCRIPT.split("  - id: s-limited")[0]


@pytest.fixture
def done(tmp_path):
    """Jobs over a plan one session finishes."""
    with GitHubServer() as srv:
        yield Jobs(tmp_path, srv, script=ONE_STEP_SCRIPT, plan=ONE_STEP_PLAN)


def pulls(jobs: Jobs) -> list[dict]:
    return [i for i in jobs.srv.issues.values() if i.get("pull")]


def park_issues(jobs: Jobs) -> list[dict]:
    return [i for i in jobs.srv.issues.values() if "plan-runner" in i["labels"]]


def park_posts(srv: GitHubServer) -> int:
    """The park issues asked for (each session job also asks for the plan's progress issue until it has one)."""
    return sum(1 for c in srv.calls if c.method == "POST" and c.path.endswith("/issues")
               and "plan-runner:park" in str(c.body))


def test_a_refused_pull_request_parks_once_with_the_setting_and_finishes_after_resume(done: Jobs) -> None:
    """A 403 on the final pull request (the default setting) parks with one issue naming the repository
    setting; ticks do not ask GitHub again; once the setting is on, `/plan-runner resume` opens the pull request."""
    rc, out, outputs, summary, _ = done.session()  # the one session: Advanced, dispatches the finish
    assert rc == 0 and outputs["outcome"] == "Advanced"
    rc, out, outputs, summary, _ = done.session()
    assert rc == 0 and outputs["outcome"] == "parked" and outputs["issue-url"]
    (issue,) = park_issues(done)
    assert "Allow GitHub Actions to create and approve pull requests" in issue["body"]
    assert "pull-requests: write` is already there" in to_terminal(issue["body"])  # the body escapes the text
    assert pulls(done) == [] and finish_posts(done.srv) == 1
    for _ in range(2):
        rc, _, outputs, summary, _ = done.run("schedule", w.schedule_event())
        assert rc == 0 and "parked, waiting for a human" in summary
    assert finish_posts(done.srv) == 1 and len(park_issues(done)) == 1
    done.srv.actions_can_create_prs = True
    cid = done.srv.add_comment(issue["number"], "/plan-runner resume", user="maintainer")
    rc, _, outputs, _, _ = done.run("issue_comment", w.comment_event(issue, "/plan-runner resume", "maintainer", cid))
    assert rc == 0 and outputs["outcome"] == "accepted"
    rc, _, outputs, _, _ = done.session()
    assert rc == 0 and outputs["pull-request-url"], outputs
    (pr,) = pulls(done)
    assert pr["pull"]["head"] == "plan-runner/greeter" and pr["state"] == "open"


def test_a_park_on_a_repository_without_issues_is_recorded_once(tmp_path) -> None:
    """Issues disabled (410): the park is recorded with the fix (turn Issues on) and the job summary as the
    report, one POST; ticks leave it alone; after Issues are on, running the workflow opens the issue."""
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        srv.has_issues = False
        _, _, _, _, _ = jobs.session()
        rc, out, outputs, summary, _ = _park_job(jobs)
        assert outputs["outcome"] == "NeedsHuman" and "Features > [x] Issues" in out + summary
        parked = [e for e in jobs.ledger() if e["type"] == "park"]
        assert len(parked) == 1 and parked[0]["issue_url"] is None and "/actions/runs/" in parked[0]["report_path"]
        assert park_posts(srv) == 1
        dispatched = len(srv.dispatches)
        rc, _, outputs, summary, _ = jobs.run("schedule", w.schedule_event())
        assert rc == 0 and park_posts(srv) == 1 and len(srv.dispatches) == dispatched
        srv.has_issues = True
        rc, _, outputs, _, _ = jobs.session()
        assert outputs["outcome"] == "parked" and outputs["issue-url"].endswith("/issues/1")
        assert len([e for e in jobs.ledger() if e["type"] == "park"]) == 2


def _park_job(jobs: Jobs):
    """Runs sessions until the plan parks on its question (the script's s-question session); a job that finds
    the plan waiting out the script's 2-second rate limit waits a moment and goes again."""
    for _ in range(12):
        result = jobs.session()
        if result[2]["outcome"] == "NeedsHuman":
            return result
        if result[2]["outcome"] == "waiting":
            time.sleep(1)
    raise AssertionError("the plan never parked")


def test_plan_runners_own_help_comment_is_never_a_command(jobs_with_person_token) -> None:
    """With a person's token plan-runner's comments look human; its marker keeps its help text from resuming."""
    jobs = jobs_with_person_token
    issue = _park(jobs)
    before = jobs.ledger()
    body = f"@maintainer: unknown command.\n\n{HELP}\n{COMMENT_MARKER}"
    cid = jobs.srv.add_comment(issue["number"], body, user="maintainer")
    rc, _, outputs, _, _ = jobs.run("issue_comment", w.comment_event(issue, body, "maintainer", cid))
    assert rc == 0 and outputs["outcome"] == "ignored" and jobs.ledger() == before and jobs.srv.dispatches == []


@pytest.fixture
def jobs_with_person_token(tmp_path):
    with GitHubServer(login="maintainer") as srv:
        yield Jobs(tmp_path, srv)


def test_a_custom_role_with_write_base_may_steer(jobs) -> None:
    """A maintainer whose custom role is based on `write` is accepted (GitHub's `permission` is read)."""
    jobs.srv.add_custom_role("plan-shepherd", "write")
    jobs.srv.set_permission("shepherd", "plan-shepherd")
    issue = _park(jobs)
    cid = jobs.srv.add_comment(issue["number"], "/plan-runner resume", user="shepherd")
    rc, _, outputs, _, _ = jobs.run("issue_comment", w.comment_event(issue, "/plan-runner resume", "shepherd", cid))
    assert rc == 0 and outputs["outcome"] == "accepted"


def test_a_command_on_an_older_park_issue_changes_nothing(jobs) -> None:
    """A maintainer's command on a plan's earlier (closed) park issue does not steer the current park."""
    issue = _park(jobs)
    old = jobs.srv.add_issue("plan-runner: greeter needs a human", issue["body"], labels=("plan-runner",),
                             state="closed")
    before = jobs.ledger()
    cid = jobs.srv.add_comment(old, "/plan-runner skip", user="maintainer")
    rc, _, outputs, _, _ = jobs.run("issue_comment", w.comment_event(jobs.srv.issues[old], "/plan-runner skip",
                                                                     "maintainer", cid))
    assert rc == 0 and outputs["outcome"] == "ignored"
    assert jobs.ledger() == before and jobs.srv.dispatches == [] and issue["state"] == "open"
    assert f"/issues/{issue['number']}" in jobs.srv.comments_on(old)[-1]["body"]


@pytest.fixture
def jobs(tmp_path):
    with GitHubServer() as srv:
        yield Jobs(tmp_path, srv)



CHECKS_PLAN = ONE_STEP_PLAN.replace("""gates:
  - name: tests
    run: python3 -m unittest -q
    timeout_minutes: 1m
""", """gates:
  - name: tests
    run: python3 -m unittest -q
    timeout_minutes: 1m
  - name: ci
    checks: [build]
    timeout_minutes: 2s
""")


def test_a_checks_gate_after_a_job_token_push_parks_needs_human_blaming_nobody(tmp_path) -> None:
    """With the default token no workflow starts for the pushed work branch: the `checks:` gate is not re-run
    or counted red; the session is NeedsHuman, blamed on nobody, and the park issue names `push-token`."""
    assert "checks: [build]" in CHECKS_PLAN
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=ONE_STEP_SCRIPT, plan=CHECKS_PLAN)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "NeedsHuman", outputs
        (record,) = [e for e in jobs.ledger() if e["type"] == "session"]
        assert record["blame"] == "none" and record["rule"] == 1
        (issue,) = park_issues(jobs)
        assert "push-token" in to_terminal(issue["body"]) and "GitHub starts no workflow" in to_terminal(issue["body"])
        assert srv.count("GET", r".*/check-runs") <= 3  # stopped early, never re-run
