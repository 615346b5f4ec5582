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
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.backend_spec import BackendSpec
from runner.core.errors import PlanRunnerError
from runner.adapters.sandbox.agentenv import json_strings
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


def _fetch_subject_token(source: Mapping, timeout_s: float = 30.0) -> str:
    """The token a URL credential source names (the Actions OIDC endpoint), fetched by plan-runner itself."""
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
                       fetch: Callable[[Mapping], str] = _fetch_subject_token) -> tuple[dict[str, bytes], list[str]]:
    """(the agent's files, the secrets they hold) for the Google credentials file at `path`."""
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
    if way is not None and way.file_env and agent_env.get(way.file_env):
        found, more = google_credentials(agent_env[way.file_env], parent_env, folder, fetch)
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
    return files, Placed(env=env, drop=tuple(drop), files=named, secrets=tuple(dict.fromkeys(secrets)))


def place(spec: BackendSpec, provider: str | None, parent_env: Mapping[str, str], agent_env: Mapping[str, str],
          folder: Path, identity: Identity, fetch: Callable[[Mapping], str] = _fetch_subject_token) -> Placed:
    """Write the agent's credential files into `folder` (fresh, 0700, files 0600, then the agent's user's)."""
    files, placed = plan_files(spec, provider, parent_env, agent_env, folder, fetch)
    identity.remove(folder)
    if not files:
        return placed
    os.mkdir(folder, 0o700)
    for name, data in files.items():
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    identity.give(folder)
    return placed


def remove(folder: Path, identity: Identity) -> None:
    identity.remove(folder)
