"""The wall clock plan-runner's policy reads, and its testing switch.

Everything that reads the wall clock for a decision reads it here: the times in the ledger (a session's start and
end, a dispatch, a park), rate-limit reset times and the waits for them (`plan-runner run`), the tick's deadlines
(an orphaned or lost dispatch) and its keep-alive hour. The core never reads a clock (time is a field of the
evidence: tests/unit/test_import_direction.py); a driver hands it `now()`.

Durations (a process's time limit, a stall, a retry's backoff) are measured on the monotonic clock and are no
business of this module: a test that moves the wall clock never makes a gate time out. Nor are times the system
keeps (a state commit's git date, a folder's modification time that `plan-runner clean` ages agent areas by), nor
the agent's side (its processes never see the switch below).

The testing switch (like hynek/stamina's `set_testing`): `PLAN_RUNNER_TEST_CLOCK` in plan-runner's own
environment, so a test can set it for a CLI subprocess (in-process tests set it with `monkeypatch.setenv`):

* `2026-06-01T12:00:00Z` (ISO 8601, with its zone): the clock reads that instant when plan-runner first reads it,
  and runs on from there at the real pace;
* `12:00` (`HH:MM`, UTC): the same, today's date at that hour (e.g. off the keep-alive hour, whatever hour the
  machine runs the test);
* `+90s`, `-2h`, `+10m`, `+1d` (a signed offset, s/m/h/d): the real clock shifted by that much.

Under the switch a wait (`sleep`) moves the clock forward at once instead of sleeping: `plan-runner run` waits out
a rate limit's reset in no time, and the session after it sees the time after the reset. Changing the variable's
value (in-process) starts the clock afresh from the new value.

It is read from plan-runner's own environment only. The agent never sets that environment (its own is built by
runner/adapters/sandbox/agentenv.py, an allow-list this name is not on, and the agent cannot write the job's
`$GITHUB_ENV`), so a hostile agent cannot move plan-runner's clock (docs/security.md).
"""

from __future__ import annotations

import os
import re
import threading
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from runner.core.errors import PlanRunnerError

ENV = "PLAN_RUNNER_TEST_CLOCK"

_OFFSET = re.compile(r"^([+-])(\d+(?:\.\d+)?)([smhd])$")
_HOUR = re.compile(r"^(\d{1,2}):(\d{2})$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class Clock:
    """A wall clock. `real` reads the system's; a testing clock (`parse`) reads `start` plus the time that passed
    since it was made plus every wait, or the real clock plus `offset` plus every wait."""

    start: datetime | None = None  # a testing clock that starts at this instant
    offset: timedelta = timedelta()  # a testing clock that is the real clock shifted by this much
    testing: bool = False
    _made: float = field(default_factory=_time.monotonic)
    _waited: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now(self) -> datetime:
        """The time, timezone-aware, in UTC."""
        if not self.testing:
            return datetime.now(timezone.utc)
        with self._lock:
            waited = self._waited
        if self.start is not None:
            return self.start + timedelta(seconds=_time.monotonic() - self._made + waited)
        return datetime.now(timezone.utc) + self.offset + timedelta(seconds=waited)

    def time(self) -> float:
        """`now()` as seconds since the epoch (what `time.time()` gives)."""
        return self.now().timestamp()

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`; a testing clock moves forward by them at once."""
        seconds = max(0.0, float(seconds))
        if not self.testing:
            _time.sleep(seconds)
            return
        with self._lock:
            self._waited += seconds


REAL = Clock()


def parse(value: str, *, today: datetime | None = None) -> Clock:
    """The testing clock `value` names (see the module's docstring); a clear error for anything else."""
    text = value.strip()
    offset = _OFFSET.match(text)
    if offset:
        sign, amount, unit = offset.groups()
        seconds = float(amount) * _UNIT_S[unit] * (-1 if sign == "-" else 1)
        return Clock(offset=timedelta(seconds=seconds), testing=True)
    hour = _HOUR.match(text)
    if hour and int(hour.group(1)) < 24 and int(hour.group(2)) < 60:
        base = (today or datetime.now(timezone.utc)).astimezone(timezone.utc)
        return Clock(start=base.replace(hour=int(hour.group(1)), minute=int(hour.group(2)), second=0, microsecond=0),
                     testing=True)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise PlanRunnerError(
            what=f"{ENV}={value!r} names no time",
            why=f"{ENV} is plan-runner's testing clock: an instant with its zone, an hour of today (UTC) or an offset "
                "from the real clock",
            fix=f"set it like {ENV}=2026-06-01T12:00:00Z, {ENV}=12:00 or {ENV}=+2h (s, m, h, d), or unset it to use "
                "the real clock",
        )
    return Clock(start=at.astimezone(timezone.utc), testing=True)


_current: tuple[str | None, Clock] = (None, REAL)
_current_lock = threading.Lock()


def current(env: Mapping[str, str] | None = None) -> Clock:
    """The clock of this process: the testing clock `PLAN_RUNNER_TEST_CLOCK` names, else the real one. The same
    value gives the same clock (it runs on, its waits kept); a new value, a fresh one."""
    global _current
    value = (os.environ if env is None else env).get(ENV) or None
    with _current_lock:
        if _current[0] != value:
            _current = (value, REAL if value is None else parse(value))
        return _current[1]


def now() -> datetime:
    """The time (UTC, timezone-aware) on this process's clock."""
    return current().now()


def time() -> float:
    """Seconds since the epoch on this process's clock."""
    return current().time()


def sleep(seconds: float) -> None:
    """Wait on this process's clock (a testing clock moves forward at once)."""
    current().sleep(seconds)


__all__ = ["ENV", "REAL", "Clock", "current", "now", "parse", "sleep", "time"]
