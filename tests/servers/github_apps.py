"""GitHub Apps and git over smart HTTP for the test GitHub server (tests/servers/github.py).

Apps, as GitHub documents them ("Generating a JSON Web Token (JWT) for a GitHub App", "Generating an installation
access token for a GitHub App", REST "Apps"):
* `GET /repos/{owner}/{repo}/installation` and `POST /app/installations/{installation_id}/access_tokens` take only
  the App's JWT (`Authorization: Bearer`): RS256, checked against the App's public key; `iss` the App's id; `iat`
  and `exp` numbers, `exp` at most ten minutes ahead and not past. Anything else answers 401 with GitHub's message.
* The repository's installation: 404 when the App is not installed on it.
* The token: 201 with `token`, `expires_at` (an hour on, `srv.app_token_ttl`), `permissions`,
  `repository_selection`; only permissions the installation was granted (else 422), only repositories it can
  reach (else 422); 403 for a suspended installation. The token then acts as `<slug>[bot]` until it expires;
  past that every request with it answers 401 "Bad credentials" ("Using an expired token produces a status code
  of 401"), and so does git.

Git: `srv.git_bare = bare` serves a bare repository at `{srv.url}/{owner}/{repo}.git` through `git http-backend`,
to a request whose Basic credentials (`x-access-token:<token>`, what the action's header sends) name a token the
server knows and that has not expired; else 401 with `WWW-Authenticate`, as GitHub answers; a push by a login in
`srv.git_read_only` (a token with `contents: read`) answers 403 "Permission to ... denied".
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.servers import github_shapes as shapes

if TYPE_CHECKING:
    from tests.servers.github import GitHubServer

TOKEN_TTL_S = 3600.0  # "Installation tokens expire one hour from the time you create them."
JWT_MAX_S = 600  # "no more than 10 minutes into the future"
GIT_PATH = re.compile(r"/(?P<owner>[^/]+)/(?P<repo>[^/]+?)\.git(?P<rest>/.*)$")


@dataclass
class App:
    app_id: int
    slug: str
    public_key: str  # PEM
    installation_id: int
    permissions: dict[str, str] = field(default_factory=lambda: {"contents": "write", "pull_requests": "write",
                                                                   "metadata": "read"})
    suspended: bool = False
    installed: bool = True
    max_mints: int | None = None  # suspended once it minted this many tokens
    revoke_next: int = 0  # this many of the next tokens are revoked as soon as they are minted (401 from then on)
    minted: list[dict[str, Any]] = field(default_factory=list)  # each token's answer, in order


class AppRefusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def add_app(srv: GitHubServer, app_id: int, public_key_pem: str, *, slug: str = "plan-runner-pusher",
            permissions: dict[str, str] | None = None) -> App:
    """An App installed on the server's repository; its tokens push and open pull requests by default."""
    app = App(app_id, slug, public_key_pem, srv.next_id())
    if permissions is not None:
        app.permissions = dict(permissions)
    srv.apps[app_id] = app
    return app


def is_app_route(srv: GitHubServer, path: str) -> bool:
    return path.startswith("/app/") or path == f"/repos/{srv.owner}/{srv.repo}/installation"


def _app_of_jwt(srv: GitHubServer, authorization: str) -> App:
    import jwt

    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise AppRefusal(401, "A JSON web token could not be decoded")
    given = given.strip()
    try:
        claims = jwt.decode(given, options={"verify_signature": False})
        iss = int(claims.get("iss"))
    except (jwt.PyJWTError, TypeError, ValueError):
        raise AppRefusal(401, "A JSON web token could not be decoded") from None
    app = srv.apps.get(iss)
    if app is None:
        raise AppRefusal(401, f"Integration not found (the `iss` {iss} is no App)")
    try:
        claims = jwt.decode(given, app.public_key, algorithms=["RS256"], options={"require": ["exp", "iat", "iss"]},
                            leeway=0)
    except jwt.ExpiredSignatureError:
        raise AppRefusal(401, "'Expiration time' claim ('exp') must be a numeric value representing the future "
                              "time at which the assertion expires") from None
    except jwt.ImmatureSignatureError:
        raise AppRefusal(401, "'Issued at' claim ('iat') must be an Integer representing the time that the "
                              "assertion was issued") from None
    except jwt.PyJWTError:
        raise AppRefusal(401, "A JSON web token could not be decoded") from None
    if not isinstance(claims["exp"], int) or claims["exp"] - time.time() > JWT_MAX_S:
        raise AppRefusal(401, "'Expiration time' claim ('exp') is too far in the future")
    return app


def serve_app(srv: GitHubServer, method: str, path: str, body: Any, authorization: str) -> tuple[int, Any]:
    """(status, JSON) of an App route; the caller holds the server's lock."""
    try:
        app = _app_of_jwt(srv, authorization)
    except AppRefusal as refusal:
        return refusal.status, shapes.error(refusal.message, refusal.status)
    if method == "GET" and path == f"/repos/{srv.owner}/{srv.repo}/installation":
        if not app.installed:
            return 404, shapes.error("Not Found", 404)
        return 200, installation_json(srv, app)
    m = re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)
    if method == "POST" and m:
        if int(m[1]) != app.installation_id or not app.installed:
            return 404, shapes.error("Not Found", 404)
        if app.suspended or (app.max_mints is not None and len(app.minted) >= app.max_mints):
            return 403, shapes.error("This installation has been suspended", 403)
        body = body if isinstance(body, dict) else {}
        wanted = body.get("permissions") or {}
        level = {"read": 1, "write": 2}
        if not isinstance(wanted, dict) or any(level.get(v, 9) > level.get(app.permissions.get(k, ""), 0)
                                               for k, v in wanted.items()):
            return 422, shapes.error("The permissions requested are not granted to this installation.", 422)
        repos = body.get("repositories")
        if repos is not None and (not isinstance(repos, list) or any(r != srv.repo for r in repos)):
            return 422, shapes.error("There is at least one repository that does not exist or is not accessible "
                                     "to the parent installation.", 422)
        token = "ghs_" + base64.b32encode(os.urandom(20)).decode().rstrip("=")
        expires = time.time() + srv.app_token_ttl
        srv.tokens[token] = f"{app.slug}[bot]"
        srv.token_expiry[token] = expires
        if app.revoke_next > 0:  # revoked: its answer says an hour, the server takes it no more
            app.revoke_next -= 1
            srv.token_expiry[token] = 0.0
        answer = {"token": token,
                  "expires_at": datetime.fromtimestamp(int(expires), UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "permissions": dict(wanted or app.permissions), "repository_selection": "selected",
                  "repositories": [srv.repo_json()]}
        app.minted.append(answer)
        return 201, answer
    return 404, shapes.error("Not Found", 404)


def installation_json(srv: GitHubServer, app: App) -> dict[str, Any]:
    return {"id": app.installation_id, "account": srv.user_json(srv.owner), "app_id": app.app_id,
            "app_slug": app.slug, "target_id": 42, "target_type": "Organization",
            "permissions": dict(app.permissions), "events": [], "repository_selection": "selected",
            "access_tokens_url": f"{srv.url}/app/installations/{app.installation_id}/access_tokens",
            "repositories_url": f"{srv.url}/installation/repositories",
            "html_url": f"{srv.url}/organizations/{srv.owner}/settings/installations/{app.installation_id}",
            "created_at": shapes.now_iso(), "updated_at": shapes.now_iso(), "single_file_name": None,
            "suspended_at": None, "suspended_by": None}


def token_live(srv: GitHubServer, token: str) -> bool:
    """A token the server knows that has not expired."""
    if token == srv.token:
        return True
    return token in srv.tokens and srv.token_expiry.get(token, float("inf")) > time.time()


def git_token(authorization: str) -> str:
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(given.strip()).decode().partition(":")
        except ValueError:
            return ""
        return password
    return given.strip() if scheme.lower() in ("token", "bearer") else ""


def serve_git(srv: GitHubServer, method: str, raw_path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str],
                                                                                                   bytes]:
    """One smart-HTTP request through `git http-backend`: (status, headers, body)."""
    path, _, query = raw_path.partition("?")
    m = GIT_PATH.fullmatch(path)
    bare = srv.git_bare
    if m is None or bare is None or (m["owner"], m["repo"]) != (srv.owner, srv.repo):
        return 404, {}, b"Repository not found.\n"
    token = git_token(headers.get("Authorization") or "")
    with srv.lock:
        live = bool(token) and token_live(srv, token)
        srv.git_requests.append((method, m["rest"], srv.tokens.get(token, srv.login if token == srv.token else ""),
                                 live))
    if not live:
        return 401, {"WWW-Authenticate": 'Basic realm="GitHub"'}, (
            b"remote: Invalid username or token. Password authentication is not supported for Git operations.\n")
    login = srv.tokens.get(token, srv.login)
    if "git-receive-pack" in raw_path and login in srv.git_read_only:  # read, not write: GitHub's 403
        return 403, {}, f"remote: Permission to {srv.owner}/{srv.repo}.git denied to {login}.\n".encode()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(Path(bare).parent),
           "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": f"/{Path(bare).name}{m['rest']}", "REQUEST_METHOD": method,
           "QUERY_STRING": query, "CONTENT_TYPE": headers.get("Content-Type") or "",
           "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": srv.tokens.get(token, srv.login),
           "REMOTE_ADDR": "127.0.0.1", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(Path(bare).parent)}
    if headers.get("Content-Encoding"):
        env["HTTP_CONTENT_ENCODING"] = headers["Content-Encoding"]
    if headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = headers["Git-Protocol"]
    done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60)
    head, _, out = done.stdout.partition(b"\r\n\r\n")
    if not _ and b"\n\n" in done.stdout:
        head, _, out = done.stdout.partition(b"\n\n")
    status, answer = 200, {}
    for line in head.decode("latin-1").splitlines():
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.strip().split()[0])
        elif key.strip():
            answer[key.strip()] = value.strip()
    return status, answer, out
