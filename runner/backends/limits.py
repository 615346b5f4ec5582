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
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.backends.claims import parse_claims
from runner.core.evidence import Hints
from runner.core.lazyre import LazyPattern

DEFAULT_LIMIT_PATTERNS: tuple[str, ...] = (
    r"rate[ _-]?limit(?!er)",
    r"\b429\b",
    r"usage limit",
    r"too many requests",
    r"quota exceeded|exceeded your (?:current )?quota",
    r"try again (?:in|at)\b",
    r"limit reached",
)
DEFAULT_AUTH_PATTERNS: tuple[str, ...] = (
    r"\b401\b",
    r"invalid (?:x-)?api[ _-]?key",
    r"authentication(?:_error| failed| error|\b)",
    r"unauthori[sz]ed",
    r"credit balance is too low",
    r"billing",
    r"please run /login|not logged in",
)
DEFAULT_TRANSIENT_PATTERNS: tuple[str, ...] = (
    r"overloaded",
    r"\b(?:500|502|503|504|529)\b",
    r"internal server error|service unavailable|bad gateway|gateway timeout",
    r"connection (?:reset|refused|error)|ECONNRESET|ETIMEDOUT|network error",
)


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
_RETRY_AFTER_BARE = LazyPattern(r"\bretry[- ]after:?\s*(\d+(?:\.\d+)?)\s*(?![\d.:]|\s*[a-z])", re.IGNORECASE)

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
