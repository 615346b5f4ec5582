"""A `checks:` gate polls within the job token's rate limit: GITHUB_TOKEN may make 1,000 requests an hour per
repository, and each poll is two (check runs, statuses). The wait between polls starts at the gate's interval and
grows by half up to a minute, so an hour of pending CI costs ~130 requests (it was 720), while a quick CI is still
seen within seconds. Real requests against the test server; only the clock is simulated."""

from __future__ import annotations

import pytest

from runner.adapters.github.checks import MAX_POLL_S, collect_checks_gate
from runner.adapters.github.client import GitHubDriver
from runner.adapters.github.events import GitHubContext
from runner.core.plan import GateConfig
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_an_hour_of_pending_ci_costs_a_bounded_number_of_requests() -> None:
    with GitHubServer() as srv:
        ctx = GitHubContext.from_env({"GITHUB_REPOSITORY": "octo-org/demo", "GITHUB_API_URL": srv.url,
                                      "GITHUB_SERVER_URL": "https://github.example.invalid"})
        srv.set_check_run("abc", "tests", status="in_progress")
        clock = Clock()
        with GitHubDriver(ctx, srv.token) as driver:
            result = collect_checks_gate(driver._request, GateConfig(name="ci", checks=("tests",)), "abc",
                                         timeout_s=3600, poll_s=10, clock=lambda: clock.now, sleep=clock.sleep)
        assert result.timed_out and not result.passed
        requests = srv.count("GET", r".*/commits/abc/.*")
        assert requests <= 150, requests  # an hour; fixed 10 s polls made 720
        assert clock.waits[:3] == [10, 15, 22.5]  # a quick CI is still seen quickly
        assert max(clock.waits) == MAX_POLL_S
