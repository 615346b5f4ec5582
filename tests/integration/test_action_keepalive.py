"""A quiet public repository keeps its workflow: GitHub disables a public repository's scheduled workflow after
60 days without activity ("Disabling and enabling a workflow"; the workflow's state becomes
`disabled_inactivity`, and the file's `workflow_dispatch` and `issue_comment` runs stop with it). Once a day
(the ticks of 00:xx UTC), a tick that has plan state calls `PUT /repos/{owner}/{repo}/actions/workflows/{file}/enable`
(the tick job has `actions: write`); a refusal is a warning, never the tick's failure."""

from __future__ import annotations

import pytest

from runner.adapters import clock
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.integration.test_action_modes import Jobs

pytestmark = pytest.mark.integration


def at(when: str) -> str:
    """plan-runner's clock (runner/adapters/clock.py) at `when` UTC of one fixed night (the plan's session runs at
    23:50, a dispatch then is not yet lost at 00:17)."""
    return f"2026-12-0{1 if when >= '12' else 2}T{when}:00Z"


def kept(srv: GitHubServer) -> list[str]:
    """The enable calls for the session workflow (the session job also enables the clock, its own file)."""
    return [f for f in srv.enabled if f == "plan-runner.yml"]


def test_the_first_ticks_of_a_day_keep_the_workflow_enabled_and_the_others_cost_nothing(tmp_path, monkeypatch):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        monkeypatch.setenv(clock.ENV, at("23:50"))
        rc, _, outputs, _, _ = jobs.session()  # the plan has state now
        assert rc == 0 and outputs["outcome"] == "Advanced"
        monkeypatch.setenv(clock.ENV, at("23:55"))
        rc, _, _, summary, _ = jobs.run("schedule", w.schedule_event())
        assert rc == 0 and kept(srv) == [] and "kept enabled" not in summary
        monkeypatch.setenv(clock.ENV, at("00:17"))
        rc, out, _, summary, _ = jobs.run("schedule", w.schedule_event())
        assert rc == 0 and kept(srv) == ["plan-runner.yml"], out
        assert "`plan-runner.yml`: kept enabled" in summary


def test_a_refused_keep_alive_is_a_warning_and_the_tick_still_succeeds(tmp_path, monkeypatch):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        monkeypatch.setenv(clock.ENV, at("23:50"))
        jobs.session()
        monkeypatch.setenv(clock.ENV, at("00:17"))
        srv.token_scopes = {"contents": "write", "actions": "read"}
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event())
        assert rc == 0 and kept(srv) == [], out
        assert "::warning title=plan-runner keep-alive::could not keep the workflow enabled" in out
        assert "not kept enabled" in summary
