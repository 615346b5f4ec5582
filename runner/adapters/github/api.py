"""The PyGithub client plan-runner uses: bounded retries and one translation of failures.

Retries follow GitHub's rules (PyGithub's `GithubRetry`): 5xx and connection
errors back off exponentially, a secondary rate limit waits `Retry-After` (or
`secondary_rate_wait`), a primary one waits until `x-ratelimit-reset`. Every
wait is bounded by `max_rate_limit_wait`; past the budget the call raises
`ServiceUnavailable`, never hangs. An answer cut off mid-body is asked for again
when the request was a read (urllib3's retries end when the headers arrive, so
plan-runner's connection classes add that one); a write is never repeated.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
from github import Auth, Github, GithubException, GithubRetry
from github.GithubException import BadCredentialsException, RateLimitExceededExceedsMaxWait
from github.Requester import HTTPRequestsConnectionClass, HTTPSRequestsConnectionClass, Requester
from urllib3 import Retry

from runner.core.errors import PlanRunnerError, Refused, ServiceUnavailable

PERMISSIONS_FIX = """\
give the workflow the permissions plan-runner needs:
  permissions:
    contents: write
    issues: write
    pull-requests: write
    actions: write
    checks: read
    statuses: read"""
PULL_REQUESTS_SETTING_FIX = """\
let GitHub Actions open pull requests in this repository (the workflow's `pull-requests: write` is \
already there and is not enough):
  Settings > Actions > General > Workflow permissions >
  [x] Allow GitHub Actions to create and approve pull requests > Save
(in an organisation the same box must also be ticked in the organisation's Actions settings);
or give the action a `push-token` (a GitHub App installation token, or a fine-grained personal access
token with Contents and Pull requests: read and write): plan-runner opens the pull request with it, the setting
binds only the job's own token, and CI runs on a pull request that token did not open.
Then answer the park issue with `/plan-runner resume`: plan-runner opens the pull request."""
ISSUES_DISABLED_FIX = """\
turn Issues on: Settings > General > Features > [x] Issues; then start the workflow for this plan \
again (Actions > plan-runner > Run workflow): plan-runner opens the park issue and waits for an answer there."""
DISPATCH_RESUME = ("answer the park issue with `/plan-runner resume` (or start the workflow for this plan again): "
                   "plan-runner dispatches the next session; no tick retries a refused dispatch on its own")
DISPATCH_PERMISSION_FIX = """\
grant the job's token `actions: write` in .github/workflows/{workflow}, in the job that runs plan-runner
(a `permissions:` block sets every permission it leaves out to none):
  permissions:
    actions: write
    contents: write
    issues: write
    pull-requests: write
or, in an organisation whose policy keeps workflow tokens read-only, pass a GitHub App or fine-grained token
with Actions: read and write as `github-token`. Then """ + DISPATCH_RESUME.replace("{", "{{").replace("}", "}}")
STATUS_FIX = ("re-run the job later (plan-runner's state is unchanged); "
              "https://www.githubstatus.com shows GitHub's own incidents")


TEST_WAITS_ENV = "PLAN_RUNNER_TEST_GITHUB_WAITS"  # the testing switch of RetryPolicy.default


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one GitHub call. `fast()` is the testing switch: near-zero waits."""

    total: int = 6
    backoff_factor: float = 1.0  # waits factor * 2**(n-1) seconds between 5xx retries
    backoff_max: float = 60.0
    secondary_rate_wait: float = 60.0  # a secondary rate limit without Retry-After
    max_rate_limit_wait: float = 15 * 60.0  # longer waits give up instead
    timeout: int = 30  # per request, whole seconds (PyGithub insists on an int)
    # GitHub asks integrators to space writes; this is PyGithub's own default.
    seconds_between_requests: float = 0.25
    seconds_between_writes: float = 1.0

    @classmethod
    def default(cls, env: Mapping[str, str] | None = None) -> RetryPolicy:
        """The policy of a driver not given one: the production policy, or with the testing switch
        `PLAN_RUNNER_TEST_GITHUB_WAITS=0` in plan-runner's own environment the same policy without its waits
        (`no_waits`): a test against a local GitHub server does not pace its calls for GitHub's sake."""
        value = (os.environ if env is None else env).get(TEST_WAITS_ENV)
        if value is None or value == "":
            return cls()
        if value != "0":
            raise PlanRunnerError(what=f"{TEST_WAITS_ENV}={value!r} is not a known value",
                                  why=f"{TEST_WAITS_ENV} is a testing switch: 0 turns GitHub's pacing and backoff waits off",
                                  fix=f"set {TEST_WAITS_ENV}=0, or unset it for the production waits")
        return cls.no_waits()

    @classmethod
    def no_waits(cls, **overrides: Any) -> RetryPolicy:
        """The production policy (the same retries, limits and timeouts) with near-zero waits between calls and
        retries."""
        values: dict[str, Any] = dict(backoff_factor=0.01, backoff_max=0.05, secondary_rate_wait=0.05,
                                      seconds_between_requests=0.0, seconds_between_writes=0.0)
        return cls(**{**values, **overrides})

    @classmethod
    def fast(cls, **overrides: Any) -> RetryPolicy:
        values: dict[str, Any] = dict(total=3, backoff_factor=0.01, backoff_max=0.05, secondary_rate_wait=0.05,
                                      max_rate_limit_wait=5.0, timeout=5, seconds_between_requests=0.0,
                                      seconds_between_writes=0.0)
        return cls(**{**values, **overrides})


class BoundedRetry(GithubRetry):
    """GithubRetry that also bounds a `Retry-After` wait (urllib3 would sleep any length)."""

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, _pool: Any = None, _stacktrace: Any = None) -> Any:
        # A POST sent but never answered (timeout, reset mid-answer) may have been carried out: a dispatch,
        # a new issue. Retrying it could act twice, so it fails instead (ServiceUnavailable); the ledger's
        # intent and the park issue lookup make the next job finish the act exactly once.
        if error is not None and (method or "").upper() == "POST" and self._is_read_error(error):
            raise error.with_traceback(_stacktrace)
        return super().increment(method=method, url=url, response=response, error=error, _pool=_pool,
                                 _stacktrace=_stacktrace)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if method.upper() == "POST" and status_code >= 500:
            return False  # it may have been carried out; see `make_client`
        return bool(super().is_retry(method, status_code, has_retry_after))

    def get_retry_after(self, response: Any) -> float | None:
        wait = super().get_retry_after(response)
        if wait is not None and self.max_rate_limit_wait is not None and wait > self.max_rate_limit_wait:
            raise RateLimitExceededExceedsMaxWait(response.status, None, dict(response.headers), wait=wait)
        return wait


_SAFE_TO_REPEAT = frozenset({"GET", "HEAD"})


class ReadRetryAdapter(requests.adapters.HTTPAdapter):
    """Reads the body of a GET or HEAD answer at once and asks again (bounded by the Retry's total, with
    its backoff) when it is cut off; other answers are left to requests, so a write is never repeated."""

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None, verify: Any = True,
             cert: Any = None, proxies: Mapping[str, str] | None = None) -> requests.Response:
        kwargs: dict[str, Any] = {"timeout": timeout, "verify": verify, "cert": cert, "proxies": proxies}
        if stream or (request.method or "").upper() not in _SAFE_TO_REPEAT:
            return super().send(request, stream=stream, **kwargs)
        retry = self.max_retries
        attempts = max(1, int(retry.total or 0) + 1)
        for attempt in range(attempts):
            response = super().send(request, stream=True, **kwargs)
            try:
                response.content  # noqa: B018 - read the whole body now, where a cut can be retried
                return response
            except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError):
                response.close()
                if attempt == attempts - 1:
                    raise
                time.sleep(min(retry.backoff_max, retry.backoff_factor * (2 ** attempt)))
        raise AssertionError("unreachable")  # pragma: no cover


def _mount_read_retry(connection: Any, scheme: str) -> None:
    connection.adapter = ReadRetryAdapter(max_retries=connection.retry, pool_connections=connection.pool_size,
                                          pool_maxsize=connection.pool_size)
    connection.session.mount(scheme, connection.adapter)


class _Http(HTTPRequestsConnectionClass):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _mount_read_retry(self, "http://")


class _Https(HTTPSRequestsConnectionClass):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _mount_read_retry(self, "https://")


class CurrentToken(Auth.Auth):
    """A token asked for at each request (a GitHub App's installation token, minted again before it expires)."""

    def __init__(self, get: Callable[[], str]) -> None:
        self._get = get

    @property
    def token_type(self) -> str:
        return "token"

    @property
    def token(self) -> str:
        return self._get()

    @property
    def _masked_token(self) -> str:
        return "token (removed)"


def make_client(api_url: str, token: str | Callable[[], str], policy: RetryPolicy) -> Github:
    if not token:
        raise PlanRunnerError(
            what="no GitHub token was given",
            why="plan-runner needs a token to dispatch runs and open issues and pull requests",
            fix="pass the job's token to the action:\n  with:\n    github-token: ${{ github.token }}",
        )
    retry = BoundedRetry(
        total=policy.total,
        backoff_factor=policy.backoff_factor,
        backoff_max=policy.backoff_max,
        secondary_rate_wait=policy.secondary_rate_wait,
        max_rate_limit_wait=policy.max_rate_limit_wait,
        status_forcelist=[429, *range(500, 600)],
        # PATCH (edit/close an issue) is idempotent; urllib3 leaves it out by default. POST is not retried on
        # a 5xx: GitHub may have carried it out (a dispatch, an issue, a comment) before failing the answer; the
        # ledger's intent and a lookup (`find_park_issue`, `_open_pull`, the session that never started)
        # decide whether the next job sends it again. Rate limits (403/429) are retried: nothing was done.
        allowed_methods=Retry.DEFAULT_ALLOWED_METHODS | {"GET", "PATCH", "POST"},
    )
    Requester.injectConnectionClasses(_Http, _Https)  # PyGithub's hook for its connection classes
    return Github(
        base_url=api_url,
        auth=CurrentToken(token) if callable(token) else Auth.Token(token),
        retry=retry,
        timeout=max(1, int(policy.timeout)),
        seconds_between_requests=policy.seconds_between_requests or None,
        seconds_between_writes=policy.seconds_between_writes or None,
        lazy=True,
    )


def accepted_permissions(headers: Any) -> str:
    """GitHub's `X-Accepted-GitHub-Permissions` header of a refused call (e.g. `actions=write`; alternatives
    are separated by `;`), or "" when the answer has none (OAuth and classic tokens get scopes instead)."""
    for key, value in dict(headers or {}).items():
        if str(key).lower() == "x-accepted-github-permissions" and isinstance(value, str):
            return value.strip()
    return ""


def permissions_fix(accepted: str) -> str:
    """The fix for a 403: the permissions GitHub says the call needs, as `permissions:` lines, first."""
    first = accepted.split(";")[0].strip()
    lines = [f"    {name.strip()}: {level.strip()}" for name, _, level in
             (pair.partition("=") for pair in first.split(",")) if name.strip() and level.strip() and name != "metadata"]
    if not lines:
        return PERMISSIONS_FIX
    return ("GitHub says this call needs " + first.replace("=", ": ")
            + (f" (or: {'; '.join(a.strip() for a in accepted.split(';')[1:])})" if ";" in accepted else "")
            + "; add it to the `permissions:` of the job that runs plan-runner:\n  permissions:\n"
            + "\n".join(lines) + "\nbeside the others plan-runner needs (contents, issues, pull-requests and actions: "
            "write; checks and statuses: read for `checks:` gates)")


def api_message(exc: GithubException) -> str:
    return _message(exc)


def _message(exc: GithubException) -> str:
    data = exc.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        extra = data.get("errors")
        details = ""
        if isinstance(extra, list):
            details = "; ".join(str(e.get("message") or e.get("code")) for e in extra if isinstance(e, dict))
        return data["message"] + (f" ({details})" if details else "")
    return str(exc.message or data or "")


@contextmanager
def github_call(action: str) -> Iterator[None]:
    """Translate any failure of the GitHub calls inside into plan-runner's user-facing errors."""
    try:
        yield
    except RateLimitExceededExceedsMaxWait as exc:
        raise ServiceUnavailable(
            what=f"GitHub rate limit while {action}",
            why=f"the limit lifts in {exc.wait or 0:.0f} s, longer than plan-runner waits in one job",
            fix=STATUS_FIX,
        ) from None
    except BadCredentialsException:
        raise PlanRunnerError(
            what=f"GitHub rejected the token while {action} (401 Bad credentials)",
            why="the token is missing, expired or revoked",
            fix="pass a valid token: `github-token: ${{ github.token }}` (or a secret holding a PAT)",
        ) from None
    except GithubException as exc:
        message = _message(exc)
        if exc.status >= 500 or exc.status == 429 or Requester.isRateLimitError(message):
            raise ServiceUnavailable(
                what=f"GitHub stayed unavailable while {action} ({exc.status})",
                why=f"{message or 'no message'}; retries were exhausted", fix=STATUS_FIX) from None
        if exc.status == 403 and "not permitted to create or approve pull requests" in message:
            raise Refused(what=f"GitHub refused {action}: GitHub Actions may not open pull requests here (403)",
                          why="the repository setting \"Allow GitHub Actions to create and approve pull requests\" "
                              "is off, as it is by default", fix=PULL_REQUESTS_SETTING_FIX) from None
        if exc.status == 410:
            raise Refused(what=f"GitHub refused {action}: issues are disabled in this repository (410)",
                          why=message or "Issues are disabled for this repo", fix=ISSUES_DISABLED_FIX) from None
        if exc.status == 403:
            accepted = accepted_permissions(exc.headers)
            raise Refused(what=f"GitHub refused {action} (403)",
                          why=(message or "the token lacks a permission")
                          + (f"; the call needs {accepted} (X-Accepted-GitHub-Permissions)" if accepted else ""),
                          fix=permissions_fix(accepted) if accepted else PERMISSIONS_FIX) from None
        if exc.status == 404:
            raise PlanRunnerError(
                what=f"GitHub found nothing while {action} (404)",
                why=f"{message}: the repository, workflow or object does not exist, or the token cannot see it",
                fix="check GITHUB_REPOSITORY and the workflow file name; " + PERMISSIONS_FIX) from None
        raise PlanRunnerError(what=f"GitHub answered {exc.status} while {action}", why=message,
                              fix="see the message above; the request plan-runner made was refused") from None
    except requests.exceptions.RequestException as exc:
        # RetryError (5xx past the budget), ConnectionError, Timeout: all "GitHub is not answering".
        raise ServiceUnavailable(
            what=f"GitHub stayed unavailable while {action}",
            why=f"{type(exc).__name__}: {_short(exc)}", fix=STATUS_FIX) from None


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "..."
