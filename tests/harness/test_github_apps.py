"""The test GitHub server's Apps and git over smart HTTP follow GitHub's documented rules (tests/servers/github_apps.py):
the JWT (RS256 with the App's key, `iss`, `exp` at most ten minutes ahead and not past), tokens that stop working
after their hour (401 on the API and on git), a token that may read but not push (403)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request

import jwt
import pytest

from tests.e2e_act import world as w
from tests.integration.test_action_app_token import APP_ID, PRIVATE, PUBLIC, keypair
from tests.servers.github import GitHubServer
from tests.servers.github_apps import add_app


def call(srv: GitHubServer, method: str, path: str, auth: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(srv.url + path, method=method, headers={"Authorization": auth},
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.loads(refused.read() or b"{}")


def app_jwt(key: str = PRIVATE, **claims) -> str:
    now = int(time.time())
    return jwt.encode({"iat": now - 60, "exp": now + 300, "iss": str(APP_ID), **claims}, key, algorithm="RS256")


def test_the_jwt_is_checked_as_github_documents_it() -> None:
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        where = f"/repos/{srv.owner}/{srv.repo}/installation"
        status, installation = call(srv, "GET", where, f"Bearer {app_jwt()}")
        assert status == 200 and installation["id"] == app.installation_id
        other, _ = keypair()
        refusals = {
            "another key": f"Bearer {app_jwt(other)}",
            "too long": f"Bearer {app_jwt(exp=int(time.time()) + 3600)}",
            "expired": f"Bearer {app_jwt(iat=int(time.time()) - 900, exp=int(time.time()) - 300)}",
            "not a jwt": "Bearer nonsense",
            "a token": f"token {srv.token}",
        }
        for why, auth in refusals.items():
            status, body = call(srv, "GET", where, auth)
            assert status == 401 and body["message"], why
        status, body = call(srv, "GET", where, f"Bearer {app_jwt(iss='999')}")
        assert status == 401
        mint = f"/app/installations/{app.installation_id}/access_tokens"
        status, token = call(srv, "POST", mint, f"Bearer {app_jwt()}", {"repositories": [srv.repo]})
        assert status == 201 and token["token"].startswith("ghs_") and token["expires_at"].endswith("Z")
        assert call(srv, "POST", mint, f"Bearer {app_jwt()}", {"repositories": ["elsewhere"]})[0] == 422
        assert call(srv, "POST", mint, f"Bearer {app_jwt()}", {"permissions": {"administration": "write"}})[0] == 422
        assert call(srv, "POST", "/app/installations/1/access_tokens", f"Bearer {app_jwt()}", {})[0] == 404
        # the token works on the API until its hour is over, then 401
        assert call(srv, "GET", f"/repos/{srv.owner}/{srv.repo}", f"token {token['token']}")[0] == 200
        srv.token_expiry[token["token"]] = time.time() - 1
        assert call(srv, "GET", f"/repos/{srv.owner}/{srv.repo}", f"token {token['token']}")[0] == 401


@pytest.mark.parametrize("case", ["expired", "unknown", "read-only", "live"])
def test_git_over_smart_http_takes_only_a_live_token_that_may_push(tmp_path, case) -> None:
    import base64

    with GitHubServer() as srv:
        bare = w.make_remote(tmp_path, {"a.txt": "a\n"})
        srv.git_bare = bare
        token = {"unknown": "ghs_nobody"}.get(case, "ghs_pusher_token")
        srv.tokens["ghs_pusher_token"] = "pusher[bot]"
        if case == "expired":
            srv.token_expiry["ghs_pusher_token"] = time.time() - 1
        if case == "read-only":
            srv.git_read_only.add("pusher[bot]")
        clone = tmp_path / "clone"
        w.git(tmp_path, "clone", "-q", str(bare), str(clone))
        w.git(clone, "commit", "-q", "--allow-empty", "-m", "more")
        header = "AUTHORIZATION: basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
        pushed = subprocess.run(["git", "-c", f"http.{srv.url}/.extraheader={header}", "push",
                                 f"{srv.url}/{srv.owner}/{srv.repo}.git", "HEAD:refs/heads/more"], cwd=clone,
                                capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "GIT_TERMINAL_PROMPT": "0",
                                                                      "HOME": str(tmp_path)})
        if case == "live":
            assert pushed.returncode == 0, pushed.stderr
            assert w.ref(bare, "more") == w.git(clone, "rev-parse", "HEAD")
        else:
            assert pushed.returncode != 0 and w.ref(bare, "more") is None
            from runner.adapters.git.invoke import AUTH_REFUSED

            assert AUTH_REFUSED.search(pushed.stderr), pushed.stderr  # plan-runner knows it for a refusal
