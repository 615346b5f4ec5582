"""Each way of paying that changes the workflow `plan-runner init --auth NAME` writes, run under act from the files
init writes, with the real Claude Code CLI ($PLAN_RUNNER_CLAUDE) as the agent:

* `oauth-token`: the `claude-code-oauth-token` input (a Claude subscription) reaches the Messages API as the
  CLI's bearer token;
* `bedrock`: `id-token: write` and configure-aws-credentials at its pinned commit, mapped to a stand-in that makes
  the real action's requests (tests/e2e_act/aws-credentials-standin): the job's OIDC token for the role's
  credentials; the CLI signs Bedrock's invoke-with-response-stream with them;
* `vertex`: google-github-actions/auth at its pinned commit, mapped to its stand-in (tests/e2e_act/
  google-auth-standin): the Workload Identity Federation file; plan-runner gives the agent its own copy (never
  the request token), and the CLI exchanges the token, impersonates the service account and calls Vertex.

* `api-key`: the `anthropic-api-key` input as the CLI's `x-api-key`;
* `codex-api-key`: the `openai-api-key` input as the real Codex CLI's bearer on the Responses API;
* `codex-login`: the `codex-auth-json` input (a ChatGPT login) as the real Codex CLI's own auth.json, its turns on
  the ChatGPT backend's TLS stand-in (tests/servers/chatgpt.py) with the login's token and account.

The CLIs are already in plan-runner's install directory, as on a runner that installed them before
(test_act_claude_code.py runs the npm install itself), and so is plan-runner after the worker's first such run
(one install directory per xdist worker for the act worlds that test no install, `shared_install_root`;
test_act_e2e.py installs it cold). Offline: only 127.0.0.1. One act run each, 4-16 s.
"""

from __future__ import annotations

import os
import shutil
import time
from urllib.parse import urlsplit
from pathlib import Path

import pytest

from runner.drivers.actions.install import CLIS
from runner.adapters.init import AUTHS, AWS_CREDENTIALS_ACTION, GOOGLE_AUTH_ACTION
from tests.e2e_act import world as w
from tests.servers import messages as m
from tests.servers import responses as r
from tests.servers.chatgpt import ACCOUNT_ID, ChatGPTServer, login
from tests.servers.clouds import IMPERSONATED_TOKEN, OIDC_JWT, REQUEST_TOKEN, STS_CREDENTIALS, CloudServer
from tests.servers.github import GitHubServer
from tests.e2e.test_act_claude_code import REPO, SCENARIO
from tests.e2e.test_act_e2e import API_KEY, ROOT, ActWorld, shared_install_root  # noqa: F401 (a fixture)
from tests.e2e.test_first_hour_agents import codex_exe

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(300)]
PLAN = "plans/example.md"
OAUTH_TOKEN = "sk-ant-oat01-act-subscription-token-0123456789"
ROLE = "arn:aws:iam::123456789012:role/plan-runner"
PROVIDER = "projects/123/locations/global/workloadIdentityPools/gh/providers/repo"
ACCOUNT = "agent@my-project.iam.gserviceaccount.com"
OPENAI_KEY = "sk-proj-act-openai-key-0123456789"
LOGIN = login(last_refresh="2026-12-01T00:00:00Z")
WORK = " && ".join(SCENARIO["1.1"][:-1])  # 1.1 of init's example plan: ARCHITECTURE.md, committed and ticked


def _pinned(action: str) -> str:
    return action.split(" #")[0]


def _real_cli(world: ActWorld, backend: str) -> Path:
    """The real CLI where the action's install puts it (plan-runner's root-owned install directory)."""
    real = os.environ.get("PLAN_RUNNER_CLAUDE") if backend == "claude-code" else codex_exe()
    if not real:
        pytest.skip("PLAN_RUNNER_CLAUDE is not set (scripts/test sets it)")
    cli = CLIS[backend]
    folder = world.image.install_root / cli.key / "node_modules" / ".bin"
    folder.mkdir(parents=True, exist_ok=True)  # the install directory is shared by the worker's worlds
    for p in (world.image.install_root, *folder.relative_to(world.image.install_root).parents):
        (world.image.install_root / p).chmod(0o755)
    if not (folder / cli.binary).is_symlink():
        (folder / cli.binary).symlink_to(Path(real).resolve())
    return folder / cli.binary


def _oidc(srv: CloudServer) -> dict[str, str]:
    """What GitHub gives a job with `id-token: write` (act gives none)."""
    return {"ACTIONS_ID_TOKEN_REQUEST_URL": f"{srv.url}/oidc?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN}


def _script(srv) -> None:
    if isinstance(srv, r.ResponsesServer):
        srv.default = r.reply("Done.")
        srv.enqueue(r.reply("Working.", r.shell(WORK)), r.reply("Done: ARCHITECTURE.md is committed, 1.1 ticked."))
        return
    srv.default = m.reply("Done.")
    srv.enqueue(m.reply("Working.", m.tool_use("Bash", {"command": WORK, "description": "work on 1.1"})),
                m.reply("Done: ARCHITECTURE.md is committed and 1.1 is ticked."))


def _run(tmp_path: Path, install_root: Path, auth: str, env: dict[str, str], act_args: tuple[str, ...],
         plan_args: str = "", network: str = "") -> tuple[ActWorld, float]:
    """One act run of init's workflow and example plan for `auth` (`plan_args`: an `agent.args` line the test
    adds and `network`: a `network.agent` entry, the only changes to init's plan; `install_root`: plan-runner's
    install directory, shared by the worker's worlds: the first run installs plan-runner, the others reuse it as a
    runner's later jobs do)."""
    listed = f'network:\n  agent: ["{network}"]\n' if network else ""
    assert shutil.which("act"), "act is not installed"
    backend = AUTHS[auth].backend
    with GitHubServer() as gh:
        world = ActWorld(tmp_path, gh, files=REPO, init_plan=True, plan_id="example", auth=auth, env=env,
                         act_args=act_args, install_root=install_root, plan_edit=lambda text: text.replace(
                             f"\nagent:\n  backend: {backend}\n", f"\n{listed}agent:\n  backend: {backend}\n{plan_args}"))
        workflow = (world.clone / ".github/workflows/plan-runner.yml").read_text()
        assert ("id-token: write" in workflow) is (auth in ("bedrock", "vertex"))  # only for OIDC
        _real_cli(world, backend)
        started = time.monotonic()
        world.act("workflow_dispatch", w.dispatch_event(PLAN))
        spent = time.monotonic() - started
        assert world.outcomes() == ["Advanced"], world.ledger()
        (session,) = [e for e in world.ledger() if e["type"] == "session"]
        assert session["backend"] == backend and session["advanced"] == ["1.1"]
    log = "".join(p.read_text() for p in tmp_path.glob("act-*.log"))
    for secret in (OAUTH_TOKEN, REQUEST_TOKEN, OIDC_JWT, *STS_CREDENTIALS.values(), IMPERSONATED_TOKEN, API_KEY,
                   OPENAI_KEY, *LOGIN["tokens"].values()):
        assert secret not in log  # masked by act, or never printed
    assert "# Architecture" in w.git(world.bare, "show", "plan-runner/example:ARCHITECTURE.md")  # the agent's work
    return world, spent


def test_a_subscription_token_through_act(tmp_path, shared_install_root) -> None:
    with m.MessagesServer() as srv:
        _script(srv)
        world, spent = _run(tmp_path, shared_install_root,
                            "oauth-token", {"ANTHROPIC_BASE_URL": srv.url},
                            ("-s", f"CLAUDE_CODE_OAUTH_TOKEN={OAUTH_TOKEN}"))
        sent = srv.message_requests
    assert sent and all(r.headers.get("authorization") == f"Bearer {OAUTH_TOKEN}" for r in sent)
    assert not any("x-api-key" in r.headers for r in sent)
    print(f"act run (oauth-token): {spent:.1f} s")


def test_bedrock_through_act_with_the_jobs_oidc_role(tmp_path, shared_install_root) -> None:
    with CloudServer() as srv:
        _script(srv)
        world, spent = _run(tmp_path, shared_install_root,
                            "bedrock", {**_oidc(srv), "AWS_ENDPOINT_URL_STS": srv.url,
                                        "ANTHROPIC_BEDROCK_BASE_URL": srv.url}, (
            "--var", "AWS_REGION=us-east-1", "--var", f"PLAN_RUNNER_AWS_ROLE_ARN={ROLE}",
            "--local-repository", f"{_pinned(AWS_CREDENTIALS_ACTION)}={ROOT / 'tests/e2e_act/aws-credentials-standin'}"))
        sent = list(srv.requests)
    assume = [r for r in sent if r.path == "/" and b"AssumeRoleWithWebIdentity" in r.body]
    assert len(assume) == 1 and b"DurationSeconds=10800" in assume[0].body  # init's role-duration-seconds
    calls = [r for r in sent if "invoke-with-response-stream" in r.path]
    assert calls and all(r.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={STS_CREDENTIALS['AccessKeyId']}/") and "/us-east-1/bedrock/" in
        r.headers["authorization"] for r in calls)
    assert all(r.headers["x-amz-security-token"] == STS_CREDENTIALS["SessionToken"] for r in calls)
    print(f"act run (bedrock): {spent:.1f} s")


def test_vertex_through_act_with_workload_identity_federation(tmp_path, shared_install_root) -> None:
    with CloudServer() as srv:
        _script(srv)
        world, spent = _run(tmp_path, shared_install_root,
                            "vertex", {**_oidc(srv), "STANDIN_GOOGLE_API": srv.url,
                                       "ANTHROPIC_VERTEX_BASE_URL": f"{srv.url}/v1"}, (
            "--var", f"GCP_WORKLOAD_IDENTITY_PROVIDER={PROVIDER}", "--var", f"GCP_SERVICE_ACCOUNT={ACCOUNT}",
            "--var", "ANTHROPIC_VERTEX_PROJECT_ID=my-project", "--var", "CLOUD_ML_REGION=us-east5",
            "--local-repository", f"{_pinned(GOOGLE_AUTH_ACTION)}={ROOT / 'tests/e2e_act/google-auth-standin'}"))
        sent = list(srv.requests)
    oidc = [r for r in sent if r.path.startswith("/oidc")]
    assert len(oidc) == 2  # the action's own, then plan-runner's one for the agent's file
    calls = [r for r in sent if r.path.endswith(":streamRawPredict")]
    assert calls and all(r.path.startswith("/v1/projects/my-project/locations/us-east5/") for r in calls)
    assert all(r.headers["authorization"] == f"Bearer {IMPERSONATED_TOKEN}" for r in calls)
    print(f"act run (vertex): {spent:.1f} s")


def test_an_api_key_through_act(tmp_path, shared_install_root) -> None:
    with m.MessagesServer() as srv:
        _script(srv)
        world, spent = _run(tmp_path, shared_install_root,
                            "api-key", {"ANTHROPIC_BASE_URL": srv.url}, ())
        sent = srv.message_requests
    assert sent and all(r.headers.get("x-api-key") == API_KEY for r in sent)
    print(f"act run (api-key): {spent:.1f} s")


def test_an_openai_key_for_codex_through_act(tmp_path, shared_install_root) -> None:
    with r.ResponsesServer() as srv:
        _script(srv)
        world, spent = _run(tmp_path, shared_install_root,
                            "codex-api-key", {"OPENAI_BASE_URL": srv.url},
                            ("-s", f"OPENAI_API_KEY={OPENAI_KEY}"))
        sent = srv.response_requests
    assert sent and all(q.headers.get("authorization") == f"Bearer {OPENAI_KEY}" for q in sent)
    print(f"act run (codex-api-key): {spent:.1f} s")


def test_a_chatgpt_login_for_codex_through_act(tmp_path, shared_install_root) -> None:
    """The login reaches the real Codex CLI as its own auth.json; its turns go to the ChatGPT backend with the
    login's access token and account id (no API key anywhere)."""
    import json

    with ChatGPTServer(LOGIN) as srv:
        _script(srv)
        world, spent = _run(tmp_path, shared_install_root,
                            "codex-login", {"CODEX_CA_CERTIFICATE": str(srv.ca_file)},
                            ("-s", f"CODEX_AUTH_JSON={json.dumps(LOGIN)}"),
                            plan_args="  args: [\"-c\", " + json.dumps(f"chatgpt_base_url={json.dumps(srv.url)}") + "]\n",
                            network=urlsplit(srv.url).netloc)  # a backend of the user's own is listed
        calls = srv.model_requests
    assert calls and all(q.headers["authorization"] == f"Bearer {LOGIN['tokens']['access_token']}" and
                         q.headers["chatgpt-account-id"] == ACCOUNT_ID for q in calls)
    print(f"act run (codex-login): {spent:.1f} s")
