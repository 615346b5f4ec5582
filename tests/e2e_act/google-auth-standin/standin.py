"""google-github-actions/auth with Workload Identity Federation, as the pinned commit does it (standard library):

1. the job's OIDC token: `getIDToken(audience)`, audience `https://iam.googleapis.com/<provider>` unless given
   (ACTIONS_ID_TOKEN_REQUEST_URL + `&audience=`, `Authorization: Bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN`);
2. create_credentials_file: `$GITHUB_WORKSPACE/gha-creds-<16 hex>.json` (mode 0640), an `external_account` whose
   `credential_source` is the request URL with the audience and the request token as a header, its `token_url`
   `<sts>/token`, and `service_account_impersonation_url` `<iamcredentials>/projects/-/serviceAccounts/<sa>:
   generateAccessToken` (a service account was given); output credentials_file_path, and export
   CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE, GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_GHA_CREDS_PATH;
3. the project from the service account's email (`name@<project>.iam.gserviceaccount.com`): output project_id,
   export CLOUDSDK_CORE_PROJECT, CLOUDSDK_PROJECT, GCLOUD_PROJECT, GCP_PROJECT, GOOGLE_CLOUD_PROJECT;
4. `client.getToken()`: the STS token exchange (POST `<sts>/token`, JSON), masked, output auth_token.

The endpoints are Google's (`https://sts.googleapis.com/v1`, `https://iamcredentials.googleapis.com/v1`) unless
STANDIN_GOOGLE_API names the local stand-in (tests/servers/clouds.py): then `<it>/sts` and `<it>/iamcredentials/v1`.
"""

import json
import os
import re
import secrets
import sys
import urllib.parse
import urllib.request


def fail(message):
    print(f"::error::google-github-actions/auth failed with: {message}")
    sys.exit(1)


def main():
    provider, account = os.environ.get("INPUT_WORKLOAD_IDENTITY_PROVIDER", ""), os.environ.get("INPUT_SERVICE_ACCOUNT", "")
    if not provider:
        fail('The GitHub Action workflow must specify exactly one of "workload_identity_provider" or '
             '"credentials_json"!')
    base = os.environ.get("STANDIN_GOOGLE_API", "").rstrip("/")
    sts = f"{base}/sts" if base else "https://sts.googleapis.com/v1"
    iamcredentials = f"{base}/iamcredentials/v1" if base else "https://iamcredentials.googleapis.com/v1"
    request_url, request_token = os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"), os.environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if not request_url or not request_token:
        fail("GitHub Actions did not inject $ACTIONS_ID_TOKEN_REQUEST_TOKEN or $ACTIONS_ID_TOKEN_REQUEST_URL into "
             "this job.")
    oidc_audience = os.environ.get("INPUT_AUDIENCE") or f"https://iam.googleapis.com/{provider}"
    request = urllib.request.Request(f"{request_url}&audience={urllib.parse.quote(oidc_audience, safe='')}",
                                     headers={"Authorization": f"Bearer {request_token}", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        oidc = json.load(resp)["value"]
    print(f"::add-mask::{oidc}")
    audience = f"//iam.googleapis.com/{provider}"
    exports, outputs = [], []
    if os.environ.get("INPUT_CREATE_CREDENTIALS_FILE", "true") == "true":
        parts = urllib.parse.urlsplit(request_url)
        query = dict(urllib.parse.parse_qsl(parts.query), audience=oidc_audience)
        source_url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        data = {"type": "external_account", "audience": audience,
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": f"{sts}/token",
                "credential_source": {"url": source_url, "headers": {"Authorization": f"Bearer {request_token}"},
                                      "format": {"type": "json", "subject_token_field_name": "value"}}}
        if account:
            data["service_account_impersonation_url"] = (f"{iamcredentials}/projects/-/serviceAccounts/{account}"
                                                         ":generateAccessToken")
        path = os.path.join(os.environ["GITHUB_WORKSPACE"], f"gha-creds-{secrets.token_hex(8)}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data))
        print(f'Created credentials file at "{path}"')
        outputs.append(f"credentials_file_path={path}")
        if os.environ.get("INPUT_EXPORT_ENVIRONMENT_VARIABLES", "true") == "true":
            exports += [f"{name}={path}" for name in ("CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE",
                                                       "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_GHA_CREDS_PATH")]
    project = re.fullmatch(r"[^@]+@([^.]+)\.iam\.gserviceaccount\.com", account)
    if project:
        outputs.append(f"project_id={project[1]}")
        exports += [f"{name}={project[1]}" for name in ("CLOUDSDK_CORE_PROJECT", "CLOUDSDK_PROJECT", "GCLOUD_PROJECT",
                                                         "GCP_PROJECT", "GOOGLE_CLOUD_PROJECT")]
    body = json.dumps({"audience": audience, "grantType": "urn:ietf:params:oauth:grant-type:token-exchange",
                       "requestedTokenType": "urn:ietf:params:oauth:token-type:access_token",
                       "scope": "https://www.googleapis.com/auth/cloud-platform",
                       "subjectTokenType": "urn:ietf:params:oauth:token-type:jwt", "subjectToken": oidc}).encode()
    request = urllib.request.Request(f"{sts}/token", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            token = json.load(resp)["access_token"]
    except urllib.error.HTTPError as err:
        fail(f"Failed to generate Google Cloud federated token for {audience}: HTTP {err.code}")
    print(f"::add-mask::{token}")
    outputs.append(f"auth_token={token}")
    with open(os.environ["GITHUB_ENV"], "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in exports))
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in outputs))


if __name__ == "__main__":
    main()
