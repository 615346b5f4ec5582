"""The suite's Hypothesis profiles and each property test's budget, chosen by PLAN_RUNNER_HYPOTHESIS.

`ci` (the default): each test runs its `ci` budget of examples, derandomized (the same examples on every run
and machine: a failure CI finds fails the same way on a laptop, and the unit tier's time holds steady), with
no example database and no deadline (a loaded machine is no bug). Each budget is set by what the test
proves at it: the attacks a test was written for are pinned as explicit examples (`@example`), which run in
every profile, and the random examples still catch a mutation of the rule it checks (tests/unit/test_inert.py).
`thorough`: each test's `thorough` budget, random examples, the example database (.hypothesis/) replaying
what failed before: `PLAN_RUNNER_HYPOTHESIS=thorough ./scripts/test tests/unit` explores, for minutes.

tests/conftest.py imports this module, so the profile is loaded before any test module is collected.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = ("ci", "thorough")
PROFILE = os.environ.get("PLAN_RUNNER_HYPOTHESIS") or "ci"
if PROFILE not in PROFILES:
    raise SystemExit(f"PLAN_RUNNER_HYPOTHESIS={PROFILE!r} is not a profile of this suite: use one of "
                     f"{', '.join(PROFILES)} (or leave it unset for ci)")

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow], max_examples=100)
settings.register_profile("thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          max_examples=1000)
settings.load_profile(PROFILE)


def examples(ci: int, thorough: int) -> int:
    """A property test's number of examples in the profile this run uses."""
    if not 0 < ci <= thorough:
        raise ValueError(f"a budget needs 0 < ci <= thorough, not ci={ci}, thorough={thorough}")
    return thorough if PROFILE == "thorough" else ci
