"""The ChatGPT backend Codex talks to with a ChatGPT login, over HTTPS on 127.0.0.1, for the real Codex CLI.

With a ChatGPT login (auth.json `auth_mode: chatgpt`) the pinned Codex sends its model turns to
`<chatgpt_base_url>codex/responses` (not to OPENAI_BASE_URL; a GET there first tries a WebSocket, then
HTTPS POSTs of the Responses stream), with `Authorization: Bearer <the login's access token>` and
`ChatGPT-Account-Id: <its account id>`, after a workspace check `GET <chatgpt_base_url>wham/accounts/check`
(what Codex calls workspace routing discovery). It refuses a ChatGPT backend that is not HTTPS, so this
server speaks TLS with a certificate of its own throwaway CA (`ca_file`: what CODEX_CA_CERTIFICATE, Codex's
own trust-store variable, names). `chatgpt_base_url` is Codex's config key for the backend
(`-c chatgpt_base_url="<url>"`). A refresh (`POST /oauth/token`, what CODEX_REFRESH_TOKEN_URL_OVERRIDE names in
place of https://auth.openai.com/oauth/token) rotates the tokens: new access, id and refresh tokens.

The model turns are ResponsesServer's (tests/servers/responses.py). Requests without the login's token are
answered 401, as the real backend does. Everything else Codex asks for (plugins, MCP, analytics, settings)
gets 404, which Codex tolerates.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .responses import RecordedRequest, ResponsesServer, _Handler as _ResponsesHandler

ACCOUNT_ID = "acct-standin-0123"
REFRESHED_REFRESH_TOKEN = "rt_standin-rotated-refresh-9876543210"


def _jwt(claims: dict[str, Any]) -> str:
    def part(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c3RhbmQtaW4tc2lnbmF0dXJl"


def login(*, last_refresh: str, suffix: str = "", valid_s: int = 86400) -> dict[str, Any]:
    """A ChatGPT login as `codex login` leaves it in auth.json: JWT id and access tokens carrying the account's
    claims (`https://api.openai.com/auth`), a refresh token, the account id."""
    exp = int(time.time()) + valid_s
    auth = {"chatgpt_account_id": ACCOUNT_ID, "chatgpt_plan_type": "plus", "chatgpt_user_id": "user-standin"}
    return {"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "last_refresh": last_refresh, "tokens": {
        "id_token": _jwt({"email": "dev@example.invalid", "https://api.openai.com/auth": auth, "exp": exp,
                          "nonce": f"id{suffix}"}),
        "access_token": _jwt({"https://api.openai.com/auth": auth, "exp": exp, "scp": ["openid"],
                              "jti": f"access{suffix}"}),
        "refresh_token": f"rt_standin-refresh-0123456789{suffix}", "account_id": ACCOUNT_ID}}


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl): (ca, cert, key)."""
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    cert, key, csr, ext = folder / "server.crt", folder / "server.key", folder / "server.csr", folder / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    for argv in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
                  "-subj", "/CN=plan-runner test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign"],
                 ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
                 ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                  "-days", "2", "-extfile", ext]):
        subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True, timeout=60)
    return ca, cert, key


class ChatGPTServer(ResponsesServer):
    """`with ChatGPTServer(login) as srv:` HTTPS on `srv.url` (the `chatgpt_base_url`, ending in /backend-api/);
    `srv.ca_file` is its CA."""

    thread_name = "chatgpt-server"
    url_path = "/backend-api/"

    def __init__(self, account: dict[str, Any], **kw: Any) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="chatgpt-standin-")
        self.ca_file, cert, key = _certificates(Path(self._folder.name))
        Path(self._folder.name).chmod(0o711)  # the CA is public: an isolated agent's user reads it
        self.ca_file.chmod(0o644)
        self.access_tokens = {account["tokens"]["access_token"]}
        self.refreshed: dict[str, Any] | None = None
        super().__init__(**kw)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"https://{host}:{port}{self.url_path}"

    @property
    def model_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path.split("?")[0] == "/backend-api/codex/responses"]

    def close(self) -> None:
        super().close()
        self._folder.cleanup()


class _Handler(_ResponsesHandler):
    def _route(self) -> None:
        owner = self.server.owner
        path = self.path.split("?")[0]
        authorized = (self.headers.get("authorization", "").removeprefix("Bearer ") in owner.access_tokens
                      and self.headers.get("chatgpt-account-id") == ACCOUNT_ID)
        if path == "/oauth/token" and self.command == "POST":
            self._refresh()
        elif path == "/backend-api/codex/responses" and self.command == "POST":
            if not authorized:
                return self._unauthorized()
            super()._route()
        elif path == "/backend-api/codex/responses" and self.command == "GET":
            self._record_only()  # a WebSocket upgrade: none here, so Codex falls back to HTTPS POSTs
            self._send_json(426, {"detail": "Upgrade Required"})
        elif path == "/backend-api/wham/accounts/check" and self.command == "GET":
            self._record_only()
            if not authorized:
                return self._unauthorized()
            self._send_json(200, {"accounts": [{
                "id": ACCOUNT_ID, "name": None, "plan_type": "plus", "structure": "personal",
                "profile_picture_url": None, "workspace_backend_origin": "NO_CONSTRAINT",
                "account_routing_override": "NO_CONSTRAINT"}], "account_ordering": [ACCOUNT_ID],
                "default_account_id": ACCOUNT_ID})
        else:
            self._record_only()
            self._send_json(404, {"detail": "Not Found"})

    def _record_only(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.server.owner._record(RecordedRequest(self.command, self.path,
                                                  {k.lower(): v for k, v in self.headers.items()}, body))
        return raw

    def _unauthorized(self) -> None:
        self._send_json(401, {"error": {"message": "Your authentication token is not valid.", "type": "invalid_request_error",
                                        "code": "token_invalid"}})

    def _refresh(self) -> None:
        """auth.openai.com's token endpoint for a refresh grant: new tokens, the old refresh token spent."""
        self._record_only()
        owner = self.server.owner
        fresh = login(last_refresh="", suffix="-refreshed")["tokens"]
        fresh["refresh_token"] = REFRESHED_REFRESH_TOKEN
        owner.refreshed = fresh
        owner.access_tokens.add(fresh["access_token"])
        self._send_json(200, {"id_token": fresh["id_token"], "access_token": fresh["access_token"],
                              "refresh_token": fresh["refresh_token"]})


ChatGPTServer.handler = _Handler
