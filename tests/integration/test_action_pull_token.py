"""The finished plan's pull request and its CI: GitHub starts no `pull_request` workflow for what the job's
GITHUB_TOKEN does, and its "Allow GitHub Actions to create and approve pull requests" setting binds only that
token. With a `push-token`, plan-runner opens (and updates) the pull request with it; without one it says plainly
that CI will not run. The test server records which token made each call."""

from __future__ import annotations

import pytest

from tests.e2e_act import world as w
from tests.servers.github import BOT, GitHubServer
from tests.integration.test_action_modes import Jobs
from tests.integration.test_action_refusals import ONE_STEP_PLAN, ONE_STEP_SCRIPT

pytestmark = pytest.mark.integration
PAT = "github_pat_test_push_token_0123456789"


def finish(jobs: Jobs, **env: str):
    rc, _, outputs, _, _ = jobs.session(**env)  # the one session: Advanced, dispatches the finish
    assert rc == 0 and outputs["outcome"] == "Advanced", outputs
    return jobs.session(**env)


def test_a_push_token_opens_the_pull_request_so_its_ci_runs_even_with_the_setting_off(tmp_path) -> None:
    """`push-token` given, the repository setting off (GitHub's default): the pull request is listed and opened
    with the push-token (its actor, not the Actions bot), not refused, and the job does not warn about CI. A
    second finish updates the same pull request, with the push-token again."""
    with GitHubServer() as srv:
        srv.tokens[PAT] = "octo-maintainer"
        jobs = Jobs(tmp_path, srv, script=ONE_STEP_SCRIPT, plan=ONE_STEP_PLAN)
        rc, out, outputs, summary, _ = finish(jobs, PLAN_RUNNER_PUSH_TOKEN=PAT)
        assert rc == 0 and outputs["pull-request-url"], out
        (pr,) = [i for i in srv.issues.values() if i.get("pull")]
        assert pr["user"] == "octo-maintainer"
        pull_calls = [c for c in srv.calls if c.path.endswith("/pulls")]
        assert pull_calls and {c.actor for c in pull_calls} == {"octo-maintainer"}, pull_calls
        assert [c.status for c in pull_calls if c.method == "POST"] == [201]
        assert "No CI on this pull request" not in summary and "no CI" not in out


def test_without_a_push_token_the_job_says_the_pull_request_gets_no_ci(tmp_path) -> None:
    """The job's token opens the pull request (the setting on): the summary and a warning say GitHub starts no
    CI for it, and how to fix that."""
    with GitHubServer() as srv:
        srv.actions_can_create_prs = True
        jobs = Jobs(tmp_path, srv, script=ONE_STEP_SCRIPT, plan=ONE_STEP_PLAN)
        rc, out, outputs, summary, _ = finish(jobs)
        assert rc == 0 and outputs["pull-request-url"], out
        assert {c.actor for c in srv.calls if c.path.endswith("/pulls")} == {BOT}
        assert "No CI on this pull request yet" in summary and "push-token" in summary
        assert "::warning title=plan-runner%3A no CI on the pull request::" in out, out
