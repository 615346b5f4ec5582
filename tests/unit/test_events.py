"""Tests for runner.adapters.github.events: the GITHUB_* environment and event payloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.errors import PlanRunnerError
from runner.adapters.github.events import (
    GitHubContext,
    IssueComment,
    IssueLabeled,
    OtherEvent,
    ReviewComment,
    Schedule,
    WorkflowDispatch,
    parse_event,
)
from tests.hypothesis_profiles import examples

EVENTS = Path(__file__).parents[1] / "fixtures" / "events"


def env_for(event: str, payload_file: str | None = None, **extra: str) -> dict[str, str]:
    env = {
        "GITHUB_REPOSITORY": "octo-org/octo-repo",
        "GITHUB_EVENT_NAME": event,
        "GITHUB_RUN_ID": "1658821493",
        "GITHUB_WORKFLOW_REF": "octo-org/octo-repo/.github/workflows/plan-runner.yml@refs/heads/main",
        "GITHUB_REF_NAME": "main",
        "GITHUB_SERVER_URL": "https://github.com",
    }
    if payload_file:
        env["GITHUB_EVENT_PATH"] = str(EVENTS / payload_file)
    env.update(extra)
    return env


def test_issue_comment_payload_is_parsed() -> None:
    """A real-shaped issue_comment payload yields the comment, its author and the issue."""
    ctx = GitHubContext.from_env(env_for("issue_comment", "issue_comment_created.json"))
    event = ctx.issue_comment()
    assert event == IssueComment(
        action="created", comment_id=2104557000,
        body="/plan-runner resume use the v2 client\nand keep the old tests",
        user_login="mona", user_is_bot=False, issue_number=7,
        issue_title="plan-runner parked add-auth: gates red twice with the same failure",
        issue_body=event.issue_body, issue_state="open", labels=("plan-runner",), is_pull_request=False)
    assert "<!-- plan-runner:park plan=add-auth -->" in event.issue_body


def test_edited_comment_keeps_its_action() -> None:
    """An edited comment is reported as `edited`, so the adapter can ignore it."""
    event = GitHubContext.from_env(env_for("issue_comment", "issue_comment_edited.json")).issue_comment()
    assert event.action == "edited"


def test_comment_on_pull_request_is_flagged() -> None:
    """Comments on pull requests are issue_comment events too; the record says so."""
    event = GitHubContext.from_env(env_for("issue_comment", "issue_comment_pull_request.json")).issue_comment()
    assert event.is_pull_request is True


def test_bot_comment_is_flagged() -> None:
    """A comment by a GitHub App bot is marked as a bot."""
    event = GitHubContext.from_env(env_for("issue_comment", "issue_comment_bot.json")).issue_comment()
    assert event.user_is_bot is True
    assert event.user_login == "github-actions[bot]"


def test_workflow_dispatch_inputs_become_strings() -> None:
    """workflow_dispatch inputs are read, with typed values (booleans) turned into strings."""
    ctx = GitHubContext.from_env(env_for("workflow_dispatch", "workflow_dispatch.json"))
    assert ctx.event == WorkflowDispatch(
        inputs={"plan": "plans/add-auth.md", "mode": "session", "dry-run": "false"}, ref="refs/heads/main")


def test_schedule_payload_gives_the_cron() -> None:
    """A schedule payload yields its cron expression."""
    ctx = GitHubContext.from_env(env_for("schedule", "schedule.json"))
    assert ctx.event == Schedule(cron="*/15 * * * *")


def test_context_fields_and_defaults() -> None:
    """The context reads every variable and defaults the API URL to api.github.com."""
    ctx = GitHubContext.from_env(env_for("schedule", "schedule.json", GITHUB_STEP_SUMMARY="/tmp/sum",
                                         GITHUB_OUTPUT="/tmp/out"))
    assert ctx.api_url == "https://api.github.com"
    assert (ctx.owner, ctx.repo) == ("octo-org", "octo-repo")
    assert ctx.workflow_file == "plan-runner.yml"
    assert ctx.ref_name == "main"
    assert ctx.run_url == "https://github.com/octo-org/octo-repo/actions/runs/1658821493"
    assert ctx.step_summary == Path("/tmp/sum") and ctx.output == Path("/tmp/out")


def test_api_url_trailing_slash_is_dropped() -> None:
    """A GHES-style API URL is kept, without a trailing slash."""
    ctx = GitHubContext.from_env(env_for("schedule", GITHUB_API_URL="https://ghe.example.com/api/v3/"))
    assert ctx.api_url == "https://ghe.example.com/api/v3"


def test_no_event_path_gives_other_event() -> None:
    """Without a payload file the event is known by name only."""
    assert GitHubContext.from_env(env_for("push")).event == OtherEvent("push")


@pytest.mark.parametrize("env_change, word", [
    ({"GITHUB_REPOSITORY": ""}, "GITHUB_REPOSITORY"),
    ({"GITHUB_REPOSITORY": "no-slash"}, "GITHUB_REPOSITORY"),
    ({"GITHUB_API_URL": "ftp://x"}, "GITHUB_API_URL"),
    ({"GITHUB_API_URL": "not a url"}, "GITHUB_API_URL"),
    ({"GITHUB_API_URL": "http://[::1"}, "GITHUB_API_URL"),
    ({"GITHUB_API_URL": "http://host:99999"}, "GITHUB_API_URL"),
    ({"GITHUB_RUN_ID": "abc"}, "GITHUB_RUN_ID"),
    ({"GITHUB_EVENT_PATH": "/nonexistent/event.json"}, "GITHUB_EVENT_PATH"),
])
def test_bad_environment_is_a_clear_error(env_change: dict[str, str], word: str) -> None:
    """Each bad variable raises a PlanRunnerError naming it, with a fix."""
    with pytest.raises(PlanRunnerError) as info:
        GitHubContext.from_env({**env_for("schedule"), **env_change})
    assert word in info.value.what
    assert info.value.fix


def test_payload_that_is_not_json_is_a_clear_error(tmp_path: Path) -> None:
    """A payload file that is not JSON raises a PlanRunnerError, not a traceback."""
    bad = tmp_path / "event.json"
    bad.write_text("{not json")
    with pytest.raises(PlanRunnerError, match="not JSON"):
        GitHubContext.from_env(env_for("issue_comment", GITHUB_EVENT_PATH=str(bad)))


def test_missing_comment_id_names_the_field() -> None:
    """A payload missing `comment.id` says which field is missing."""
    payload = json.loads((EVENTS / "issue_comment_created.json").read_text())
    del payload["comment"]["id"]
    with pytest.raises(PlanRunnerError, match="comment.id"):
        parse_event("issue_comment", payload)


def test_boolean_is_not_an_issue_number() -> None:
    """`true` where a number belongs is rejected (bool is not int in a payload)."""
    payload = json.loads((EVENTS / "issue_comment_created.json").read_text())
    payload["issue"]["number"] = True
    with pytest.raises(PlanRunnerError, match="issue.number"):
        parse_event("issue_comment", payload)


def test_bad_workflow_ref_is_a_clear_error() -> None:
    """A GITHUB_WORKFLOW_REF without a workflow file raises when the file is needed."""
    ctx = GitHubContext.from_env(env_for("schedule", GITHUB_WORKFLOW_REF="garbage"))
    with pytest.raises(PlanRunnerError, match="GITHUB_WORKFLOW_REF"):
        _ = ctx.workflow_file


def test_reply_mode_on_wrong_event_is_a_clear_error() -> None:
    """Asking for the issue comment of a schedule event explains the trigger to use."""
    ctx = GitHubContext.from_env(env_for("schedule", "schedule.json"))
    with pytest.raises(PlanRunnerError, match="issue_comment"):
        ctx.issue_comment()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
# Payloads that look almost right reach deeper into the parser than random JSON does.
NEAR = st.fixed_dictionaries({
    "action": JSON, "inputs": JSON, "schedule": JSON, "ref": JSON,
    "comment": st.fixed_dictionaries({"id": JSON, "body": JSON, "user": st.fixed_dictionaries(
        {"login": JSON, "type": JSON})}),
    "issue": st.fixed_dictionaries({"number": JSON, "labels": JSON, "pull_request": JSON, "title": JSON}),
    "label": st.fixed_dictionaries({"name": JSON}), "sender": st.fixed_dictionaries({"login": JSON, "type": JSON}),
    "pull_request": st.fixed_dictionaries({"number": JSON}),
})


@settings(max_examples=examples(ci=75, thorough=1500))
@given(st.sampled_from(["issue_comment", "issues", "pull_request_review_comment", "workflow_dispatch", "schedule", "push", ""]), JSON | NEAR)
def test_arbitrary_payload_never_crashes(name: str, payload: object) -> None:
    """Any JSON payload gives an event record or a PlanRunnerError, never another exception."""
    try:
        event = parse_event(name, payload)
    except PlanRunnerError as exc:
        assert exc.what and exc.fix
    else:
        assert isinstance(event, IssueComment | IssueLabeled | ReviewComment | WorkflowDispatch | Schedule | OtherEvent)


@settings(max_examples=examples(ci=100, thorough=1000))
@given(st.dictionaries(st.sampled_from(["GITHUB_API_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID",
                                        "GITHUB_SERVER_URL", "GITHUB_WORKFLOW_REF"]), st.text(max_size=30)))
def test_arbitrary_environment_never_crashes(env: dict[str, str]) -> None:
    """Any values of the GITHUB_* variables give a context or a PlanRunnerError."""
    try:
        ctx = GitHubContext.from_env(env)
        _ = ctx.workflow_file
    except PlanRunnerError as exc:
        assert exc.what
