"""configure-aws-credentials' OIDC path, as the pinned commit does it (standard library only):

1. the job's OIDC token: `core.getIDToken(audience)` GETs ACTIONS_ID_TOKEN_REQUEST_URL + `&audience=` (default
   `sts.amazonaws.com`) with `Authorization: Bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN`, masks the `value`;
2. STS AssumeRoleWithWebIdentity (unsigned: the token is the credential): RoleArn, RoleSessionName (default
   `GitHubActions`), WebIdentityToken, DurationSeconds (default 3600);
3. exports AWS_REGION, AWS_DEFAULT_REGION (`exportRegion`), then the role's AWS_ACCESS_KEY_ID,
   AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, each masked first (`exportCredentials`);
4. STS GetCallerIdentity with them, SigV4-signed (`validateCredentials`): outputs aws-account-id and
   authenticated-arn (`exportAccountId`).

STS is the AWS SDK's: `https://sts.<region>.amazonaws.com`, or AWS_ENDPOINT_URL_STS (the SDK's service-specific
endpoint variable), which the tests set to the local stand-in (tests/servers/clouds.py).
"""

import datetime
import hashlib
import hmac
import json
import os
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

NS = {"sts": "https://sts.amazonaws.com/doc/2011-06-15/"}


def fail(message):
    print(f"::error::{message}")
    sys.exit(1)


def oidc_token(audience):
    url, token = os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"), os.environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if not url or not token:
        fail("getIDToken call failed: Unable to get ACTIONS_ID_TOKEN_REQUEST_URL env variable "
             "(did you mean to set the `id-token` permission?)")
    request = urllib.request.Request(f"{url}&audience={urllib.parse.quote(audience, safe='')}",
                                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        value = json.load(resp)["value"]
    print(f"::add-mask::{value}")
    return value


def sign(method, url, body, region, key, secret, session):
    """AWS Signature Version 4 for service `sts` (the SDK's signer)."""
    parts = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"content-type": "application/x-www-form-urlencoded", "host": parts.netloc, "x-amz-date": amz_date,
               "x-amz-security-token": session}
    names = sorted(headers)
    canonical = "\n".join([method, parts.path or "/", parts.query, *(f"{n}:{headers[n]}" for n in names), "",
                           ";".join(names), hashlib.sha256(body).hexdigest()])
    scope = f"{day}/{region}/sts/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = f"AWS4{secret}".encode()
    for part in (day, region, "sts", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={';'.join(names)}, "
                                f"Signature={signature}")
    return headers


def sts(endpoint, params, headers=None):
    body = urllib.parse.urlencode(params).encode()
    request = urllib.request.Request(endpoint, data=body, method="POST", headers=headers or {
        "content-type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return ET.fromstring(resp.read())
    except urllib.error.HTTPError as err:
        fail(f"Could not assume role with OIDC: {err.code} {err.read()[:300]!r}")


def main():
    region = os.environ.get("INPUT_AWS_REGION", "")
    role = os.environ.get("INPUT_ROLE_TO_ASSUME", "")
    if not region:
        fail("Region is not valid: ")
    endpoint = (os.environ.get("AWS_ENDPOINT_URL_STS") or f"https://sts.{region}.amazonaws.com").rstrip("/") + "/"
    env_lines = [f"AWS_DEFAULT_REGION={region}", f"AWS_REGION={region}"]
    token = oidc_token(os.environ.get("INPUT_AUDIENCE") or "sts.amazonaws.com")
    print("Assuming role with OIDC")
    answer = sts(endpoint, {"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "RoleArn": role,
                            "RoleSessionName": os.environ.get("INPUT_ROLE_SESSION_NAME") or "GitHubActions",
                            "WebIdentityToken": token,
                            "DurationSeconds": os.environ.get("INPUT_ROLE_DURATION_SECONDS") or "3600"})
    creds = answer.find(".//sts:Credentials", NS)
    key, secret, session = (creds.find(f"sts:{n}", NS).text for n in ("AccessKeyId", "SecretAccessKey", "SessionToken"))
    for value in (key, secret, session):
        print(f"::add-mask::{value}")
    print(f"Authenticated as assumedRoleId {answer.find('.//sts:AssumedRoleId', NS).text}")
    env_lines += [f"AWS_ACCESS_KEY_ID={key}", f"AWS_SECRET_ACCESS_KEY={secret}", f"AWS_SESSION_TOKEN={session}"]
    params = {"Action": "GetCallerIdentity", "Version": "2011-06-15"}
    body = urllib.parse.urlencode(params).encode()
    identity = sts(endpoint, params, sign("POST", endpoint, body, region, key, secret, session))
    with open(os.environ["GITHUB_ENV"], "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in env_lines))
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
        fh.write(f"aws-account-id={identity.find('.//sts:Account', NS).text}\n")
        fh.write(f"authenticated-arn={identity.find('.//sts:Arn', NS).text}\n")


if __name__ == "__main__":
    main()
