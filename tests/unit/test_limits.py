"""Reading reset times and limit/auth/transient signs out of CLI text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from runner.backends.common.limits import parse_reset_hint, parse_reset_with_pattern, read_signal

NOW = datetime(2025, 6, 3, 14, 0, 0, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("You've hit your usage limit. Try again in 3 days 6 hours.", NOW + timedelta(days=3, hours=6)),
        ("Rate limited, please try again in 45 seconds", NOW + timedelta(seconds=45)),
        ("try again in 2h 30m", NOW + timedelta(hours=2, minutes=30)),
        ("Try again in ~5 min.", NOW + timedelta(minutes=5)),
        ("try again in 1 hour and 20 minutes", NOW + timedelta(hours=1, minutes=20)),
        ("429 Too Many Requests; retry-after: 30", NOW + timedelta(seconds=30)),
        ("You've hit your usage limit. Try again at 3:28 PM.", datetime(2025, 6, 3, 15, 28, tzinfo=UTC)),
        ("Try again at 9:05 AM.", datetime(2025, 6, 4, 9, 5, tzinfo=UTC)),  # already past: tomorrow
        ("try again at 16:45", datetime(2025, 6, 3, 16, 45, tzinfo=UTC)),
        ("You've hit your usage limit. Try again at Jun 5th, 2025 3:28 PM.",
         datetime(2025, 6, 5, 15, 28, tzinfo=UTC)),
        ("5-hour limit reached - resets 3pm (Europe/Berlin)", datetime(2025, 6, 4, 15, 0, tzinfo=BERLIN)),
        ("Your limit will reset at 5pm (Europe/Berlin)", datetime(2025, 6, 3, 17, 0, tzinfo=BERLIN)),
        ("limit resets at 2025-06-03T18:30:00Z", datetime(2025, 6, 3, 18, 30, tzinfo=UTC)),
        ("reset_at=2025-06-03 18:30:00+02:00", datetime(2025, 6, 3, 16, 30, tzinfo=UTC)),
        ("Claude AI usage limit reached|1748970000", datetime.fromtimestamp(1748970000, tz=UTC)),
        ("x-ratelimit-reset: 1748970000000", datetime.fromtimestamp(1748970000, tz=UTC)),
        ("quota exhausted, resets in 45m", NOW + timedelta(minutes=45)),
        ('{"error": "rate_limited", "retry_after": 90}', NOW + timedelta(seconds=90)),
        ("retry_after=12", NOW + timedelta(seconds=12)),
        ('"resets_in_seconds": 1800', NOW + timedelta(seconds=1800)),
        ("Retry-After: 30\nx-request-id: abc", NOW + timedelta(seconds=30)),
    ],
)
def test_parse_reset_hint_table(text, expected):
    """Each known way of saying when a limit ends gives that moment."""
    assert parse_reset_hint(text, NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        "You've hit your usage limit. Try again later.",
        "request id 1234567890 failed",  # a 10-digit id far from now is no reset time
        "processed 3 files at 3 levels",
        "",
    ],
)
def test_parse_reset_hint_none_when_text_gives_no_time(text):
    """Text without a usable time gives None, never a guess."""
    assert parse_reset_hint(text, NOW) is None


def test_clock_time_read_in_the_zone_of_now():
    """A clock time without a zone is read in now's zone (CLIs print local time)."""
    now = datetime(2025, 6, 3, 14, 0, tzinfo=BERLIN)
    assert parse_reset_hint("Try again at 3:28 PM.", now) == datetime(2025, 6, 3, 15, 28, tzinfo=BERLIN)


def test_naive_now_is_taken_as_utc():
    """A naive `now` is treated as UTC instead of failing on comparison."""
    got = parse_reset_hint("try again in 10 seconds", NOW.replace(tzinfo=None))
    assert got == NOW + timedelta(seconds=10)


def test_reset_pattern_from_plan():
    """A plan's reset_pattern group may hold seconds, a duration or a clock time."""
    assert parse_reset_with_pattern("cooldown=120", r"cooldown=(\d+)", NOW) == NOW + timedelta(seconds=120)
    assert parse_reset_with_pattern("wait: 2 hours", r"wait: (.+)", NOW) == NOW + timedelta(hours=2)
    assert parse_reset_with_pattern("back at 4:15 PM", r"back at (.+)", NOW) == datetime(
        2025, 6, 3, 16, 15, tzinfo=UTC)
    assert parse_reset_with_pattern("nothing", r"cooldown=(\d+)", NOW) is None


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Error: 429 Too Many Requests", "rate_limit"),
        ("You've hit your usage limit.", "rate_limit"),
        ("rate_limit_error: slow down", "rate_limit"),
        ("wrote 4290 lines", None),
        ("401 Unauthorized", "auth"),
        ("Invalid API key - please run /login", "auth"),
        ("Your credit balance is too low", "billing"),
        ("all good", None),
        ("API Error: 529 Overloaded", "transient"),
        ("503 Service Unavailable", "transient"),
        ("ran 5030 tests", None),
        ("API Error: 529 Overloaded. This is a server-side issue, usually temporary - try again in a moment.", "transient"),
    ],
)
def test_read_signal_kinds(text, kind):
    """The shared reader recognises the usual messages and skips look-alikes (more in tests/unit/test_signal_samples.py)."""
    got = read_signal(text, NOW)
    assert (got.kind if got else None) == kind


def test_a_bare_try_again_in_is_a_limit_with_a_relative_reset():
    """A command agent's "try again in 30s" (no other word of a limit) is a rate limit ending 30 s from now; a
    CLI's own "Retrying in 5 seconds" is not."""
    from datetime import UTC, datetime, timedelta

    from runner.backends.common.limits import read_signal

    now = datetime(2026, 1, 1, tzinfo=UTC)
    got = read_signal("Error: the service is busy, try again in 30s", now)
    assert got is not None and got.kind == "rate_limit" and got.reset_at == now + timedelta(seconds=30)
    assert read_signal("please retry after 2 minutes", now).reset_at == now + timedelta(minutes=2)
    assert read_signal("Retrying in 5 seconds (attempt 1/10)", now) is None
