"""Each way users pay reaches the agent as its backend's own, and the real CLI sends what that provider expects.

The real Claude Code CLI runs against local stand-ins (tests/servers/clouds.py) speaking each provider's wire
shape: a Claude subscription token to the Messages API, Amazon Bedrock's SigV4-signed invoke-with-response-stream
(answered as an AWS event stream), Google Vertex AI's streamRawPredict after a Workload Identity Federation token
exchange. The GitHub token never reaches the agent in any of them.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from urllib.parse import parse_qs

import git
import pytest

from runner.adapters.sandbox import agent_creds
from runner.adapters.sandbox.agentenv import backend_agent_env
from runner.adapters.secrets import secret_values
from runner.adapters.sandbox.identity import Identity
from runner.backends import get_backend
from runner.backends.common.base import SessionRequest
from runner.core.backend_spec import BACKENDS
from runner.core.errors import PlanRunnerError
from runner.core.evidence import ExitKind
from runner.core.plan import AgentConfig
from runner.drivers.session.preflight import credential_problems
from tests.git_repos import init_repo
from tests.servers.clouds import ACCESS_TOKEN, IMPERSONATED_TOKEN, OIDC_JWT, REQUEST_TOKEN, CloudServer
from tests.servers.messages import reply
from tests.integration.test_backend_claude_code import _claude

GITHUB_TOKEN = "ghp_never_for_the_agent_0123456789"
BASE = {"PATH": os.environ["PATH"], "GITHUB_TOKEN": GITHUB_TOKEN, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN}


@pytest.fixture
def repo(tmp_path: Path):
    r = init_repo(tmp_path / "work", {"PLAN.md": "# Demo\n\n- [ ] hello\n"}, "plan", name="A", email="a@example.com")
    yield r
    r.close()


def _run(repo: git.Repo, tmp_path: Path, env: dict[str, str], **agent) -> tuple:
    request = SessionRequest(
        workdir=Path(repo.working_tree_dir), prompt="Say hello.",
        agent=AgentConfig(backend="claude-code", executable=_claude(), stall_minutes="30s",
                          time_limit_minutes="90s", **agent),
        env={**env, "HOME": str(tmp_path / "home")}, transcript_dir=tmp_path / "transcripts")
    (tmp_path / "home").mkdir(exist_ok=True)
    return get_backend("claude-code").run(request), request


# ---- a Claude subscription token (CLAUDE_CODE_OAUTH_TOKEN) ----------------------------------------------------------


def test_a_subscription_token_reaches_the_messages_api_as_a_bearer_token(repo, tmp_path):
    """The action's `claude-code-oauth-token` input becomes CLAUDE_CODE_OAUTH_TOKEN: the preflight accepts it alone,
    and the real CLI sends it as `Authorization: Bearer`, never as an API key."""
    token = "sk-ant-oat01-stand-in-subscription-token-0123456789"
    parent = {**BASE, "CLAUDE_CODE_OAUTH_TOKEN": token}
    assert credential_problems("claude-code", parent) == []
    assert credential_problems("claude-code", BASE)[0].what == "no credentials for the claude-code backend"
    with CloudServer(default=reply("hello from the subscription")) as srv:
        env = backend_agent_env({**parent, "ANTHROPIC_BASE_URL": srv.url}, "claude-code")
        assert GITHUB_TOKEN not in env.values()
        signals, _ = _run(repo, tmp_path, env)
        sent = srv.message_requests
    assert signals.exit_kind is ExitKind.FINISHED, signals.error
    assert sent and all(r.headers.get("authorization") == f"Bearer {token}" for r in sent)
    assert not any("x-api-key" in r.headers for r in sent)
    assert all(GITHUB_TOKEN not in r.body.decode() for r in sent)


# ---- Amazon Bedrock ------------------------------------------------------------------------------------------------


AWS = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "ASIASTANDIN0123456789",
       "AWS_SECRET_ACCESS_KEY": "stand-in-secret-access-key-0123456789", "AWS_SESSION_TOKEN": "stand-in-session-token-0123"}


def test_bedrock_preflight_names_what_is_missing():
    """`provider: bedrock` needs a region and credentials; each missing one is named, with the OIDC fix."""
    problems = credential_problems("claude-code", BASE, provider="bedrock")
    assert len(problems) == 1 and "AWS_REGION or AWS_DEFAULT_REGION" in problems[0].why
    assert "configure-aws-credentials" in problems[0].fix
    assert credential_problems("claude-code", {**BASE, **AWS}, provider="bedrock") == []
    # the environment's switch alone selects it too (a local user's CLAUDE_CODE_USE_BEDROCK=1)
    assert credential_problems("claude-code", {**BASE, "CLAUDE_CODE_USE_BEDROCK": "1"})[0].what.startswith("Amazon")


def test_bedrock_the_real_cli_signs_an_invoke_stream_with_the_jobs_role(repo, tmp_path):
    """`provider: bedrock`: the agent gets CLAUDE_CODE_USE_BEDROCK=1 and the job's AWS credentials (what
    configure-aws-credentials exported), and the real CLI sends a SigV4-signed invoke-with-response-stream with
    them; the stand-in answers as Bedrock does (an AWS event stream) and the session finishes."""
    with CloudServer(default=reply("hello from bedrock")) as srv:
        parent = {**BASE, **AWS, "ANTHROPIC_BEDROCK_BASE_URL": srv.url}
        env = backend_agent_env(parent, "claude-code", provider="bedrock")
        assert env["CLAUDE_CODE_USE_BEDROCK"] == "1" and GITHUB_TOKEN not in env.values()
        assert "ACTIONS_ID_TOKEN_REQUEST_TOKEN" not in env
        signals, _ = _run(repo, tmp_path, env, provider="bedrock", model="anthropic.claude-test-v1:0")
        sent = srv.model_requests
    assert signals.exit_kind is ExitKind.FINISHED, signals.error
    assert sent and "invoke-with-response-stream" in sent[-1].path
    auth = sent[-1].headers["authorization"]
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={AWS['AWS_ACCESS_KEY_ID']}/") and "/us-east-1/bedrock/" in auth
    assert sent[-1].headers["x-amz-security-token"] == AWS["AWS_SESSION_TOKEN"]
    assert sent[-1].json["anthropic_version"] == "bedrock-2023-05-31"
    assert "hello from bedrock" in (signals.hints.final_text or "")


def test_without_bedrock_the_agent_never_sees_the_aws_credentials():
    """The job may hold AWS credentials for other steps: an API-key agent gets none of them."""
    env = backend_agent_env({**BASE, **AWS, "ANTHROPIC_API_KEY": "sk-x"}, "claude-code")
    assert not any(name.startswith("AWS_") for name in env)


# ---- Google Vertex AI through Workload Identity Federation ---------------------------------------------------------


def _wif_file(tmp_path: Path, url: str) -> Path:
    """The credentials file google-github-actions/auth writes (src/client/workload_identity_federation.ts) with a
    `service_account` (as `init --auth vertex` asks): the federated token is exchanged for the account's."""
    path = tmp_path / "job" / "gha-creds-0123.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "type": "external_account", "audience": "//iam.googleapis.com/projects/1/locations/global/"
        "workloadIdentityPools/p/providers/gh", "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": f"{url}/sts/token",
        "credential_source": {"url": f"{url}/oidc?audience=https%3A%2F%2Fiam.googleapis.com%2Fx",
                              "headers": {"Authorization": f"Bearer {REQUEST_TOKEN}"},
                              "format": {"type": "json", "subject_token_field_name": "value"}},
        "service_account_impersonation_url": f"{url}/iamcredentials/v1/projects/-/serviceAccounts/"
                                             "agent@my-project.iam.gserviceaccount.com:generateAccessToken"}))
    path.chmod(0o600)
    return path


def test_the_agents_google_file_never_holds_the_actions_request_token(tmp_path):
    """The job's file names the Actions token endpoint with the job's request token (which would let the agent
    mint the job's OIDC tokens for any audience): the agent's copy holds one token plan-runner fetched, in files
    0600 in a folder 0700; a file that still holds the request token is refused."""
    with CloudServer() as srv:
        job_file = _wif_file(tmp_path, srv.url)
        parent = {**BASE, "CLAUDE_CODE_USE_VERTEX": "1", "GOOGLE_APPLICATION_CREDENTIALS": str(job_file)}
        folder = tmp_path / "area" / "creds"
        folder.parent.mkdir()
        placed = agent_creds.place(BACKENDS["claude-code"], "vertex", parent,
                                   backend_agent_env(parent, "claude-code", provider="vertex"), folder, Identity())
    agent_file = Path(placed.env["GOOGLE_APPLICATION_CREDENTIALS"])
    assert agent_file.parent == folder and stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert REQUEST_TOKEN not in path.read_text()
    data = json.loads(agent_file.read_text())
    assert data["credential_source"] == {"file": str(folder / agent_creds.GOOGLE_SUBJECT_TOKEN),
                                         "format": {"type": "text"}}
    assert (folder / agent_creds.GOOGLE_SUBJECT_TOKEN).read_text() == OIDC_JWT
    assert OIDC_JWT in placed.secrets  # redacted wherever plan-runner stores or prints
    leaky = tmp_path / "leaky.json"
    leaky.write_text(json.dumps({"type": "authorized_user", "note": REQUEST_TOKEN}))
    with pytest.raises(PlanRunnerError) as err:
        agent_creds.google_credentials(str(leaky), parent, folder)
    assert "ACTIONS_ID_TOKEN_REQUEST_TOKEN" in err.value.render()


def test_vertex_the_real_cli_exchanges_the_oidc_token_and_calls_stream_raw_predict(repo, tmp_path):
    """`provider: vertex`: with the agent's own credentials file the real CLI exchanges the OIDC token at the STS
    endpoint for a federated token, that for the service account's access token (generateAccessToken), and calls
    streamRawPredict with it, for the project and region the job set."""
    with CloudServer(default=reply("hello from vertex")) as srv:
        parent = {**BASE, "GOOGLE_APPLICATION_CREDENTIALS": str(_wif_file(tmp_path, srv.url)),
                  "ANTHROPIC_VERTEX_PROJECT_ID": "my-project", "CLOUD_ML_REGION": "us-east5",
                  "ANTHROPIC_VERTEX_BASE_URL": f"{srv.url}/v1"}
        assert credential_problems("claude-code", parent, provider="vertex") == []
        env = backend_agent_env(parent, "claude-code", provider="vertex")
        folder = tmp_path / "area" / "creds"
        folder.parent.mkdir()
        placed = agent_creds.place(BACKENDS["claude-code"], "vertex", parent, env, folder, Identity())
        env = {**env, **placed.env}
        assert GITHUB_TOKEN not in env.values() and "ACTIONS_ID_TOKEN_REQUEST_TOKEN" not in env
        signals, _ = _run(repo, tmp_path, env, provider="vertex", model="claude-test-1")
        sts = [r for r in srv.requests if r.path.startswith("/sts/token")]
        sent = srv.model_requests
    assert signals.exit_kind is ExitKind.FINISHED, signals.error
    assert sts and parse_qs(sts[0].body.decode())["subject_token"] == [OIDC_JWT]
    assert sent and sent[-1].path.startswith("/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/")
    assert sent[-1].path.endswith(":streamRawPredict")
    impersonated = [r for r in srv.requests if r.path.endswith(":generateAccessToken")]
    assert impersonated and impersonated[0].headers["authorization"] == f"Bearer {ACCESS_TOKEN}"
    assert sent[-1].headers["authorization"] == f"Bearer {IMPERSONATED_TOKEN}"
    assert "hello from vertex" in (signals.hints.final_text or "")


def test_vertex_preflight_names_a_missing_project_and_file(tmp_path):
    problems = credential_problems("claude-code", {**BASE, "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no")},
                                   provider="vertex")
    text = " ".join(p.why for p in problems)
    assert "ANTHROPIC_VERTEX_PROJECT_ID" in text and "CLOUD_ML_REGION" in text and "does not exist" in text


# ---- Codex: an API key, or a ChatGPT login file --------------------------------------------------------------------


LOGIN = json.dumps({"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "last_refresh": "2026-11-30T00:00:00Z",
                    "tokens": {"id_token": "eyJ.stand-in-id-token.0123456789", "access_token":
                               "eyJ.stand-in-access-token.0123456789", "refresh_token": "rt_stand-in-refresh-0123456789",
                               "account_id": "acct-0123"}})


def test_codex_preflight_takes_a_key_or_a_login():
    assert credential_problems("codex", {**BASE, "OPENAI_API_KEY": "sk-x"}) == []
    assert credential_problems("codex", {**BASE, "CODEX_AUTH_JSON": LOGIN}) == []
    problem = credential_problems("codex", BASE)[0]
    assert "OPENAI_API_KEY" in problem.why and "codex-auth-json" in problem.fix


def test_a_codex_login_is_the_agents_file_alone_and_every_token_is_a_secret(tmp_path):
    """The `codex-auth-json` input becomes auth.json in the agent's credentials folder (0600), the variable holding
    it leaves the agent's environment, and each token in it is redacted like a key."""
    parent = {**BASE, "CODEX_AUTH_JSON": LOGIN}
    env = backend_agent_env(parent, "codex")
    folder = tmp_path / "creds"
    placed = agent_creds.place(BACKENDS["codex"], None, parent, env, folder, Identity())
    assert placed.files == {"auth.json": folder / "auth.json"} and "CODEX_AUTH_JSON" in placed.drop
    assert (folder / "auth.json").read_text() == LOGIN and stat.S_IMODE((folder / "auth.json").stat().st_mode) == 0o600
    for token in ("rt_stand-in-refresh-0123456789", "eyJ.stand-in-access-token.0123456789"):
        assert token in placed.secrets and token in secret_values(parent)


def _jwt(claims: dict) -> str:
    import base64

    def part(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.c2ln"


def test_the_real_codex_cli_runs_with_the_login_linked_and_the_login_is_never_saved(tmp_path):
    """A ChatGPT login is linked into the agent's own CODEX_HOME (the real Codex CLI runs with it there; the key
    drives this run, as the ChatGPT backend's stand-in would need HTTPS); after the session the login is gone from
    what plan-runner keeps (the transcripts and the agent's saved state), and its tokens are secrets."""
    from runner.backends.codex.backend import CodexBackend
    from tests.servers.responses import ResponsesServer, reply as codex_reply

    exe = os.environ.get("PLAN_RUNNER_CODEX") or _codex_exe()
    parent = {**BASE, "CODEX_AUTH_JSON": LOGIN}
    folder = tmp_path / "creds"
    workdir = tmp_path / "repo"
    init_repo(workdir, {"README.md": "hi\n"}, "init", name="A", email="a@example.com").close()
    (tmp_path / "home").mkdir()
    seen: list[bool] = []
    with ResponsesServer(default=codex_reply("hello")) as srv:
        parent = {**parent, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.url}
        env = backend_agent_env(parent, "codex")
        placed = agent_creds.place(BACKENDS["codex"], None, parent, env, folder, Identity())
        for name in placed.drop:
            env.pop(name, None)
        assert "CODEX_AUTH_JSON" not in env
        request = SessionRequest(
            workdir=workdir, prompt="Say hello.",
            agent=AgentConfig(backend="codex", executable=exe, model="gpt-5-codex", stall_minutes="60s",
                              time_limit_minutes="120s"),
            env={**env, "HOME": str(tmp_path / "home")}, transcript_dir=tmp_path / "transcripts",
            credential_files=placed.files,
            on_event=lambda e, d: seen.append((tmp_path / "transcripts" / "codex-home" / "auth.json").is_symlink()))
        signals = CodexBackend().run(request)
    assert signals.exit_kind is ExitKind.FINISHED, signals.error
    assert seen and all(seen)  # while the agent ran, its CODEX_HOME held the login
    kept = [p for p in (tmp_path / "transcripts").rglob("*")]
    assert kept and not any(p.name == "auth.json" for p in kept)
    assert not any("rt_stand-in-refresh" in p.read_text(errors="replace") for p in kept if p.is_file())


def _codex_exe() -> str:
    import subprocess

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(["bash", str(root / "scripts" / "install-codex.sh")], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"cannot install the Codex CLI:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def test_the_agents_credential_files_are_in_its_room_alone(tmp_path):
    """Isolated: the folder (0700) and its files (0600) are plan-runner's uid's, which the room runs as; the agent's
    room shows it (its area), another session's room does not (its mount namespace holds no path to it); the folder
    goes with the session."""
    from runner.adapters.sandbox import identity as sandbox
    from runner.adapters.sandbox import proc

    folder = tmp_path / "creds"
    parent = {**BASE, "CODEX_AUTH_JSON": LOGIN}
    with sandbox.leased("user") as agent, sandbox.leased("user") as other:
        placed = agent_creds.place(BACKENDS["codex"], None, parent, backend_agent_env(parent, "codex"), folder, agent)
        login = placed.files["auth.json"]
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(login.stat().st_mode) == 0o600
        agent.room.grant(folder)
        env = {"PATH": "/usr/bin:/bin"}
        mine = proc.run(["cat", str(login)], cwd="/", env=env, time_limit_s=30, identity=agent)
        theirs = proc.run(["cat", str(login)], cwd="/", env=env, time_limit_s=30, identity=other)
        assert mine.returncode == 0 and theirs.returncode != 0
        agent_creds.remove(folder, agent)
        assert not folder.exists()


def test_a_codex_login_through_a_whole_run_reaches_the_agent_and_nothing_that_is_kept(tmp_path):
    """`plan-runner run` on a Codex plan with CODEX_AUTH_JSON set (what the `codex-auth-json` input gives): the
    agent's CODEX_HOME holds the login while it works, the variable itself never reaches its shell, and no token of
    the login is in any git object afterwards (ledger, transcripts, the agent's saved state, the work branch)."""
    from tests.e2e import test_first_hour_agents as fha
    from tests.reliability_world import all_git_text
    from tests.servers import responses as r

    repo = fha.make_repo(tmp_path, "codex")
    dump = tmp_path / "codex-env"
    work = fha.WORK.format(dump=dump) + f" && cat \"$CODEX_HOME/auth.json\" > {tmp_path / 'login-seen'}"
    with r.ResponsesServer() as srv:
        srv.enqueue(r.reply("Working.", r.shell(work)), r.reply("Done: hello.txt is committed."))
        proc = fha.cli(repo, tmp_path, "run", "plans/hello.md",
                       base_urls={"OPENAI_BASE_URL": srv.url, "CODEX_AUTH_JSON": LOGIN})
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "login-seen").read_text())["tokens"]["refresh_token"] == "rt_stand-in-refresh-0123456789"
    assert "CODEX_AUTH_JSON" not in fha.dumped_names(dump)
    kept = all_git_text(repo)
    for token in ("rt_stand-in-refresh-0123456789", "eyJ.stand-in-access-token.0123456789"):
        assert token.encode() not in kept


def test_a_vertex_plan_through_a_whole_run_never_hands_the_agent_the_request_token(tmp_path):
    """`plan-runner run` on a `provider: vertex` plan, with the job's WIF credentials file (holding the Actions
    request token) and ANTHROPIC_VERTEX_BASE_URL at the stand-in: the real CLI works through STS and
    streamRawPredict, the plan finishes; the agent's shell sees its own credentials file (not the job's), no
    request token; afterwards the file is gone and neither the OIDC token nor the request token is in any git
    object."""
    from tests.e2e import test_first_hour_agents as fha
    from tests.reliability_world import all_git_text
    from tests.servers import messages as m

    repo = fha.make_repo(tmp_path, "claude-code")
    plan = repo / "plans" / "hello.md"
    plan.write_text(plan.read_text().replace("  backend: claude-code\n", "  backend: claude-code\n  provider: vertex\n"))
    fha.git(repo, "commit", "-q", "-am", "vertex")
    dump = tmp_path / "claude-env"
    with CloudServer() as srv:
        srv.enqueue(m.reply("Working.", m.tool_use("Bash", {"command": fha.WORK.format(dump=dump),
                                                              "description": "work"})),
                    m.reply("Done: hello.txt is committed and 1.1 is ticked."))
        job_file = _wif_file(tmp_path, srv.url)
        proc = fha.cli(repo, tmp_path, "run", "plans/hello.md", base_urls={
            "GOOGLE_APPLICATION_CREDENTIALS": str(job_file), "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
            "ANTHROPIC_VERTEX_PROJECT_ID": "my-project", "CLOUD_ML_REGION": "us-east5",
            "ANTHROPIC_VERTEX_BASE_URL": f"{srv.url}/v1"})
        vertex_calls = [r for r in srv.model_requests if r.path.endswith(":streamRawPredict")]
    assert proc.returncode == 0, proc.stderr
    assert vertex_calls and all(r.headers["authorization"] == f"Bearer {IMPERSONATED_TOKEN}" for r in vertex_calls)
    seen = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert seen["CLAUDE_CODE_USE_VERTEX"] == "1" and "ACTIONS_ID_TOKEN_REQUEST_TOKEN" not in seen
    agent_file = Path(seen["GOOGLE_APPLICATION_CREDENTIALS"])
    assert agent_file != job_file and agent_file.name == agent_creds.GOOGLE_FILE and not agent_file.exists()
    kept = all_git_text(repo)
    assert OIDC_JWT.encode() not in kept and REQUEST_TOKEN.encode() not in kept


def test_a_vertex_session_outlasting_its_oidc_token_gets_a_fresh_one(tmp_path):
    """The Actions OIDC token lives minutes (here 6 s), the access token exchanged for it less (here 2 s, so the
    CLI's Google library exchanges the token file's OIDC token again before every call): a session whose agent
    works longer than the first OIDC token lives (a 9 s command between two turns) still reaches Vertex, because
    plan-runner rewrites the agent's token file with a fresh token while the agent runs; STS refused nothing, and
    no OIDC token, first or renewed, is in any git object."""
    from tests.e2e import test_first_hour_agents as fha
    from tests.reliability_world import all_git_text
    from tests.servers import messages as m

    repo = fha.make_repo(tmp_path, "claude-code")
    plan = repo / "plans" / "hello.md"
    plan.write_text(plan.read_text().replace("  backend: claude-code\n", "  backend: claude-code\n  provider: vertex\n"))
    fha.git(repo, "commit", "-q", "-am", "vertex")
    with CloudServer(oidc_lifetime_s=6, token_lifetime_s=2) as srv:
        srv.enqueue(m.reply("Waiting.", m.tool_use("Bash", {"command": "sleep 9", "description": "wait"})),
                    m.reply("Working.", m.tool_use("Bash", {"command": fha.WORK.format(dump=tmp_path / "env"),
                                                              "description": "work"})),
                    m.reply("Done: hello.txt is committed and 1.1 is ticked."))
        job_file = _wif_file(tmp_path, srv.url)
        proc = fha.cli(repo, tmp_path, "run", "plans/hello.md", base_urls={
            "GOOGLE_APPLICATION_CREDENTIALS": str(job_file), "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
            "ANTHROPIC_VERTEX_PROJECT_ID": "my-project", "CLOUD_ML_REGION": "us-east5",
            "ANTHROPIC_VERTEX_BASE_URL": f"{srv.url}/v1"})
        issued, refused = list(srv.oidc_issued), list(srv.sts_refused)
        exchanged = [r for r in srv.requests if r.path.startswith("/sts/token")]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert refused == [] and len(issued) >= 3  # the first, then fresh ones while the agent ran
    used = {parse_qs(r.body.decode()).get("subject_token", [""])[0] for r in exchanged}
    assert len(used - {issued[0]}) >= 1  # a later exchange used a renewed token
    assert fold_ledger_finished(repo)
    kept = all_git_text(repo)
    assert not any(token.encode() in kept for token in issued)


def fold_ledger_finished(repo: Path) -> bool:
    from tests.reliability_world import fold_ledger

    return fold_ledger(repo, "hello").finished
