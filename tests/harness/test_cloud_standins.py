"""The act stand-ins for the OIDC actions `init --auth bedrock|vertex` pins (tests/e2e_act/aws-credentials-standin,
tests/e2e_act/google-auth-standin) against the cloud stand-in (tests/servers/clouds.py): the requests the real
actions make, in their order, and what they export. The real actions' source at the pinned commits is what these
follow (configure-aws-credentials src/index.ts, assumeRole.ts, helpers.ts; auth src/main.ts,
client/workload_identity_federation.ts); the server's STS answers follow the AWS STS API Reference (XML,
2011-06-15) and the IAM Service Account Credentials API (generateAccessToken)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, unquote

from tests.servers.clouds import ACCESS_TOKEN, OIDC_JWT, REQUEST_TOKEN, STS_CREDENTIALS, CloudServer

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict, dict]:
    github_env, github_output = tmp_path / "env", tmp_path / "output"
    github_env.write_text("")
    github_output.write_text("")
    proc = subprocess.run([sys.executable, str(ROOT / "tests/e2e_act" / script / "standin.py")], capture_output=True,
                          text=True, timeout=60, env={"PATH": os.environ["PATH"], "GITHUB_ENV": str(github_env),
                                                      "GITHUB_OUTPUT": str(github_output), **env})
    pairs = lambda p: dict(line.split("=", 1) for line in p.read_text().splitlines() if line)  # noqa: E731
    return proc, pairs(github_env), pairs(github_output)


def test_the_aws_stand_in_assumes_the_role_with_the_oidc_token_and_exports_its_credentials(tmp_path) -> None:
    with CloudServer() as srv:
        proc, env, out = _run("aws-credentials-standin", {
            "INPUT_ROLE_TO_ASSUME": "arn:aws:iam::123456789012:role/plan-runner", "INPUT_AWS_REGION": "us-east-1",
            "INPUT_ROLE_DURATION_SECONDS": "10800", "ACTIONS_ID_TOKEN_REQUEST_URL": f"{srv.url}/oidc?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN, "AWS_ENDPOINT_URL_STS": srv.url}, tmp_path)
        sent = list(srv.requests)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    oidc, assume, whoami = sent
    assert oidc.path == "/oidc?api-version=2.0&audience=sts.amazonaws.com"
    assert oidc.headers["authorization"] == f"Bearer {REQUEST_TOKEN}"
    form = {k: v[0] for k, v in parse_qs(assume.body.decode()).items()}
    assert form == {"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "DurationSeconds": "10800",
                    "RoleArn": "arn:aws:iam::123456789012:role/plan-runner", "RoleSessionName": "GitHubActions",
                    "WebIdentityToken": OIDC_JWT}
    assert "authorization" not in assume.headers  # the token is the credential
    assert whoami.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={STS_CREDENTIALS['AccessKeyId']}/") and "/us-east-1/sts/aws4_request" in \
        whoami.headers["authorization"]
    assert env == {"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                   "AWS_ACCESS_KEY_ID": STS_CREDENTIALS["AccessKeyId"],
                   "AWS_SECRET_ACCESS_KEY": STS_CREDENTIALS["SecretAccessKey"],
                   "AWS_SESSION_TOKEN": STS_CREDENTIALS["SessionToken"]}
    assert out["aws-account-id"] == "123456789012"
    for value in (OIDC_JWT, *STS_CREDENTIALS.values()):  # masked before anything else prints them
        assert f"::add-mask::{value}" in proc.stdout


def test_the_aws_stand_in_fails_without_the_id_token_permission(tmp_path) -> None:
    proc, env, _ = _run("aws-credentials-standin", {"INPUT_ROLE_TO_ASSUME": "arn:aws:iam::1:role/r",
                                                    "INPUT_AWS_REGION": "us-east-1"}, tmp_path)
    assert proc.returncode == 1 and "id-token" in proc.stdout and env == {}


def test_the_google_stand_in_writes_the_wif_file_and_exchanges_the_token(tmp_path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    provider = "projects/123/locations/global/workloadIdentityPools/gh/providers/repo"
    with CloudServer() as srv:
        proc, env, out = _run("google-auth-standin", {
            "INPUT_WORKLOAD_IDENTITY_PROVIDER": provider, "INPUT_SERVICE_ACCOUNT": "agent@my-project.iam.gserviceaccount.com",
            "INPUT_CREATE_CREDENTIALS_FILE": "true", "INPUT_EXPORT_ENVIRONMENT_VARIABLES": "true",
            "ACTIONS_ID_TOKEN_REQUEST_URL": f"{srv.url}/oidc?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN, "GITHUB_WORKSPACE": str(workspace),
            "STANDIN_GOOGLE_API": srv.url}, tmp_path)
        sent = list(srv.requests)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    oidc, exchange = sent
    assert unquote(oidc.path) == f"/oidc?api-version=2.0&audience=https://iam.googleapis.com/{provider}"
    assert exchange.path == "/sts/token" and exchange.json["subjectToken"] == OIDC_JWT
    assert exchange.json["audience"] == f"//iam.googleapis.com/{provider}"
    (path,) = workspace.glob("gha-creds-*.json")
    assert len(path.name) == len("gha-creds-0123456789abcdef.json") and stat.S_IMODE(path.stat().st_mode) == 0o640
    data = json.loads(path.read_text())
    assert data["type"] == "external_account" and data["token_url"] == f"{srv.url}/sts/token"
    assert data["credential_source"]["headers"] == {"Authorization": f"Bearer {REQUEST_TOKEN}"}
    assert "audience=https%3A%2F%2Fiam.googleapis.com%2Fprojects" in data["credential_source"]["url"]
    assert data["service_account_impersonation_url"] == (
        f"{srv.url}/iamcredentials/v1/projects/-/serviceAccounts/agent@my-project.iam.gserviceaccount.com"
        ":generateAccessToken")
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == str(path) == env["CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE"]
    assert env["GOOGLE_CLOUD_PROJECT"] == "my-project" and out["project_id"] == "my-project"
    assert out["auth_token"] == ACCESS_TOKEN and f"::add-mask::{ACCESS_TOKEN}" in proc.stdout
