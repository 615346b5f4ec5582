"""The GitHub driver's default retry policy and its testing switch (`PLAN_RUNNER_TEST_GITHUB_WAITS=0`,
runner/adapters/github/api.py): without it, GitHub's pacing and backoff; with it, the same retries, limits and
timeouts without the waits; anything else, a clear error."""

from __future__ import annotations

import pytest

from runner.adapters.github.api import TEST_WAITS_ENV, RetryPolicy
from runner.core.errors import PlanRunnerError


def test_without_the_switch_the_default_is_the_production_policy():
    policy = RetryPolicy.default({})
    assert policy == RetryPolicy()
    assert policy.seconds_between_requests == 0.25 and policy.seconds_between_writes == 1.0
    assert policy.backoff_factor == 1.0 and policy.secondary_rate_wait == 60.0


def test_the_switch_drops_the_waits_and_keeps_the_retries_limits_and_timeouts():
    real, testing = RetryPolicy(), RetryPolicy.default({TEST_WAITS_ENV: "0"})
    assert testing.seconds_between_requests == 0 and testing.seconds_between_writes == 0
    assert testing.backoff_factor < 0.1 and testing.backoff_max < 1 and testing.secondary_rate_wait < 1
    assert (testing.total, testing.max_rate_limit_wait, testing.timeout) == (real.total, real.max_rate_limit_wait,
                                                                             real.timeout)


def test_the_suite_runs_with_the_switch_and_reads_it_from_the_environment(monkeypatch):
    """tests/conftest.py sets it for the suite; RetryPolicy.default() reads plan-runner's own environment."""
    monkeypatch.setenv(TEST_WAITS_ENV, "0")
    assert RetryPolicy.default().seconds_between_writes == 0
    monkeypatch.delenv(TEST_WAITS_ENV)
    assert RetryPolicy.default() == RetryPolicy()


@pytest.mark.parametrize("value", ["1", "yes", "fast"])
def test_another_value_is_a_clear_error(value):
    with pytest.raises(PlanRunnerError) as err:
        RetryPolicy.default({TEST_WAITS_ENV: value})
    assert TEST_WAITS_ENV in err.value.what and "unset it" in err.value.fix
