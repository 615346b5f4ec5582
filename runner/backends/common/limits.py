"""Reading rate-limit, auth and transient-error signs out of an agent CLI's text.

Pure functions: the caller passes the text and the current time. Reset times in
CLI messages come in many shapes ("try again in 3 days 6 hours", Codex's "Try
again at Jun 3rd, 2025 3:28 PM", Claude Code's "limit reached|1735689600" and
"resets 3pm (Europe/Berlin)", ISO timestamps); `parse_reset_hint` knows them all.
`parse_hints` normalises what the agent claims about itself (a hint, never evidence).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.backends.common.claims import parse_claims
from runner.core.evidence import ExitKind, Hints
from runner.core.lazyre import LazyPattern

# The signal readers. Every pattern is word-bounded, and a bare number never means a status: a status code
# counts only where the text says it is one (`_STATUS`: "API Error: 401", "status 429", "HTTP 503",
# `"api_error_status":429`, "429 Too Many Requests", "rejected (429)"), so "built in 401 ms" or
# "ran 5030 tests" are not failures. Read in this order (the first kind that matches wins): billing (a
# human must pay), authentication (a human must log in), limits (wait for the reset), unreachable endpoint,
# overload and other transient errors. tests/data/signal-samples-*.txt hold what the CLIs and APIs really print.
_S = r"(?:api[ _]error[ _]status|error[ _]status|status[ _]code|status|http(?:/\d(?:\.\d)?)?|api error|error|last status)"
_STATUS = (
    r"(?:\b" + _S + r"\b[\"']?\s*[:=]?\s*\(?(?P<a>\d{3})\b(?!\s*(?:ms|s|sec|seconds?|minutes?|files?|lines?|tests?)\b))"
    r"|(?:\b(?P<b>\d{3})\s+(?:too many requests|unauthori[sz]ed|forbidden|payment required|internal server error"
    r"|bad gateway|service unavailable|gateway time-?out|overloaded)\b)"
    r"|(?:\brejected\s*\((?P<c>\d{3})\))"
)
DEFAULT_BILLING_PATTERNS: tuple[str, ...] = (
    r"\bcredit balance is too low\b",
    r"\bbilling_error\b",
    r"\binsufficient_quota\b",
    r"\b(?:check|upgrade) your plan and billing\b",
    r"\bplans? (?:&|and) billing\b",
    r"\b(?:enforced_)?spend(?:ing)?[ _]limit(?:[ _]reached|s? (?:has been |was )?reached)\b",
    r"\bpayment required\b",
)
DEFAULT_AUTH_PATTERNS: tuple[str, ...] = (
    r"\bauthentication_(?:error|failed)\b",
    r"\bfailed to authenticate\b",
    r"\binvalid (?:x-)?api[ _-]?key\b",
    r"\binvalid bearer token\b",
    r"\binvalid authentication credentials\b",
    r"\boauth (?:access )?(?:token|session) (?:has )?expired\b",
    r"\b(?:token|session) (?:has )?expired and could not be refreshed\b|\bcould not be refreshed\b",
    r"\brefresh token (?:has )?(?:expired|was revoked|is invalid)\b",
    r"\bclaude setup-token\b",
    r"(?:please run|run) /login\b|\bnot logged in\b|\bplease log ?in\b",
    r"\bunauthori[sz]ed\b",
    r"\bpermission_error\b|\boauth_org_not_allowed\b",
)
DEFAULT_LIMIT_PATTERNS: tuple[str, ...] = (
    r"\brate[ _-]?limit(?:ed|s|_error|_exceeded)?\b(?!er)",
    r"\busage[ _]limit(?:s|_reached)?\b",
    r"\bhit (?:your|the) (?:[\w-]+ ){0,2}limit\b",
    r"\b(?:weekly|daily|monthly|session|5-hour|five-hour|opus|sonnet) limit\b",
    r"\blimit (?:reached|exceeded)\b|\blimit will reset\b",
    r"\btoo many requests\b",
    r"\bquota (?:exhausted|exceeded|reached)\b|\bexceeded your (?:current )?quota\b",
    # told to come back after a while ("try again in 30s", "retry after 2 minutes"): a wait, whatever the rest says
    r"\b(?:try again|retry) (?:in|after) \d+(?:\.\d+)?\s*(?:s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)\b",
)
DEFAULT_UNREACHABLE_PATTERNS: tuple[str, ...] = (
    r"\bconnection refused\b|\bECONNREFUSED\b",
    r"\bENOTFOUND\b|\bEAI_AGAIN\b|\bgetaddrinfo\b|\bname or service not known\b|\bnodename nor servname\b"
    r"|\btemporary failure in name resolution\b|\bfailed to lookup address\b|\bdns error\b|\bcould not resolve host\b",
    r"\bcertificate (?:verify failed|has expired|is not valid)|\bself[- ]signed certificate\b|\bunable to (?:get local issuer|verify the first) certificate\b"
    r"|\bCERT_[A-Z_]+\b|\bSSL(?:Error| routines|: )|\btls handshake\b|\bUNABLE_TO_VERIFY_LEAF_SIGNATURE\b",
    r"\bunable to connect to (?:the )?api\b|\bconnection failed: error sending request\b|\bEHOSTUNREACH\b|\bENETUNREACH\b"
    r"|\bno route to host\b|\bnetwork is unreachable\b",
)
DEFAULT_TRANSIENT_PATTERNS: tuple[str, ...] = (
    r"\boverloaded(?:_error)?\b",
    r"\binternal server error\b|\bservice unavailable\b|\bbad gateway\b|\bgateway time-?out\b|\bserver_error\b",
    r"\bhigh demand\b|\bstream disconnected\b|\btemporar(?:y|ily) (?:error|unavailable)\b",
    r"\bconnection (?:reset|error|closed)\b|\bECONNRESET\b|\bETIMEDOUT\b|\bsocket hang up\b|\bnetwork error\b",
)
# (status code, kind): only codes the text names as a status
_STATUS_KIND = {402: "billing", 401: "auth", 403: "auth", 429: "rate_limit"}
_STATUS_TRANSIENT = frozenset({500, 502, 503, 504, 529})

SignalKind = str  # "billing" | "auth" | "rate_limit" | "unreachable" | "transient"


@dataclass(frozen=True)
class TextSignal:
    """What a failure text says: its kind, the words that said it, and when a limit ends (if it says)."""

    kind: SignalKind
    matched: str
    reset_at: datetime | None = None

    @property
    def exit_kind(self) -> ExitKind:
        return {"billing": ExitKind.AUTH, "auth": ExitKind.AUTH, "rate_limit": ExitKind.RATE_LIMIT}.get(
            self.kind, ExitKind.TRANSIENT)


def status_codes(text: str) -> list[int]:
    """The HTTP status codes `text` names as such, in order ("API Error: 401", "429 Too Many Requests")."""
    found = []
    for m in re.finditer(_STATUS, text, re.IGNORECASE):
        value = int(m["a"] or m["b"] or m["c"])
        if 100 <= value <= 599:
            found.append(value)
    return found


def read_signal(text: str, now: datetime, *, limit_patterns: Iterable[str] = ()) -> TextSignal | None:
    """The one reader of failure text: billing, auth, limit (with its reset), unreachable or transient; None
    when the text says none of these. `limit_patterns` (a plan's `agent.limit_patterns`) add to the defaults."""
    if not text:
        return None
    codes = status_codes(text)
    matched = first_match(DEFAULT_BILLING_PATTERNS, text)
    if matched or 402 in codes:
        return TextSignal("billing", matched or "402")
    matched = first_match(DEFAULT_AUTH_PATTERNS, text)
    if matched or 401 in codes or 403 in codes:
        return TextSignal("auth", matched or str(next(c for c in codes if c in (401, 403))))
    matched = first_match((*limit_patterns, *DEFAULT_LIMIT_PATTERNS), text)
    if matched or 429 in codes:
        matched = matched or "429"
        # prefer the line that announced the limit: other lines may carry unrelated times
        line = next((ln for ln in text.splitlines() if matched in ln), "")
        return TextSignal("rate_limit", matched, parse_reset_hint(line, now) or parse_reset_hint(text, now))
    matched = first_match(DEFAULT_UNREACHABLE_PATTERNS, text)
    if matched:
        return TextSignal("unreachable", matched)
    matched = first_match(DEFAULT_TRANSIENT_PATTERNS, text)
    transient = next((c for c in codes if c in _STATUS_TRANSIENT), None)
    if matched or transient is not None:
        return TextSignal("transient", matched or str(transient))
    return None


def first_match(patterns: Iterable[str], text: str) -> str | None:
    """The first pattern (case-insensitive) found in `text`, as the matched text."""
    for pattern in patterns:
        m = re.search(pattern, text, re.IGNORECASE)
        if m:
            return m.group(0)
    return None


_UNIT_SECONDS = {
    "w": 604800, "wk": 604800, "wks": 604800, "week": 604800, "weeks": 604800,
    "d": 86400, "day": 86400, "days": 86400,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
}
_UNIT = r"(?:weeks?|wks?|w|days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s|milliseconds?|ms)"
_AMOUNT = rf"\d+(?:\.\d+)?\s*{_UNIT}\b"
_RELATIVE = LazyPattern(
    rf"\b(?:in|after|wait(?:ing)?(?:\s+for)?|retry[- ]after:?|for)\s+(?:~\s*|about\s+|approximately\s+)?"
    rf"((?:{_AMOUNT}[\s,]*(?:and\s+)?)+)",
    re.IGNORECASE,
)
_PAIR = LazyPattern(rf"(\d+(?:\.\d+)?)\s*({_UNIT})\b", re.IGNORECASE)
# HTTP `Retry-After: 30`, JSON `"retry_after": 30`, `retry_after=30`, Codex's `"resets_in_seconds": 1800`
_RETRY_AFTER_BARE = LazyPattern(
    r"\b(?:retry[-_ ]after|resets_in_seconds|retry_after_seconds)[\"']?\s*[:=]?\s*[\"']?(\d+(?:\.\d+)?)[\"']?(?![\d.:])(?![ \t]*[a-z])",
    re.IGNORECASE)

_ISO = LazyPattern(
    r"\b(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)(?!\d)"
)
_MONTHS = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], start=1)}
_CLOCK = LazyPattern(
    r"\b(?:at|resets?(?:\s+at)?|until|after)\s+"
    r"(?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+"
    r"(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?(?::(?P<second>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?"
    r"(?:\s*(?P<utc>UTC|GMT|Z)\b)?(?:\s*\((?P<zone>[A-Za-z_]+(?:/[A-Za-z_+-]+)*)\))?",
    re.IGNORECASE,
)
_EPOCH = LazyPattern(r"(?<![\d.])(\d{10}|\d{13})(?![\d.])")


def _relative(text: str, now: datetime) -> datetime | None:
    m = _RELATIVE.search(text)
    if m:
        total = sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in _PAIR.findall(m.group(1)))
        if total > 0:
            return now + timedelta(seconds=total)
    m = _RETRY_AFTER_BARE.search(text)  # HTTP Retry-After: seconds
    if m:
        return now + timedelta(seconds=float(m.group(1)))
    return None


def _iso(text: str, now: datetime) -> datetime | None:
    m = _ISO.search(text)
    if not m:
        return None
    raw = m.group(1).replace(" ", "T", 1)
    if re.search(r"[+-]\d{4}$", raw):
        raw = raw[:-2] + ":" + raw[-2:]
    try:
        value = datetime.fromisoformat(raw)  # 3.11 reads a trailing Z
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=now.tzinfo)


def _zone(name: str | None, utc: str | None, default: tzinfo | None) -> tzinfo | None:
    if utc:
        return UTC
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return default
    return default


def _clock(text: str, now: datetime) -> datetime | None:
    for m in _CLOCK.finditer(text):
        hour, minute = int(m["hour"]), int(m["minute"] or 0)
        ampm = (m["ampm"] or "").replace(".", "").lower()
        if not ampm and m["minute"] is None:
            continue  # "at 3" alone is a count, not a time
        if ampm:
            if not 1 <= hour <= 12:
                continue
            hour = hour % 12 + (12 if ampm == "pm" else 0)
        if hour > 23 or minute > 59:
            continue
        tz = _zone(m["zone"], m["utc"], now.tzinfo)
        local_now = now.astimezone(tz) if tz is not None else now
        if m["mon"]:
            year = int(m["year"]) if m["year"] else local_now.year
            try:
                value = local_now.replace(year=year, month=_MONTHS[m["mon"][:3].lower()], day=int(m["day"]),
                                          hour=hour, minute=minute, second=int(m["second"] or 0), microsecond=0)
            except ValueError:
                continue
            if not m["year"] and value < local_now - timedelta(days=1):
                value = value.replace(year=year + 1)  # "Jan 2nd" seen on Dec 31st
            return value
        value = local_now.replace(hour=hour, minute=minute, second=int(m["second"] or 0), microsecond=0)
        if value <= local_now:
            value += timedelta(days=1)  # a clock time already past today means tomorrow
        return value
    return None


def _epoch(text: str, now: datetime) -> datetime | None:
    for m in _EPOCH.finditer(text):
        seconds = int(m.group(1)) / (1000 if len(m.group(1)) == 13 else 1)
        value = datetime.fromtimestamp(seconds, tz=UTC)
        # a bare number is only a reset time if it is a plausible one (not a request id)
        if now - timedelta(days=1) <= value <= now + timedelta(days=60):
            return value.astimezone(now.tzinfo) if now.tzinfo else value
    return None


def parse_reset_hint(text: str, now: datetime) -> datetime | None:
    """When a rate limit ends, read from a CLI's message; None when the text says nothing usable.

    `now` should be timezone-aware; a clock time without a zone ("at 3:28 PM") is read
    in `now`'s zone (CLIs print the machine's local time) and means the next such time.
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    for parse in (_iso, _relative, _clock, _epoch):
        value = parse(text, now)
        if value is not None:
            return value
    return None


def parse_reset_with_pattern(text: str, pattern: str, now: datetime) -> datetime | None:
    """Apply a plan's `agent.reset_pattern` (group 1 = the reset time in any form above, or seconds)."""
    m = re.search(pattern, text, re.IGNORECASE)
    if not m:
        return None
    value = m.group(1) if m.groups() else m.group(0)
    if re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", value) and not _EPOCH.fullmatch(value.strip()):
        return now + timedelta(seconds=float(value))
    return parse_reset_hint(value, now) or parse_reset_hint(f"in {value}", now) or parse_reset_hint(f"at {value}", now)


FINAL_TEXT_LIMIT = 2000


def parse_hints(texts: list[str], output_bytes: int) -> Hints:
    """What an agent said about itself ("all tests pass", "done"); shown in the report, never decisive."""
    claims, claimed_done = parse_claims(texts)
    final = texts[-1] if texts else ""
    return Hints(
        claimed_done=claimed_done,
        final_text=final[-FINAL_TEXT_LIMIT:],
        claims=claims,
        empty_output=output_bytes == 0,
    )
