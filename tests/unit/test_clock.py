"""plan-runner's wall clock and its testing switch (runner/adapters/clock.py): the forms `PLAN_RUNNER_TEST_CLOCK`
takes, waits that move a testing clock instead of sleeping, and a clear error for a value that names no time."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from runner.adapters import clock
from runner.core.errors import PlanRunnerError

NOON = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


def _close(a: datetime, b: datetime, within_s: float = 5.0) -> bool:
    return abs((a - b).total_seconds()) < within_s


def test_without_the_switch_the_clock_is_the_real_one_and_sleeps_for_real(monkeypatch):
    monkeypatch.delenv(clock.ENV, raising=False)
    assert clock.current() is clock.REAL and not clock.current().testing
    assert _close(clock.now(), datetime.now(timezone.utc), 1.0) and clock.now().tzinfo is not None
    started = time.monotonic()
    clock.sleep(0.2)
    assert time.monotonic() - started >= 0.2


def test_an_instant_starts_the_clock_there_and_it_runs_on():
    c = clock.parse("2026-06-01T12:00:00Z")
    first = c.now()
    assert _close(first, NOON, 2.0) and first >= NOON
    time.sleep(0.05)
    assert c.now() > first  # it runs on, at the real pace
    assert clock.parse("2026-06-01T14:00:00+02:00").now() - NOON < timedelta(seconds=2)  # any zone, read as UTC


def test_an_hour_of_the_day_is_today_at_that_hour_in_utc():
    today = datetime(2026, 12, 2, 3, 41, 7, tzinfo=timezone.utc)
    c = clock.parse("00:17", today=today)
    assert c.start == datetime(2026, 12, 2, 0, 17, tzinfo=timezone.utc)
    assert clock.parse("12:00").now().hour == 12


@pytest.mark.parametrize(("value", "seconds"), [("+90s", 90), ("-2h", -7200), ("+10m", 600), ("+1d", 86400),
                                                 ("+1.5h", 5400)])
def test_an_offset_shifts_the_real_clock(value, seconds):
    shifted = clock.parse(value).now()
    assert _close(shifted, datetime.now(timezone.utc) + timedelta(seconds=seconds), 2.0)


def test_a_wait_on_a_testing_clock_moves_it_forward_at_once():
    c = clock.parse("+0s")
    before = c.now()
    started = time.monotonic()
    c.sleep(3600)
    assert time.monotonic() - started < 1.0, "a testing clock never sleeps"
    assert c.now() - before >= timedelta(seconds=3600)
    pinned = clock.parse("2026-06-01T12:00:00Z")
    pinned.sleep(600)
    assert pinned.now() - NOON >= timedelta(seconds=600)
    assert abs(c.time() - c.now().timestamp()) < 1.0


def test_the_process_clock_follows_the_variable_and_keeps_its_waits_while_it_stays(monkeypatch):
    monkeypatch.setenv(clock.ENV, "2026-06-01T12:00:00Z")
    c = clock.current()
    assert c.testing and clock.current() is c  # the same value: the same clock, running on
    clock.sleep(120)
    assert clock.now() - NOON >= timedelta(seconds=120)
    monkeypatch.setenv(clock.ENV, "+1d")
    assert clock.current() is not c and _close(clock.now(), datetime.now(timezone.utc) + timedelta(days=1))
    monkeypatch.delenv(clock.ENV)
    assert clock.current() is clock.REAL


@pytest.mark.parametrize("value", ["soon", "2026-06-01T12:00:00", "25:00", "+5", "+5y", "12:60", "tomorrow noon"])
def test_a_value_that_names_no_time_is_a_clear_error(value):
    with pytest.raises(PlanRunnerError) as err:
        clock.parse(value)
    assert clock.ENV in err.value.what and "unset it" in err.value.fix


def test_the_agent_never_gets_the_switches():
    """The testing switches (this clock, GitHub's waits) are read from plan-runner's own environment; the agent's is
    an allow-list without them, so an agent never inherits the names that move plan-runner's clock or its waits
    (docs/security.md)."""
    from fnmatch import fnmatchcase

    from runner.adapters.github.api import TEST_WAITS_ENV
    from runner.adapters.sandbox.agentenv import BASE_VARS, backend_agent_env

    parent = {"PATH": "/usr/bin", "HOME": "/home/u", clock.ENV: "+1d", TEST_WAITS_ENV: "0"}
    for backend in ("command", "script", "claude-code", "codex", "anthropic"):
        env = backend_agent_env(parent, backend)
        assert clock.ENV not in env and TEST_WAITS_ENV not in env and env["HOME"] == "/home/u"
    assert not any(fnmatchcase(name, p) for name in (clock.ENV, TEST_WAITS_ENV) for p in BASE_VARS)
