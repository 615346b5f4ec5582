"""The credential files an agent reads: copied into a folder of the agent's user alone, never the job's own.

Some ways of paying hand the agent a file, not a variable: Google Vertex AI reads GOOGLE_APPLICATION_CREDENTIALS,
a Codex ChatGPT login is `auth.json` under CODEX_HOME. The job's copies are unfit for the agent: they live under
the job's user's folders (unreadable to the agent's user), and the one google-github-actions/auth writes for
Workload Identity Federation holds the job's ACTIONS_ID_TOKEN_REQUEST_TOKEN (its credential source is the Actions
token endpoint, with that token as its header): with it the agent could mint the job's OIDC tokens for any
audience, i.e. every cloud role this repository's workflows may assume.

So plan-runner, before the agent starts, writes the agent's own copies into `area.creds` (mode 0700, files 0600,
then owned by the agent's user: no other user can read them): a Google file whose credential source is the
Actions endpoint becomes one whose source is a file holding one OIDC token plan-runner fetched itself, for that
file's audience only; a file still holding the request token is refused. The folder is removed after the session
and is no part of the saved state. Every token in these files is also a secret to redact (`Placed.secrets`).

The OIDC token is short-lived (GitHub's last about five minutes), and the agent's Google library exchanges it
again for every new access token (an hour each): `Renewal` rewrites the agent's token file with a fresh one
while the agent runs, well before the one there expires, so a session may outlast the first access token.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.backend_spec import BackendSpec
from runner.core.errors import PlanRunnerError
from runner.adapters.secrets import json_strings
from runner.adapters.sandbox.identity import Identity

GOOGLE_FILE = "google-credentials.json"
GOOGLE_SUBJECT_TOKEN = "google-subject-token"
_LIMIT = 1 << 20


@dataclass(frozen=True)
class Placed:
    env: dict[str, str] = field(default_factory=dict)  # set in the agent's environment (paths to its files)
    drop: tuple[str, ...] = ()  # removed from the agent's environment (a login's content, the job's paths)
    files: dict[str, Path] = field(default_factory=dict)  # name -> the agent's copy (e.g. "auth.json" for Codex)
    secrets: tuple[str, ...] = ()  # the tokens the files hold: redacted wherever plan-runner stores or prints
    renewal: Renewal | None = None  # keeps an OIDC subject token fresh while the agent runs (start/stop it)


def _fetch_subject_token(source: Mapping, timeout_s: float = 30.0) -> str:
    """The token a URL credential source names (the Actions OIDC endpoint), fetched by plan-runner itself."""
    import urllib.request  # (here: http.client, ssl and email cost every session 20 ms to import, for a rare path)

    request = urllib.request.Request(str(source["url"]), headers={str(k): str(v) for k, v in
                                                                  (source.get("headers") or {}).items()})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (the job's own endpoint)
        body = response.read(_LIMIT).decode("utf-8")
    fmt = source.get("format") or {}
    if fmt.get("type") == "json":
        value = json.loads(body).get(fmt.get("subject_token_field_name") or "value")
    else:
        value = body.strip()
    if not isinstance(value, str) or not value:
        raise ValueError("the endpoint's answer holds no token")
    return value


def _bad_file(path: str, why: str) -> PlanRunnerError:
    return PlanRunnerError(
        what=f"the Google credentials file {path} cannot be given to the agent", why=why,
        fix="authenticate the job with google-github-actions/auth (Workload Identity Federation, "
            "`create_credentials_file: true`) or point GOOGLE_APPLICATION_CREDENTIALS at a service account key file")


def google_credentials(path: str, parent_env: Mapping[str, str], folder: Path,
                       fetch: Callable[[Mapping], str] = _fetch_subject_token, sources: list | None = None,
                       ) -> tuple[dict[str, bytes], list[str]]:
    """(the agent's files, the secrets they hold) for the Google credentials file at `path`; `sources` gets the
    credential source plan-runner fetched the OIDC token from (the job's, never the agent's)."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(_LIMIT).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise _bad_file(path, f"it could not be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _bad_file(path, "it is not a JSON object")
    files: dict[str, bytes] = {}
    secrets = [str(data[k]) for k in ("private_key", "private_key_id", "refresh_token", "client_secret")
               if isinstance(data.get(k), str)]
    source = data.get("credential_source")
    if data.get("type") == "external_account" and isinstance(source, dict) and source.get("url"):
        try:
            token = fetch(source)
        except (OSError, ValueError, KeyError) as exc:
            raise _bad_file(path, f"the OIDC token its credential source names could not be fetched ({exc}); "
                                  "the job needs `permissions: id-token: write`") from None
        files[GOOGLE_SUBJECT_TOKEN] = token.encode("utf-8")
        secrets.append(token)
        if sources is not None:
            sources.append((source, token))
        data = {**data, "credential_source": {"file": str(folder / GOOGLE_SUBJECT_TOKEN), "format": {"type": "text"}}}
    text = json.dumps(data, indent=2)
    request_token = parent_env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "")
    if len(request_token) >= 8 and request_token in text:
        raise _bad_file(path, "it holds the job's ACTIONS_ID_TOKEN_REQUEST_TOKEN, with which the agent could mint "
                              "the job's OIDC tokens for any audience")
    files[GOOGLE_FILE] = text.encode("utf-8")
    return files, secrets


def login_secrets(text: str) -> list[str]:
    """The tokens of a login file (Codex's auth.json: its access, refresh and id tokens, a key)."""
    found = [v for v in json_strings(text) if len(v) >= 16]
    return found or ([text] if text.strip() and not text.lstrip().startswith("{") else [])


def plan_files(spec: BackendSpec, provider: str | None, parent_env: Mapping[str, str], agent_env: Mapping[str, str],
               folder: Path, fetch: Callable[[Mapping], str] = _fetch_subject_token) -> tuple[dict[str, bytes], Placed]:
    """What to write into `folder` for the agent, and how its environment changes (nothing written yet)."""
    files: dict[str, bytes] = {}
    env: dict[str, str] = {}
    drop: list[str] = []
    named: dict[str, Path] = {}
    secrets: list[str] = []
    way = spec.selected_auth(agent_env, provider)
    sources: list = []
    if way is not None and way.file_env and agent_env.get(way.file_env):
        found, more = google_credentials(agent_env[way.file_env], parent_env, folder, fetch, sources)
        files.update(found)
        secrets += more
        env[way.file_env] = str(folder / GOOGLE_FILE)
    if spec.login_content_env and spec.login_file is not None:
        name = spec.login_file[1]
        content = parent_env.get(spec.login_content_env, "")
        home = parent_env.get(spec.login_file[0])
        if not content and home and os.path.isfile(os.path.join(home, name)):
            with open(os.path.join(home, name), encoding="utf-8") as fh:  # the user's own login (`codex login`)
                content = fh.read(_LIMIT)
            drop.append(spec.login_file[0])  # the backend gives the agent its own CODEX_HOME, with this login
        if content:
            files[name] = content.encode("utf-8")
            named[name] = folder / name
            secrets += login_secrets(content)
        drop.append(spec.login_content_env)
    renewal = Renewal(sources[0][0], folder / GOOGLE_SUBJECT_TOKEN, sources[0][1], fetch) if sources else None
    return files, Placed(env=env, drop=tuple(drop), files=named, secrets=tuple(dict.fromkeys(secrets)),
                         renewal=renewal)


def jwt_window(token: str) -> tuple[float, float] | None:
    """(issued, expires) of a JWT, read from its claims unverified (plan-runner only schedules by them)."""
    try:
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=" * (-len(token.split(".")[1]) % 4)))
        return float(claims.get("iat") or claims.get("nbf") or time.time()), float(claims["exp"])
    except (IndexError, KeyError, TypeError, ValueError, binascii.Error):
        return None


class Renewal:
    """The agent's OIDC subject token, fetched again from the job's credential source at 60 % of the current one's
    lifetime (every 4 minutes when it says none) and written over the agent's token file as the agent's user
    (the folder is its: plan-runner never writes there through a link it could have planted). A failed fetch is
    tried again at the next tick; the agent keeps the token it has."""

    DEFAULT_S = 240.0
    MIN_S = 1.0

    def __init__(self, source: Mapping, path: Path, token: str, fetch: Callable[[Mapping], str]) -> None:
        self.source, self.path, self.fetch = source, path, fetch
        self.tokens: list[str] = []  # each token fetched since: secrets, like the first
        self.errors: list[str] = []
        self._due = self._next(token)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.identity: Identity | None = None
        self.on_token: Callable[[str], None] = lambda token: None

    def _next(self, token: str) -> float:
        window = jwt_window(token)
        now = time.time()
        if window is None or window[1] <= window[0]:
            return now + self.DEFAULT_S
        issued, expires = window
        return max(now + self.MIN_S, issued + 0.6 * (expires - issued))

    def renew(self) -> None:
        from runner.adapters.sandbox import proc

        token = self.fetch(self.source)
        done = proc.run(["/bin/sh", "-c", 'umask 077 && cat > "$1.new" && mv -f "$1.new" "$1"', "sh", str(self.path)],
                        cwd="/", env={"PATH": "/usr/bin:/bin"}, time_limit_s=30, identity=self.identity,
                        stdin_text=token)
        if done.returncode != 0:
            raise OSError(f"writing {self.path} as the agent's user failed")
        self.tokens.append(token)
        self.on_token(token)
        self._due = self._next(token)

    def start(self, identity: Identity, on_token: Callable[[str], None] = lambda token: None) -> None:
        self.identity, self.on_token = identity, on_token
        self._thread = threading.Thread(target=self._run, name="oidc-renewal", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(max(0.05, min(self._due - time.time(), 30.0))):
            if time.time() < self._due:
                continue
            try:
                self.renew()
            except (OSError, ValueError, KeyError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._due = time.time() + min(30.0, self.DEFAULT_S)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=35)


def place(spec: BackendSpec, provider: str | None, parent_env: Mapping[str, str], agent_env: Mapping[str, str],
          folder: Path, identity: Identity, fetch: Callable[[Mapping], str] = _fetch_subject_token) -> Placed:
    """Write the agent's credential files into `folder` (fresh, 0700, files 0600: the room's uid is plan-runner's)."""
    files, placed = plan_files(spec, provider, parent_env, agent_env, folder, fetch)
    identity.remove(folder)
    if not files:
        return placed
    os.mkdir(folder, 0o700)
    for name, data in files.items():
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    return placed


def remove(folder: Path, identity: Identity) -> None:
    identity.remove(folder)
