"""Every session publishes its verdict as the check run `plan-runner / <plan>` on the work branch's head (issue 45),
one a branch rule can require: `success` only for Advanced or Progress with every required gate green, the gates
with their exit codes and the outcome in its output; `action_required` with the park issue for a plan that waits for
a human; the finished pull request's head carries one too. The test server stores check runs as GitHub's
`POST .../check-runs` takes them (and refuses what GitHub refuses: an unknown commit, a text over 65,535 characters,
`action_required` without a `details_url`)."""

from __future__ import annotations

import pytest

from runner.adapters import clock
from tests.e2e_act import world as w
from tests.integration.test_action_modes import Jobs
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration
NAME = "plan-runner / greeter"


@pytest.fixture(autouse=True)
def _noon(monkeypatch):
    monkeypatch.setenv(clock.ENV, "12:00")


def head(jobs: Jobs) -> str:
    sha = w.ref(jobs.bare, "plan-runner/greeter")
    assert sha is not None
    return sha


def test_each_session_leaves_its_verdict_on_the_work_branch_and_the_finished_pull_request(tmp_path, monkeypatch):
    with GitHubServer() as srv:
        srv.actions_can_create_prs = True
        jobs = Jobs(tmp_path, srv, script=w.SCRIPT.replace("reset_in: 2,", "reset_in: 600,"))
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        (check,) = srv.checks_on(head(jobs), NAME)
        assert check["conclusion"] == "success" and check["status"] == "completed"
        assert check["actor"] == "github-actions[bot]"  # the job's token, with the workflow's `checks: write`
        output = check["output"]
        assert output["title"] == "Advanced: session 1, checkpoint 1.1; required gates green"
        assert "| `tests` | yes | exit 0 | ✅ |" in output["summary"] and "**Checked:** `1.1`" in output["summary"]
        assert "**Outcome:** `Advanced`" in output["summary"] and "### Why" in output["text"]
        assert f"Check run [`{NAME}`]({srv.html_url}/runs/{check['id']}): **success** on `{head(jobs)[:12]}`" in summary

        rc, out, outputs, summary, _ = jobs.session()  # a rate limit: not a failure of the work, never green either
        assert outputs["outcome"] == "LimitBackoff", out
        assert [c["conclusion"] for c in srv.checks_on(head(jobs), NAME)] == ["success", "failure"]
        monkeypatch.setenv(clock.ENV, "12:45")  # past the reset (10 min on, plus the time the jobs took)
        jobs.session()  # 1.2
        rc, out, outputs, summary, _ = jobs.session()  # the agent asks a human
        assert outputs["outcome"] == "NeedsHuman", out
        parked = srv.checks_on(head(jobs), NAME)[-1]
        assert parked["conclusion"] == "action_required" and parked["details_url"] == outputs["issue-url"]
        (issue,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
        cid = srv.add_comment(issue["number"], "/plan-runner resume\nEnglish.", user="maintainer")
        jobs.run("issue_comment", w.comment_event(issue, "/plan-runner resume\nEnglish.", "maintainer", cid))
        rc, out, outputs, summary, _ = jobs.session()  # 2.1: finished, the pull request ready for review
        assert rc == 0 and outputs["pull-request-url"], out
        (pull,) = [i for i in srv.issues.values() if i.get("pull")]
        last = srv.checks_on(head(jobs), NAME)[-1]  # the pull request's head: its branch's last commit
        assert pull["pull"]["head"] == "plan-runner/greeter" and last["conclusion"] == "success"
        assert last["output"]["title"].startswith("Advanced: finished after session 5, checkpoint 2.1")


def test_a_red_required_gate_is_a_failing_check_with_its_exit_code(tmp_path):
    script = "sessions:\n  - - write: {path: a.txt, content: x}\n    - commit: add a\n"
    plan = w.PLAN.replace("run: python3 -m unittest -q", "run: test ! -e a.txt || exit 3")  # red by the agent's work
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=script, plan=plan)
        rc, out, outputs, summary, _ = jobs.session()
        assert outputs["outcome"] == "GatesRed", out
        (check,) = srv.checks_on(head(jobs), NAME)
        assert check["conclusion"] == "failure"
        assert check["output"]["title"] == "GatesRed: session 1, checkpoint 1.1; required gate red: tests"
        assert "| `tests` | yes | exit 3 | ❌ |" in check["output"]["summary"]


def test_a_workflow_without_checks_write_warns_with_the_fix_and_the_session_stands(tmp_path):
    with GitHubServer() as srv:
        srv.token_scopes = {"contents": "write", "issues": "write", "pull-requests": "write", "actions": "write"}
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        assert srv.check_runs == {}
        assert "::warning title=plan-runner check run::could not publish the check run plan-runner / greeter" in out
        assert "add `checks: write` to the session job's `permissions:`" in summary
