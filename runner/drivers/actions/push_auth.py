"""The token plan-runner's own git commands push with in a job, kept working for the whole job.

Which token: one minted from a GitHub App (`app-id`, `app-private-key`: runner.adapters.github.app_token),
else the `push-token` input, else the job's GITHUB_TOKEN. The git commands authenticate through a header in this
process's `GIT_CONFIG_*` variables (runner.adapters.action_io.git_credentials); before each command that talks to
the remote, a minted token close to its hour is replaced there (`before_remote`).

When the remote refuses the token (an installation token stored as a secret and past its hour, a revoked App, a
personal token that expired): a minted token is minted once more; then plan-runner pushes with the job's own
token, so the session is recorded and its work kept, and says so (`notes`: what, why, fix), since what the job's
token pushes starts no workflow. When that is refused too, the push fails with what, why and fix
(runner.adapters.git.branches.push_leased), the commits kept in the checkout's local refs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from runner.adapters.action_io import PUSH_TOKEN, basic_auth
from runner.adapters.github.app_token import AppToken, app_inputs
from runner.core.errors import PlanRunnerError
from runner.drivers.actions.env import ModeResult

STORED_TOKEN_FIX = ("a token stored as a secret cannot outlive its expiry (an App's installation token lasts an hour "
                    "from when it was made): give the action `app-id` and `app-private-key` instead, and "
                    "plan-runner mints its own token in the job and a new one before a push when it nears its hour "
                    "(docs/github-actions.md, \"A push token from a GitHub App\")")


KEPT_WITH_JOB_TOKEN = ("The session is recorded and its work kept, but GitHub starts no workflow for what the job's "
                       "token pushes: `checks:` gates and the pull request's CI do not run for this push")


class PushAuth:
    """The job's push credentials (runner.adapters.git.invoke.RemoteAuth)."""

    def __init__(self, env: dict[str, str], *, app: AppToken | None = None,
                 on_secret: Callable[[str], None] = lambda value: None) -> None:
        self.env, self.app, self._on_secret = env, app, on_secret
        self.job_token = env.get("GITHUB_TOKEN") or None
        self.fallen_back = False
        self.reminted = False
        self.notes: list[tuple[str, str, str]] = []  # (what, why, fix) of each switch, for the job's summary
        self._lock = threading.RLock()

    def current(self) -> str | None:
        """The token git pushes with now."""
        with self._lock:
            if self.app is not None and not self.fallen_back:
                try:
                    return self.app.token()
                except PlanRunnerError as err:  # GitHub would mint none: the job's token keeps the work
                    self._fall_back(f"{err.what} ({err.why})", refused=False)
            if self.fallen_back:
                return self.job_token
            return self.env.get(PUSH_TOKEN) or self.job_token

    def pull_token(self) -> str:
        """The token the final pull request is opened with (a callable's answer: a minted token stays current)."""
        token = self.current()
        if not token:
            raise PlanRunnerError(what="no token to open the pull request with", why="GITHUB_TOKEN is empty",
                                  fix="pass `github-token: ${{ github.token }}` (the default)")
        return token

    # --- runner.adapters.git.invoke.RemoteAuth ---------------------------------------------------------------

    def before_remote(self) -> None:
        with self._lock:
            if self.app is None or self.fallen_back:
                return
            try:
                token = self.app.token()
            except PlanRunnerError as err:  # GitHub would mint none: the job's token keeps the work
                self._fall_back(f"{err.what} ({err.why})", refused=False)
                return
            self._install(token)

    def refused(self, stderr: str) -> bool:
        with self._lock:
            return self._refused(stderr)

    def _refused(self, stderr: str) -> bool:
        last = (stderr.strip().splitlines() or ["refused"])[-1][:300]
        if self.fallen_back or not self.job_token:
            return False
        if self.app is not None and not self.reminted:  # revoked or expired early: a new one, once
            self.reminted = True
            try:
                self._install(self.app.refused())
                return True
            except PlanRunnerError as err:
                last = f"{last}; a new token could not be minted: {err.what} ({err.why})"
        if self.app is None and self.env.get(PUSH_TOKEN) in (None, "", self.job_token):
            return False  # it was the job's own token: nothing else to try
        self._fall_back(last)
        return True

    # ---

    def _fall_back(self, why: str, *, refused: bool = True) -> None:
        self.fallen_back = True
        source = "the token minted from the GitHub App" if self.app is not None else "the `push-token`"
        happened = f"the remote refused {source}" if refused else f"{source} could not be renewed before its hour"
        self.notes.append((
            f"{happened}: plan-runner pushed with the job's GITHUB_TOKEN instead",
            f"{why}. {KEPT_WITH_JOB_TOKEN}",
            (STORED_TOKEN_FIX if self.app is None else
             "check that the App is still installed on this repository with Contents and Pull requests: read and "
             "write, and that its private key was not revoked") + "; the next session pushes with the token again"))
        if self.job_token:
            self._install(self.job_token)

    def _install(self, token: str) -> None:
        """`token` in the header git sends (the slot git_credentials made), and known as a secret."""
        self._on_secret(token)
        header = f"http.{self.env.get('GITHUB_SERVER_URL', 'https://github.com').rstrip('/')}/.extraheader"
        n = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
        for i in range(n):
            if os.environ.get(f"GIT_CONFIG_KEY_{i}") == header:
                os.environ[f"GIT_CONFIG_VALUE_{i}"] = f"AUTHORIZATION: basic {basic_auth(token)}"
        if not self.fallen_back:
            self.env[PUSH_TOKEN] = token


def push_auth(env: dict[str, str], on_secret: Callable[[str], None]) -> PushAuth:
    """The job's PushAuth; with an App, its first token minted now and put in `env` as the push token (so every
    path that reads the `push-token` finds it). Raises PlanRunnerError: the App's inputs are wrong or GitHub
    refused to mint."""
    app = None
    given = app_inputs(env)
    if given is not None:
        repository = env.get("GITHUB_REPOSITORY", "")
        if repository.count("/") != 1:
            raise PlanRunnerError(what="GITHUB_REPOSITORY is not owner/name",
                                  why="the App's token is minted for the repository the job runs in",
                                  fix="run plan-runner as a step of a GitHub Actions job")
        app = AppToken(env.get("GITHUB_API_URL", "https://api.github.com"), repository, *given, on_secret=on_secret)
        env[PUSH_TOKEN] = app.token()
    return PushAuth(env, app=app, on_secret=on_secret)


def with_notes(result: ModeResult, auth: PushAuth | None, refused_too: bool = False) -> ModeResult:
    """The mode's result with what happened to the push token (a refusal, the job's token used instead) in its
    annotations and summary. `refused_too`: the job's token was refused as well (the job's error says so)."""
    for what, why, fix in auth.notes if auth is not None else ():
        if refused_too:
            why = why.replace(KEPT_WITH_JOB_TOKEN, "The job's token was refused too: the error above says what was "
                                                   "kept and how to push it")
        result.annotations.append(("warning", what, "plan-runner push token"))
        result.summary += f"\n> **{what}.**\n\n```text\n{PlanRunnerError(what, why, fix).render()}\n```\n"
    return result


def without_key() -> None:
    """Nothing this process starts inherits the App's private key (it stays in the AppToken alone)."""
    from runner.adapters.github.app_token import APP_PRIVATE_KEY

    os.environ.pop(APP_PRIVATE_KEY, None)
