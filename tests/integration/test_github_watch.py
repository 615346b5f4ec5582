"""The watch pull request at the adapter: GitHubDriver.update_watch and the finish's way out of draft, PyGithub
over real HTTP against the test GitHub server (REST for the pull request, GraphQL for ready-for-review)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from github import GithubException

from runner.adapters.github.api import RetryPolicy
from runner.adapters.github.client import GitHubDriver
from runner.core.errors import PlanRunnerError, Refused
from tests.servers.github import GitHubServer
from tests.integration.test_github_adapter import TOKEN, context

HEAD, BASE = "plan-runner/add-auth", "main"
MARK = "<!-- plan-runner:watch plan=add-auth -->"


@pytest.fixture
def srv() -> Iterator[GitHubServer]:
    with GitHubServer(token=TOKEN) as server:
        server.set_branch(HEAD)
        server.actions_can_create_prs = True
        yield server


@pytest.fixture
def driver(srv: GitHubServer) -> Iterator[GitHubDriver]:
    with GitHubDriver(context(srv), TOKEN, retry=RetryPolicy.fast()) as d:
        yield d


def _writes(srv: GitHubServer) -> int:
    return srv.count("POST", r"/repos/octo-org/demo/pulls") + srv.count("PATCH", r"/repos/octo-org/demo/pulls/\d+")


def test_opened_as_a_draft_then_edited_in_place(srv, driver) -> None:
    url = driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view 1", "draft")
    (post,) = [c for c in srv.calls if c.method == "POST" and c.path.endswith("/pulls")]
    assert post.body["draft"] is True and post.body["body"] == f"{MARK}\nview 1"
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view 2", "draft") == url
    assert len([i for i in srv.issues.values() if i.get("pull")]) == 1
    assert srv.issues[1]["body"] == f"{MARK}\nview 2" and srv.issues[1]["pull"]["draft"] is True
    writes = _writes(srv)
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view 2", "draft")  # nothing changed: no write
    assert _writes(srv) == writes


def test_closed_at_a_park_reopened_after_and_ready_only_at_the_finish(srv, driver) -> None:
    url = driver.update_watch("add-auth", HEAD, BASE, "Add auth", "running", "draft")
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "parked", "closed") == url
    assert srv.issues[1]["state"] == "closed" and srv.issues[1]["closed_at"]
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "running again", "draft")
    assert srv.issues[1]["state"] == "open" and srv.issues[1]["pull"]["draft"] is True
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "parked", "closed")
    # the finish finds the closed watch view (never opens a second), reopens it and takes it out of draft
    assert driver.open_finish("add-auth", HEAD, BASE, "Add auth", "finished") == url
    assert srv.issues[1]["state"] == "open" and srv.issues[1]["pull"]["draft"] is False
    assert srv.ready_for_review == [1] and srv.count("POST", "/graphql") == 1
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "done", "ready") == url
    assert srv.count("POST", "/graphql") == 1 and len(srv.issues) == 1


def test_closing_with_no_pull_request_opens_none(srv, driver) -> None:
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "parked", "closed") is None
    assert srv.issues == {} and _writes(srv) == 0


def test_someone_elses_closed_pull_request_from_the_branch_is_left_alone(srv, driver) -> None:
    """A closed pull request without the plan's marker is not the watch view: a new draft is opened."""
    srv.add_issue("a person's attempt", "no marker here")
    srv.issues[1]["pull"] = {"head": HEAD, "base": BASE, "head_sha": srv.branches[HEAD],
                             "base_sha": srv.branches[BASE], "draft": False}
    srv.issues[1]["state"] = "closed"
    url = driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view", "draft")
    assert url.endswith("/pull/2") and srv.issues[1]["state"] == "closed" and srv.issues[1]["body"] == "no marker here"


def test_refusals_are_clear_errors(srv, driver) -> None:
    srv.actions_can_create_prs = False  # GitHub's default for a new repository
    with pytest.raises(Refused, match="may not open pull requests"):
        driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view", "draft")
    with pytest.raises(PlanRunnerError, match="cannot be put in a park issue marker"):
        driver.update_watch("a --> <b>", HEAD, BASE, "Add auth", "view", "draft")
    with pytest.raises(ValueError):
        driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view", "merged")


def test_ready_for_review_of_an_unknown_node_is_an_error(srv, driver) -> None:
    """GitHub's GraphQL answers 200 with `errors` (NOT_FOUND): PyGithub raises, github_call explains."""
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view", "draft")
    pull = driver._pull_repo.get_pull(1)
    assert pull.node_id
    srv.issues[1]["id"] += 1  # the node id PyGithub holds no longer resolves
    with pytest.raises(GithubException) as err:
        driver._ready_for_review(pull)
    assert "Could not resolve to a node" in str(err.value) and srv.issues[1]["pull"]["draft"] is True


def test_a_pull_request_a_person_closed_stays_closed_until_the_finish(srv, driver) -> None:
    """Only a watch view closed at a park is reopened by the next session; one a person closed is kept up to
    date but stays closed; the finish reopens it (the work is done and needs a review)."""
    url = driver.update_watch("add-auth", HEAD, BASE, "Add auth", "running", "draft")
    srv.issues[1]["state"] = "closed"  # a person closed it in the web UI
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "running on", "draft") == url
    assert srv.issues[1]["state"] == "closed" and "running on" in srv.issues[1]["body"]
    assert driver.open_finish("add-auth", HEAD, BASE, "Add auth", "finished") == url
    assert srv.issues[1]["state"] == "open" and srv.issues[1]["pull"]["draft"] is False


RUN_1, RUN_2 = "20261201T100000.000000Z", "20261202T100000.000000Z"


def _note(head_sha: str) -> str:
    return f"plan-runner started this plan over; its work is kept under `refs/plan-runner/backup/x` ({head_sha})"


def _comments(srv: GitHubServer, number: int) -> list[str]:
    return [c["body"] for c in srv.comments_on(number)]


def test_a_reset_closes_the_earlier_runs_pull_request_once_and_the_new_run_opens_its_own(srv, driver) -> None:
    """The watch view names its run; a job of a new run (after `plan-runner reset`) closes the earlier run's view
    (GitHub refuses a second open pull request from the same branch), heads it and comments once with where its
    work is kept, and opens its own, which names the old one."""
    driver.follow_run(lambda: RUN_1, _note)
    url = driver.update_watch("add-auth", HEAD, BASE, "Add auth", "run 1", "draft")
    assert "<!-- plan-runner:run 20261201T100000.000000Z -->" in srv.issues[1]["body"]
    old_head = srv.issues[1]["pull"]["head_sha"]
    srv.set_branch(HEAD)  # the new run pushed its own work branch
    driver.follow_run(lambda: RUN_2, _note)
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "", None) is None  # its first job, no credit
    old = srv.issues[1]
    assert old["state"] == "closed" and old["body"].startswith("<!-- plan-runner:closed-at-reset -->\n" + _note(old_head))
    assert "run 1" in old["body"] and _comments(srv, 1) == [_note(old_head) + "\n<!-- plan-runner:comment -->"]
    new = driver.update_watch("add-auth", HEAD, BASE, "Add auth", "run 2", "draft")
    assert new != url and new.endswith("/pull/2") and srv.issues[2]["pull"]["draft"] is True
    assert "(closed)" in srv.issues[2]["body"] and "#1" in srv.issues[2]["body"]  # GitHub cross-references it
    writes, body = _writes(srv), old["body"]
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "run 2", "draft") == new
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "parked", "closed")
    assert _writes(srv) == writes + 1 and old["body"] == body and len(_comments(srv, 1)) == 1  # once, never again
    # a resume reopens the new run's view, never the earlier one; the finish takes the new one out of draft
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "running", "draft")
    assert driver.open_finish("add-auth", HEAD, BASE, "Add auth", "finished") == new
    assert old["state"] == "closed" and srv.issues[2]["state"] == "open" and srv.ready_for_review == [2]


def test_a_finish_right_after_a_reset_opens_a_new_pull_request(srv, driver) -> None:
    """The earlier run's view, closed at a park (or by GitHub when `reset` deleted its branch), is not the one
    the finish reopens: it is closed for good with its note, and the finish opens its own."""
    driver.run_key, driver.reset_note = (lambda: RUN_1), _note
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "run 1", "draft")
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "parked", "closed")
    driver.run_key = lambda: RUN_2
    url = driver.open_finish("add-auth", HEAD, BASE, "Add auth", "finished")
    assert url.endswith("/pull/2") and srv.issues[2]["pull"]["draft"] is False and srv.issues[2]["state"] == "open"
    assert srv.issues[1]["state"] == "closed" and "closed-at-reset" in srv.issues[1]["body"]
    assert len(_comments(srv, 1)) == 1


def test_without_a_run_key_every_watch_view_is_the_current_runs(srv, driver) -> None:
    """A watch view written before run keys (no key) is adopted by the current run, never closed as an
    earlier one; a driver told no run (local, or a job that could not read it) behaves as before."""
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", "old view", "draft")
    assert "plan-runner:run" not in srv.issues[1]["body"]
    driver.run_key, driver.reset_note = (lambda: RUN_2), _note
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", "view", "draft").endswith("/pull/1")
    assert srv.issues[1]["state"] == "open" and f"plan-runner:run {RUN_2}" in srv.issues[1]["body"]
    assert _comments(srv, 1) == []


def test_a_report_quoting_the_hidden_lines_changes_nothing(srv, driver) -> None:
    """The agent's words reach the description in fences, as is: quoting another run's key or the closed-at-reset
    line there neither makes the view another run's nor spares it the reset's close (the first lines count)."""
    quoted = ("```text\n<!-- plan-runner:closed-at-reset -->\n<!-- plan-runner:run 20261202T100000.000000Z -->\n"
              "<!-- plan-runner:run 20990101T000000.000000Z -->\n```")
    driver.run_key, driver.reset_note = (lambda: RUN_1), _note
    driver.update_watch("add-auth", HEAD, BASE, "Add auth", quoted, "draft")
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", quoted, "draft").endswith("/pull/1")
    driver.run_key = lambda: RUN_2
    assert driver.update_watch("add-auth", HEAD, BASE, "Add auth", quoted, "draft").endswith("/pull/2")
    assert srv.issues[1]["state"] == "closed" and len(_comments(srv, 1)) == 1
