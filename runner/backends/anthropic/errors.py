"""What an Anthropic API failure means for the session: a limit, a retry, a stall, or the end.

Pure apart from reading the exception and its response headers; `now` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Literal

import anthropic

from runner.backends.common.limits import parse_reset_hint
from runner.core.evidence import ExitKind

Action = Literal["retry", "stall", "end"]

_RESET_HEADERS = ("requests", "tokens", "input-tokens", "output-tokens")


@dataclass(frozen=True)
class ApiFailure:
    action: Action  # retry: transient, try again; stall: no progress for the read timeout; end: stop the session
    kind: ExitKind  # the exit kind when the session ends on it (after retries, for "retry")
    error: str
    reset_at: datetime | None = None
    retry_after_s: float | None = None
    no_answer: bool = False  # the request got no HTTP answer (connection refused, DNS, TLS): maybe unreachable


def _classes(*names: str) -> tuple[type, ...]:
    """SDK error classes by name; newer SDKs have more of them, older ones lack some."""
    return tuple(c for c in (getattr(anthropic, n, None) for n in names) if isinstance(c, type))


_BILLING = _classes(
    "PaymentRequiredError", "EnforcedSpendLimitReachedError", "ContractSpendLimitReachedError",
    "LinkedOrganizationSpendLimitReachedError", "LinkedOrganizationBillingUnavailableError", "OrganizationOnHoldError",
)
_BILLING_WORDS = ("credit balance", "billing", "spend limit", "payment required")


def _retry_after(headers: object, now: datetime) -> float | None:
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - now).total_seconds())


def _header(headers: object, name: str) -> str | None:
    get = getattr(headers, "get", None)
    value = get(name) if callable(get) else None
    return value if isinstance(value, str) and value.strip() else None


def _parse_stamp(raw: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def parse_rate_limit_reset(headers: object, message: str, now: datetime) -> datetime | None:
    """When the limit ends: the later of `retry-after` and the reset of every exhausted
    `anthropic-ratelimit-*` bucket (all of them must have refilled); else the message's own words."""
    candidates: list[datetime] = []
    retry_after = _retry_after(headers, now)
    if retry_after is not None:
        candidates.append(now + timedelta(seconds=retry_after))
    exhausted: list[datetime] = []
    every: list[datetime] = []
    for bucket in _RESET_HEADERS:
        raw = _header(headers, f"anthropic-ratelimit-{bucket}-reset")
        stamp = _parse_stamp(raw) if raw else None
        if stamp is None:
            continue
        every.append(stamp)
        if _header(headers, f"anthropic-ratelimit-{bucket}-remaining") == "0":
            exhausted.append(stamp)
    candidates += exhausted or ([] if candidates else every)
    if candidates:
        return max(candidates)
    return parse_reset_hint(message, now)


def _message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            kind = err.get("type")
            return f"{exc.status_code} {kind}: {err['message']}" if kind else f"{exc.status_code}: {err['message']}"
    return f"{exc.status_code}: {exc.message}"


def _is_read_timeout(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(c.__name__ in ("ReadTimeout", "WriteTimeout") for c in type(current).__mro__):
            return True
        current = current.__cause__ or current.__context__
    return False


def _is_transport_error(exc: BaseException) -> bool:
    """httpx (or the SDK's vendored httpx2) transport failures the SDK does not wrap mid-stream."""
    return any(c.__name__ in ("TransportError", "RemoteProtocolError") for c in type(exc).__mro__)


def classify_api_error(exc: BaseException, now: datetime) -> ApiFailure | None:
    """None: not an API failure (a bug of ours; let it propagate)."""
    if isinstance(exc, anthropic.APIStatusError):
        text = _message(exc)
        headers = exc.response.headers
        lowered = text.lower()
        if isinstance(exc, _BILLING) or any(w in lowered for w in _BILLING_WORDS):
            return ApiFailure("end", ExitKind.AUTH, f"billing: {text}")
        if isinstance(exc, (anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
            return ApiFailure("end", ExitKind.AUTH, text)
        if isinstance(exc, anthropic.RateLimitError) or exc.status_code == 429:
            return ApiFailure("end", ExitKind.RATE_LIMIT, text, reset_at=parse_rate_limit_reset(headers, text, now))
        if exc.status_code >= 500 or exc.status_code in (408, 409):
            return ApiFailure("retry", ExitKind.TRANSIENT, text, retry_after_s=_retry_after(headers, now))
        return ApiFailure("end", ExitKind.CRASHED, f"the API refused the request: {text}")
    if isinstance(exc, anthropic.APITimeoutError) or _is_read_timeout(exc):
        if _is_read_timeout(exc):
            return ApiFailure("stall", ExitKind.STALLED, "no response from the API within the stall timeout")
        return ApiFailure("retry", ExitKind.TRANSIENT, "the API request timed out")
    if isinstance(exc, anthropic.APIConnectionError) or _is_transport_error(exc):
        detail = str(exc.__cause__ or exc) or type(exc).__name__
        return ApiFailure("retry", ExitKind.TRANSIENT, f"connection error: {detail}", no_answer=True)
    if isinstance(exc, anthropic.APIResponseValidationError):
        return ApiFailure("retry", ExitKind.TRANSIENT, f"malformed API response: {exc}")
    return None
