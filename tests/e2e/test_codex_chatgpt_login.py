"""The real Codex CLI on a ChatGPT login, through `plan-runner run` end to end: the login the `codex-auth-json`
input carries (CODEX_AUTH_JSON) is the agent's own CODEX_HOME/auth.json, and Codex's model turns reach the
ChatGPT backend with the login's access token and account id, never an API key (none is set).

Codex with a ChatGPT login ignores OPENAI_BASE_URL and asks the ChatGPT backend (`chatgpt_base_url`, HTTPS
only), so the backend's stand-in speaks TLS with a CA of its own, which Codex trusts through its own
CODEX_CA_CERTIFICATE (tests/servers/chatgpt.py); the plan points `chatgpt_base_url` at it through
`agent.args`. A login is refreshed first at CODEX_REFRESH_TOKEN_URL_OVERRIDE
(in place of auth.openai.com) when its access token has expired; the rotated tokens, like the login's own, are in no git object afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.e2e.test_first_hour import AGENT_IDENTITY
from tests.e2e.test_first_hour_agents import PLAN, ROOT, WORK, codex_exe, dumped_names
from tests.reliability_world import all_git_text, fold_ledger, git
from tests.servers import responses as r
from tests.servers.chatgpt import ACCOUNT_ID, REFRESHED_REFRESH_TOKEN, ChatGPTServer, login

pytestmark = pytest.mark.e2e


def _repo(tmp_path: Path, base_url: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    plan = PLAN.format(backend="codex", executable=codex_exe(), model="gpt-5-codex").replace(
        "  stall_minutes: 60s\n", "  stall_minutes: 60s\n  args: [\"-c\", " + json.dumps(f"chatgpt_base_url={json.dumps(base_url)}") + "]\n")
    (repo / "plans" / "hello.md").write_text(plan)
    (repo / "README.md").write_text("hello\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Maintainer")
    git(repo, "config", "user.email", "m@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def _run(repo: Path, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "ANTHROPIC_", "OPENAI_", "CODEX_"))}
    proc = subprocess.run([sys.executable, "-m", "runner", "run", "plans/hello.md"], cwd=repo, capture_output=True,
                          text=True, timeout=400, env={**base, "PYTHONPATH": str(ROOT), "HOME": str(home),
                                                       **AGENT_IDENTITY, **env})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_codex_on_a_chatgpt_login_through_a_whole_run(tmp_path) -> None:
    """A login whose access token expired: refreshed first, then used (an unexpired one runs under act:
    tests/e2e/test_act_auth.py::test_a_chatgpt_login_for_codex_through_act)."""
    refreshed = (datetime.now(timezone.utc) - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    account = login(last_refresh=refreshed, valid_s=-3600)
    dump = tmp_path / "codex-env"
    with ChatGPTServer(account) as srv:
        srv.enqueue(r.reply("Working.", r.shell(WORK.format(dump=dump))), r.reply("Done: hello.txt is committed."))
        repo = _repo(tmp_path, srv.url)
        proc = _run(repo, tmp_path, {"CODEX_AUTH_JSON": json.dumps(account), "CODEX_CA_CERTIFICATE": str(srv.ca_file),
                                     "CODEX_REFRESH_TOKEN_URL_OVERRIDE": srv.url.replace("/backend-api/", "/oauth/token")})
        sent, calls, fresh = list(srv.requests), srv.model_requests, srv.refreshed
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state = fold_ledger(repo, "hello")
    assert state.finished and state.last.backend == "codex"
    assert fresh is not None, "Codex did not refresh the expired login"
    assert calls and all(c.headers["authorization"] == f"Bearer {fresh['access_token']}" for c in calls)
    assert all(c.headers["chatgpt-account-id"] == ACCOUNT_ID for c in calls)
    assert any(q.path.startswith("/backend-api/wham/accounts/check") for q in sent)  # the workspace check
    (refresh,) = [q for q in sent if q.path == "/oauth/token"]
    assert refresh.json["grant_type"] == "refresh_token"
    assert refresh.json["refresh_token"] == account["tokens"]["refresh_token"]
    names = dumped_names(dump)
    assert "CODEX_AUTH_JSON" not in names and "OPENAI_API_KEY" not in names
    kept = all_git_text(repo)
    for secret in (*(account["tokens"][k] for k in ("access_token", "refresh_token", "id_token")),
                   fresh["access_token"], REFRESHED_REFRESH_TOKEN, fresh["id_token"]):
        assert secret.encode() not in kept
