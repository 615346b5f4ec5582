"""The dispatch of the next session asks GitHub for the run it starts (`return_run_details: true`: 200 with
`workflow_run_id` and `html_url`, per the OpenAPI description of createWorkflowDispatch); the job's log and
summary name that run."""

from __future__ import annotations

import pytest

from tests.servers.github import GitHubServer
from tests.integration.test_action_modes import Jobs

pytestmark = pytest.mark.integration


def test_the_dispatch_reports_the_run_github_started(tmp_path) -> None:
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        (dispatch,) = srv.dispatches
        assert dispatch.run_id is not None
        (post,) = [c for c in srv.calls if c.method == "POST" and c.path.endswith("/dispatches")]
        assert post.body["return_run_details"] is True and post.status == 200
        url = f"https://github.com/octo-org/demo/actions/runs/{dispatch.run_id}"
        assert f"started run {dispatch.run_id} {url}" in out
        assert f"run [{dispatch.run_id}]({url})" in summary
