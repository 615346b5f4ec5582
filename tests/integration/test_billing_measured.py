"""The billing figures counted from plan-runner's real code (issue 23; benchmarks/billing.py `measured_month`): a
simulated month of session and tick jobs run in-process against the test server, the clock's schedule firing only
while the real code keeps it enabled. A plan that waits out a usage limit pays one tick per tick interval of its wait
plus the one that wakes it; once it is parked (or with nothing waiting) no tick runs for the rest of the month."""

from __future__ import annotations

import pytest

from benchmarks.billing import measured_month

pytestmark = pytest.mark.integration


def test_a_measured_month_ticks_only_while_a_plan_waits(tmp_path):
    got = measured_month(tmp_path, wait_slots=3, max_ticks=12)
    assert got["outcomes"] == ["Advanced", "LimitBackoff", "Advanced", "NeedsHuman"], got
    assert got["sessions"] == 4 and got["dispatches"] == 3 and got["parked"]
    # the first slot's tick finds the plan waiting already (sessions 1 and 2 ran before it: the clock is on from the
    # commit), the limit resets 2.5 intervals later, the 4th tick wakes the plan (the dispatched session keeps the
    # clock on), the 5th finds it parked and turns the clock off; the plan costs nothing for the rest of the month
    assert got["tick_slots"] == [0, 1, 2, 3, 4], got
