"""The Messages stand-in as the clouds serve it: Amazon Bedrock and Google Vertex AI, plus their token endpoints.

The real Claude Code CLI, pointed here by ANTHROPIC_BEDROCK_BASE_URL / ANTHROPIC_VERTEX_BASE_URL, sends what it
sends those providers, and gets their wire shapes back:

* Bedrock: `POST /model/<model id>/invoke-with-response-stream` (SigV4-signed; the body is a Messages request
  with `anthropic_version: bedrock-2023-05-31` and no `model`), answered as an `application/vnd.amazon.eventstream`
  stream of `chunk` events whose payload `{"bytes": base64(<Messages SSE event JSON>)}`; `/invoke` unstreamed.
* Vertex: `POST /v1/projects/<p>/locations/<r>/publishers/anthropic/models/<m>:streamRawPredict` (a Bearer
  access token; `anthropic_version: vertex-2023-10-16`), answered with the Messages SSE stream; `:rawPredict`
  unstreamed. `POST /sts/token` is Google's STS token exchange (an external account's subject token for an
  access token), `POST /iamcredentials/v1/projects/-/serviceAccounts/<email>:generateAccessToken` the IAM
  Service Account Credentials API's impersonation (Bearer the STS token; `{"accessToken", "expireTime"}`),
  `GET /oidc?audience=...` the Actions ID-token endpoint (Bearer the request token).
* AWS STS's query API at `POST /` (AWS_ENDPOINT_URL_STS): `Action=AssumeRoleWithWebIdentity` (unsigned; the
  web identity token must be the OIDC token `/oidc` hands out) answers a role's temporary credentials
  (STS_CREDENTIALS), `Action=GetCallerIdentity` (SigV4-signed with them) the role's identity, both in STS's XML
  (AWS STS API Reference, AssumeRoleWithWebIdentity and GetCallerIdentity; 2011-06-15).
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from typing import Any

from .messages import MessagesServer, RecordedRequest, _Handler as _MessagesHandler, _message, _sse_events

ACCESS_TOKEN = "ya29.stand-in-access-token-0123456789"
REQUEST_TOKEN = "actions-request-token-0123456789abcdef"
OIDC_JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZXBvOm8vciJ9.c3RhbmQtaW4tc2lnbmF0dXJlLTAxMjM0NTY3ODk"
IMPERSONATED_TOKEN = "ya29.stand-in-impersonated-token-9876543210"  # generateAccessToken's, for the service account
# What AssumeRoleWithWebIdentity hands out (temporary credentials: ASIA... key ids)
STS_CREDENTIALS = {"AccessKeyId": "ASIASTANDIN0EXAMPLE01", "SecretAccessKey": "stand-in/secret/key/0123456789abcdefEXAMPLE",
                   "SessionToken": "IQoJb3JpZ2luX2VjEStandInSessionToken0123456789"}
ACCOUNT = "123456789012"
_STS_XML = "https://sts.amazonaws.com/doc/2011-06-15/"
_IMPERSONATE = re.compile(r"^/iamcredentials/v1/projects/-/serviceAccounts/(?P<sa>[^/:]+):generateAccessToken$")

_BEDROCK = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>invoke|invoke-with-response-stream)$")
_VERTEX = re.compile(r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/publishers/anthropic/models/"
                     r"(?P<model>[^/:]+):(?P<op>rawPredict|streamRawPredict)$")


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("B", len(raw_name)) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value


def event_stream_message(payload: bytes, headers: dict[str, str]) -> bytes:
    """One message of the AWS event-stream encoding (prelude, its CRC, headers, payload, the message's CRC)."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body))


class CloudServer(MessagesServer):
    """`oidc_lifetime_s`: the Actions endpoint hands out a new JWT each time, expiring that many seconds after
    issue (as GitHub's do, after about five minutes), and Google's STS refuses one past its `exp`; else the one
    fixed OIDC_JWT. `token_lifetime_s`: how long STS's and generateAccessToken's access tokens last."""

    thread_name = "cloud-server"

    def __init__(self, *, oidc_lifetime_s: float | None = None, token_lifetime_s: int = 3600, **kw: Any) -> None:
        self.oidc_lifetime_s, self.token_lifetime_s = oidc_lifetime_s, token_lifetime_s
        self.oidc_issued: list[str] = []
        self.sts_refused: list[str] = []
        super().__init__(**kw)

    def issue_oidc(self) -> str:
        if self.oidc_lifetime_s is None:
            return OIDC_JWT
        import time

        now = time.time()
        claims = {"sub": "repo:o/r:ref:refs/heads/main", "iat": int(now), "exp": now + self.oidc_lifetime_s,
                  "jti": self._new_id("oidc")}
        part = lambda obj: base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")  # noqa: E731
        token = f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c3RhbmQtaW4"
        with self._lock:
            self.oidc_issued.append(token)
        return token

    def subject_token_valid(self, token: str) -> bool:
        """STS's check of the subject token's lifetime (the fixed OIDC_JWT carries none)."""
        if token == OIDC_JWT:
            return True
        import time

        with self._lock:
            issued = token in self.oidc_issued
        try:
            payload = token.split(".")[1]
            exp = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
        except (IndexError, KeyError, ValueError):
            return False
        return issued and exp > time.time()

    @property
    def model_requests(self):
        with self._lock:
            return [r for r in self.requests if _BEDROCK.match(r.path.split("?")[0]) or _VERTEX.match(r.path.split("?")[0])]


class _Handler(_MessagesHandler):
    def _route(self) -> None:
        path = self.path.split("?")[0]
        bedrock, vertex = _BEDROCK.match(path), _VERTEX.match(path)
        if self.command == "POST" and (bedrock or vertex):
            owner = self.server.owner
            body = self._read_recorded()
            if not isinstance(body, dict):
                self._send_error(400, "invalid_request_error", "body must be a JSON object")
                return
            model = (bedrock or vertex)["model"]
            op = (bedrock or vertex)["op"]
            # the script is the agent's streamed turns; an unstreamed call (the CLI's own checks) gets the default
            turn = owner._next_turn(body) if op in ("invoke-with-response-stream", "streamRawPredict") else owner.default
            message = _message(owner, dict(body, model=model), turn)
            if op in ("invoke", "rawPredict"):
                self._send_json(200, message)
            elif bedrock:
                self._bedrock_stream(message)
            else:
                self._stream(message, turn)
        elif self.command == "POST" and path == "/sts/token":
            raw = self._read_raw_recorded()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            subject = body.get("subjectToken") if isinstance(body, dict) else None
            if subject is None:  # google-auth-library posts a form
                from urllib.parse import parse_qs

                subject = (parse_qs(raw.decode("utf-8", "replace")).get("subject_token") or [""])[0]
            if not self.server.owner.subject_token_valid(subject):
                self.server.owner.sts_refused.append(subject)
                self._send_json(400, {"error": "invalid_grant", "error_description":
                                      "The access token has expired or is not yet valid."})
                return
            self._send_json(200, {"access_token": ACCESS_TOKEN, "issued_token_type":
                                  "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer",
                                  "expires_in": self.server.owner.token_lifetime_s})
        elif self.command == "POST" and _IMPERSONATE.match(path):
            self._read_recorded()
            if self.headers.get("authorization") != f"Bearer {ACCESS_TOKEN}":
                self._send_json(401, {"error": {"code": 401, "status": "UNAUTHENTICATED",
                                                "message": "Request had invalid authentication credentials."}})
            else:
                import time

                expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + self.server.owner.token_lifetime_s))
                self._send_json(200, {"accessToken": IMPERSONATED_TOKEN, "expireTime": expires})
        elif self.command == "POST" and path == "/":
            self._aws_sts()
        elif self.command == "GET" and path == "/oidc":
            self._read_recorded()
            if self.headers.get("authorization") != f"Bearer {REQUEST_TOKEN}":
                self._send_json(401, {"message": "bad request token"})
            else:
                self._send_json(200, {"count": 1, "value": self.server.owner.issue_oidc()})
        else:
            super()._route()

    def _read_raw_recorded(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        self.server.owner._record(RecordedRequest(method=self.command, path=self.path, json=parsed, body=raw,
                                                  headers={k.lower(): v for k, v in self.headers.items()}))
        return raw

    def _aws_sts(self) -> None:
        """AWS STS's query API (form-encoded POST, XML answers, `ErrorResponse` on a refusal)."""
        from urllib.parse import parse_qs

        raw = self._read_raw_recorded()
        form = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}
        action = form.get("Action")
        if action == "AssumeRoleWithWebIdentity":
            if form.get("WebIdentityToken") != OIDC_JWT or not form.get("RoleArn", "").startswith("arn:aws:iam::"):
                return self._sts_error(400, "InvalidIdentityToken", "Couldn't retrieve verification key from your "
                                       "identity provider")
            role = form["RoleArn"].rsplit("/", 1)[-1]
            c = STS_CREDENTIALS
            body = (f"<AssumeRoleWithWebIdentityResult><SubjectFromWebIdentityToken>repo:o/r:ref:refs/heads/main"
                    f"</SubjectFromWebIdentityToken><Audience>sts.amazonaws.com</Audience><AssumedRoleUser>"
                    f"<Arn>arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{form.get('RoleSessionName', '')}</Arn>"
                    f"<AssumedRoleId>AROASTANDIN:{form.get('RoleSessionName', '')}</AssumedRoleId></AssumedRoleUser>"
                    f"<Credentials><SessionToken>{c['SessionToken']}</SessionToken><SecretAccessKey>"
                    f"{c['SecretAccessKey']}</SecretAccessKey><Expiration>2099-01-01T00:00:00Z</Expiration>"
                    f"<AccessKeyId>{c['AccessKeyId']}</AccessKeyId></Credentials>"
                    f"<Provider>arn:aws:iam::{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com</Provider>"
                    f"</AssumeRoleWithWebIdentityResult>")
        elif action == "GetCallerIdentity":
            auth = self.headers.get("authorization") or ""
            if not auth.startswith(f"AWS4-HMAC-SHA256 Credential={STS_CREDENTIALS['AccessKeyId']}/") or \
                    self.headers.get("x-amz-security-token") != STS_CREDENTIALS["SessionToken"]:
                return self._sts_error(403, "InvalidClientTokenId", "The security token included in the request is "
                                       "invalid.")
            body = (f"<GetCallerIdentityResult><Arn>arn:aws:sts::{ACCOUNT}:assumed-role/stand-in/GitHubActions</Arn>"
                    f"<UserId>AROASTANDIN:GitHubActions</UserId><Account>{ACCOUNT}</Account></GetCallerIdentityResult>")
        else:
            return self._sts_error(400, "InvalidAction", f"Could not find operation {action} for version 2011-06-15")
        self._send_xml(200, f'<{action}Response xmlns="{_STS_XML}">{body}<ResponseMetadata><RequestId>'
                            f'{self.server.owner._new_id("req")}</RequestId></ResponseMetadata></{action}Response>')

    def _sts_error(self, status: int, code: str, message: str) -> None:
        self._send_xml(status, f'<ErrorResponse xmlns="{_STS_XML}"><Error><Type>Sender</Type><Code>{code}</Code>'
                               f'<Message>{message}</Message></Error><RequestId>{self.server.owner._new_id("req")}'
                               '</RequestId></ErrorResponse>')

    def _send_xml(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("content-type", "text/xml")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _bedrock_stream(self, message: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/vnd.amazon.eventstream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-amzn-requestid", self.server.owner._new_id("req"))
        self.end_headers()
        for _event, data in _sse_events(message):
            payload = json.dumps({"bytes": base64.b64encode(json.dumps(data).encode()).decode(), "p": "abcd"}).encode()
            frame = event_stream_message(payload, {":event-type": "chunk", ":content-type": "application/json",
                                                   ":message-type": "event"})
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


CloudServer.handler = _Handler
