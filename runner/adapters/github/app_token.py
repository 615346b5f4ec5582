"""The push token minted inside plan-runner from a GitHub App's id and private key (the action's `app-id` and
`app-private-key` inputs), refreshed before each push when it is close to expiry.

GitHub's steps ("Generating an installation access token for a GitHub App"): a JWT signed with the App's key
(RS256, `iss` the App's id, at most ten minutes long); `GET /repos/{owner}/{repo}/installation` with it for the
installation on this repository; `POST /app/installations/{id}/access_tokens`, here scoped to this one repository
and to the permissions plan-runner pushes and opens the pull request with. The token expires an hour after it is
made ("Installation tokens expire one hour from the time you create them"; an expired one answers 401), so a
token stored as a secret cannot work for a job that outlives it: plan-runner mints its own, and a new one before
a push when less than REFRESH_MARGIN_S is left. PyGithub's `Auth.AppAuth` signs the JWT.

The key and the token are plan-runner's alone: the agent's environment never carries them (runner.adapters.sandbox.
agentenv refuses their names even when a plan lists them), and every token minted is masked in the job's log and
redacted from what plan-runner writes (`on_secret`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from runner.core.errors import PlanRunnerError

APP_ID = "PLAN_RUNNER_APP_ID"  # the action's `app-id` input
APP_PRIVATE_KEY = "PLAN_RUNNER_APP_PRIVATE_KEY"  # the action's `app-private-key` input (a secret)
REFRESH_MARGIN_S = 10 * 60  # a token with less left than this is replaced before the next push
STILL_GOOD_S = 60  # when a new one cannot be minted, the token in hand serves while it has this much left
# What the minted token may do: push the work branch and state refs, open and update the final pull request.
TOKEN_PERMISSIONS = {"contents": "write", "pull_requests": "write"}
APP_FIX = ("check the App's id (`app-id`, its number on the App's settings page), that `app-private-key` holds "
           "the App's whole private key (the .pem file GitHub generated, BEGIN and END lines included), that "
           "the App is installed on this repository, and that it has Contents and Pull requests: read and write "
           "(docs/github-actions.md, \"A push token from a GitHub App\")")


@dataclass(frozen=True)
class Minted:
    token: str
    expires_at: float  # epoch seconds


def parse_time(text: str) -> float:
    """GitHub's `expires_at` (ISO 8601, `Z`) as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def app_inputs(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The App's id and private key, when the action was given them; a clear error when only one was."""
    app_id, key = (env.get(APP_ID) or "").strip(), env.get(APP_PRIVATE_KEY) or ""
    if not app_id and not key.strip():
        return None
    if not app_id or not key.strip():
        given, missing = ("app-id", "app-private-key") if app_id else ("app-private-key", "app-id")
        raise PlanRunnerError(
            what=f"the action was given `{given}` without `{missing}`",
            why="plan-runner mints its push token from both: the App's id and its private key",
            fix="pass both, e.g.\n  with:\n    app-id: ${{ vars.PLAN_RUNNER_APP_ID }}\n"
                "    app-private-key: ${{ secrets.PLAN_RUNNER_APP_PRIVATE_KEY }}")
    if not app_id.isdigit():
        raise PlanRunnerError(what="`app-id` is not a GitHub App's id",
                              why="an App's id is a number (its settings page: \"App ID\"); "
                                  "the client id (Iv1...) is another thing", fix=APP_FIX)
    if "PRIVATE KEY-----" not in key:
        raise PlanRunnerError(what="`app-private-key` is not a PEM private key",
                              why="it has no `-----BEGIN ... PRIVATE KEY-----` line", fix=APP_FIX)
    return app_id, key.replace("\\n", "\n") if "\n" not in key.strip() else key


def mint(api_url: str, repository: str, app_id: str, private_key: str) -> Minted:
    """One installation token for `repository` (owner/name), through PyGithub."""
    owner, _, name = repository.partition("/")
    with _unlogged():
        return _mint(api_url, owner, name, repository, app_id, private_key)


@contextmanager
def _unlogged() -> Iterator[None]:
    """PyGithub's requester logs each request and answer at DEBUG (with the runner's debug logging on, plan-runner
    passes those records to the job's log: runner.drivers.actions.main.debug_logging); an answer holding a token
    would be logged before plan-runner could know the token to mask it. The requester says nothing while a token is
    minted."""
    log = logging.getLogger("github.Requester")
    saved, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = saved


def _mint(api_url: str, owner: str, name: str, repository: str, app_id: str, private_key: str) -> Minted:
    from github import Auth, GithubException, GithubIntegration

    from runner.adapters.github.api import api_message

    try:
        gi = GithubIntegration(auth=Auth.AppAuth(int(app_id), private_key), base_url=api_url,
                               seconds_between_requests=None, seconds_between_writes=None, timeout=30)
    except Exception as exc:  # noqa: BLE001 - a key PyJWT cannot read
        raise PlanRunnerError(what="plan-runner could not read the GitHub App's private key",
                              why=f"{type(exc).__name__}", fix=APP_FIX) from None
    try:
        try:
            installation = gi.get_repo_installation(owner, name)
            _, data = gi.requester.requestJsonAndCheck(
                "POST", f"/app/installations/{int(installation.id)}/access_tokens",
                input={"repositories": [name], "permissions": TOKEN_PERMISSIONS})
        except GithubException as exc:
            step = ("finding the App's installation on this repository" if "installation" not in locals()
                    else "minting the installation token")
            why = f"GitHub answered {exc.status} while {step}: {api_message(exc) or 'no message'}"
            if exc.status == 404 and "installation" not in locals():
                why += f" (the App is not installed on {repository}, or `app-id` names another App)"
            raise PlanRunnerError(what="plan-runner could not mint a push token from the GitHub App",
                                  why=why, fix=APP_FIX) from None
        except ValueError as exc:  # PyJWT: a malformed key
            raise PlanRunnerError(what="plan-runner could not sign with the GitHub App's private key",
                                  why=f"{type(exc).__name__}", fix=APP_FIX) from None
        except Exception as exc:  # noqa: BLE001 - the network: a clear error, never a trace
            raise PlanRunnerError(what="plan-runner could not mint a push token from the GitHub App",
                                  why=f"{type(exc).__name__}: {str(exc)[:300]}", fix=APP_FIX) from None
    finally:
        gi.close()
    token, expires = data.get("token") if isinstance(data, dict) else None, \
        data.get("expires_at") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token or not isinstance(expires, str):
        raise PlanRunnerError(what="GitHub's answer held no installation token",
                              why="POST /app/installations/{id}/access_tokens answered without `token` or `expires_at`",
                              fix=APP_FIX)
    try:
        at = parse_time(expires)
    except ValueError:
        at = time.time() + 3600.0 - REFRESH_MARGIN_S  # GitHub's hour, counted from now, with the margin taken
    return Minted(token, at)


class AppToken:
    """The App's current installation token: minted once, minted again when less than REFRESH_MARGIN_S is left
    or when a push was refused with it (`refused`). Thread-safe (the progress thread's client asks too)."""

    def __init__(self, api_url: str, repository: str, app_id: str, private_key: str, *,
                 on_secret: Callable[[str], None] = lambda value: None,
                 clock: Callable[[], float] = time.time,
                 minter: Callable[[str, str, str, str], Minted] = mint) -> None:
        self._args = (api_url, repository, app_id, private_key)
        self._on_secret, self._clock, self._minter = on_secret, clock, minter
        self._lock = threading.Lock()
        self._current: Minted | None = None
        self.minted = 0

    def token(self) -> str:
        """The current token, minted again first when it is close to expiry (raises PlanRunnerError: minting
        failed)."""
        with self._lock:
            cur = self._current
            if cur is None or cur.expires_at - self._clock() < REFRESH_MARGIN_S:
                try:
                    cur = self._mint()
                except PlanRunnerError:
                    if cur is None or cur.expires_at - self._clock() < STILL_GOOD_S:
                        raise
                    # GitHub minted none just now, and the token in hand still has time: it serves this push
            return cur.token

    def expires_at(self) -> float | None:
        return self._current.expires_at if self._current else None

    def refused(self) -> str:
        """A push was refused with the current token (expired early, revoked): a new one (raises: GitHub would
        mint none)."""
        with self._lock:
            return self._mint().token

    def _mint(self) -> Minted:
        minted = self._minter(*self._args)
        self._on_secret(minted.token)  # masked before it is used anywhere
        self._current = minted
        self.minted += 1
        return minted
