"""What GitHub Actions tells a job: the GITHUB_* environment and the event payload.

`GitHubContext.from_env` reads both once, validates them, and turns the payload
into one small frozen record per event kind. Every bad or missing value becomes
a `PlanRunnerError` that names the variable and how to fix it; nothing here
talks to the network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runner.core.errors import PlanRunnerError

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_SERVER_URL = "https://github.com"
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_WORKFLOW_REF = re.compile(r"(?P<repo>[^@]+?)/\.github/workflows/(?P<file>[^/@]+\.ya?ml)@(?P<ref>.+)")
_WORKFLOW_FILE = re.compile(r"[A-Za-z0-9_.-]+\.ya?ml")
_WORKFLOW_PATH = re.compile(r"\.github/workflows/[A-Za-z0-9_.-]+\.ya?ml")
DEFAULT_SESSION_WORKFLOW = "plan-runner.yml"
DEFAULT_CLOCK_WORKFLOW = "plan-runner-clock.yml"
_ACTIONS_FIX = ("run plan-runner inside a GitHub Actions job (the runner sets every GITHUB_* variable), "
                "or set it yourself when testing")


@dataclass(frozen=True)
class IssueComment:
    """An `issue_comment` event. The user's permission is NOT in here: ask the API."""

    action: str  # created | edited | deleted
    comment_id: int
    body: str
    user_login: str
    user_is_bot: bool
    issue_number: int
    issue_title: str = ""
    issue_body: str = ""
    issue_state: str = "open"
    labels: tuple[str, ...] = ()
    is_pull_request: bool = False


@dataclass(frozen=True)
class IssueLabeled:
    """An `issues` event (types: labeled): `sender` put `label` on an issue. Their permission: ask the API."""

    action: str  # labeled (the workflow subscribes to no other `issues` type)
    label: str  # the label just added (GitHub's `label` object; absent on some actions)
    sender_login: str
    sender_is_bot: bool
    issue_number: int
    issue_body: str = ""
    is_pull_request: bool = False


@dataclass(frozen=True)
class ReviewComment:
    """A `pull_request_review_comment` event (types: created): a comment on a line of a pull request's diff."""

    action: str
    comment_id: int
    body: str
    user_login: str
    user_is_bot: bool
    pull_number: int
    path: str = ""
    html_url: str = ""


@dataclass(frozen=True)
class WorkflowDispatch:
    inputs: dict[str, str] = field(default_factory=dict)
    ref: str = ""


@dataclass(frozen=True)
class Schedule:
    cron: str = ""


@dataclass(frozen=True)
class WorkflowRun:
    """`workflow_run` (types: completed): a run of the session workflow ended. GitHub sets every field."""

    run_id: int
    conclusion: str  # success, failure, cancelled, timed_out, startup_failure, ... (None while not completed)
    event: str  # what started the run that ended: workflow_dispatch for a session
    path: str  # its workflow file, `.github/workflows/plan-runner.yml`
    action: str = "completed"


@dataclass(frozen=True)
class OtherEvent:
    name: str


Event = IssueComment | IssueLabeled | ReviewComment | WorkflowDispatch | Schedule | WorkflowRun | OtherEvent


def _bad_payload(event: str, where: str, expected: str) -> PlanRunnerError:
    return PlanRunnerError(
        what=f"the `{event}` event payload has no valid `{where}` (expected {expected})",
        why="GITHUB_EVENT_PATH points at a file that is not a GitHub event payload of this kind",
        fix="let the Actions runner provide the payload; in tests, use a payload shaped like "
            "tests/fixtures/events/",
    )


def _field(obj: Any, path: str, kind: type | tuple[type, ...], event: str, *, optional: bool = False) -> Any:
    value = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if value is None and optional:
        return None
    # bool is an int in Python, never in a payload's schema
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        names = " or ".join(t.__name__ for t in _as_tuple(kind))
        raise _bad_payload(event, path, names)
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _comment(payload: Any, name: str) -> dict[str, Any]:
    """What every comment event says of its comment: the action, the comment's id, body and author."""
    return {"action": _field(payload, "action", str, name),
            "comment_id": _field(payload, "comment.id", int, name),
            "body": _field(payload, "comment.body", str, name, optional=True) or "",
            "user_login": _field(payload, "comment.user.login", str, name),
            "user_is_bot": _field(payload, "comment.user.type", str, name, optional=True) == "Bot"}


def parse_issue_comment(payload: Any) -> IssueComment:
    name = "issue_comment"
    labels = _field(payload, "issue.labels", list, name, optional=True) or []  # of {"name": ...}
    label_names = [_field(item, "name", str, name) for item in labels]
    return IssueComment(
        **_comment(payload, name),
        issue_number=_field(payload, "issue.number", int, name),
        issue_title=_field(payload, "issue.title", str, name, optional=True) or "",
        issue_body=_field(payload, "issue.body", str, name, optional=True) or "",
        issue_state=_field(payload, "issue.state", str, name, optional=True) or "open",
        labels=tuple(label_names),
        is_pull_request=isinstance(payload.get("issue"), dict) and payload["issue"].get("pull_request") is not None,
    )


def parse_issue_labeled(payload: Any) -> IssueLabeled:
    name = "issues"
    return IssueLabeled(
        action=_field(payload, "action", str, name),
        label=_field(payload, "label.name", str, name, optional=True) or "",
        sender_login=_field(payload, "sender.login", str, name),
        sender_is_bot=_field(payload, "sender.type", str, name, optional=True) == "Bot",
        issue_number=_field(payload, "issue.number", int, name),
        issue_body=_field(payload, "issue.body", str, name, optional=True) or "",
        is_pull_request=isinstance(payload.get("issue"), dict) and payload["issue"].get("pull_request") is not None,
    )


def _input_text(value: Any) -> str:
    # Boolean and number inputs arrive typed; the workflow sees them as strings.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if value is None:
        return ""
    raise _bad_payload("workflow_dispatch", "inputs", "an object of strings, numbers or booleans")


def parse_event(name: str, payload: Any) -> Event:
    """The event record for a payload, or a PlanRunnerError that says what is wrong with it."""
    if not isinstance(payload, dict):
        raise _bad_payload(name or "unknown", "(top level)", "a JSON object")
    if name == "issue_comment":
        return parse_issue_comment(payload)
    if name == "issues":
        return parse_issue_labeled(payload)
    if name == "pull_request_review_comment":
        return ReviewComment(
            **_comment(payload, name),
            pull_number=_field(payload, "pull_request.number", int, name),
            path=_field(payload, "comment.path", str, name, optional=True) or "",
            html_url=_field(payload, "comment.html_url", str, name, optional=True) or "")
    if name == "workflow_dispatch":
        inputs = _field(payload, "inputs", dict, name, optional=True) or {}
        return WorkflowDispatch(inputs={str(k): _input_text(v) for k, v in inputs.items()},
                                ref=_field(payload, "ref", str, name, optional=True) or "")
    if name == "schedule":
        return Schedule(cron=_field(payload, "schedule", str, name, optional=True) or "")
    if name == "workflow_run":
        return WorkflowRun(run_id=_field(payload, "workflow_run.id", int, name),
                           conclusion=_field(payload, "workflow_run.conclusion", str, name, optional=True) or "",
                           event=_field(payload, "workflow_run.event", str, name, optional=True) or "",
                           path=_field(payload, "workflow_run.path", str, name, optional=True) or "",
                           action=_field(payload, "action", str, name, optional=True) or "")
    return OtherEvent(name)


@dataclass(frozen=True)
class GitHubContext:
    api_url: str
    repository: str
    event_name: str = ""
    event: Event = field(default_factory=lambda: OtherEvent(""))
    server_url: str = DEFAULT_SERVER_URL
    run_id: str = ""
    workflow_ref: str = ""
    ref_name: str = ""
    step_summary: Path | None = None
    output: Path | None = None
    # The workflow file sessions run in and the one that holds the clock (the tick's schedule): set by the files
    # `plan-runner init` writes (job `env:`), defaults as init names them. A file the agent cannot change.
    session_workflow_env: str = ""
    clock_workflow: str = DEFAULT_CLOCK_WORKFLOW

    @property
    def owner(self) -> str:
        return self.repository.split("/", 1)[0]

    @property
    def repo(self) -> str:
        return self.repository.split("/", 1)[1]

    @property
    def workflow_file(self) -> str:
        """The running workflow's file name (e.g. `plan-runner.yml`), for dispatching it again."""
        match = _WORKFLOW_REF.fullmatch(self.workflow_ref)
        if match is None:
            raise PlanRunnerError(
                what=f"cannot tell which workflow is running from GITHUB_WORKFLOW_REF={self.workflow_ref!r}",
                why="plan-runner dispatches the same workflow for the next session and needs its file name; "
                    "expected `owner/repo/.github/workflows/<file>.yml@<ref>`",
                fix=_ACTIONS_FIX,
            )
        return match["file"]

    @property
    def session_workflow(self) -> str:
        """The file a session is dispatched in: the running one for a session or a reply (the old single file
        too), the ended run's for a reconcile, else PLAN_RUNNER_SESSION_WORKFLOW (the clock's job sets it)."""
        if isinstance(self.event, WorkflowRun) and _WORKFLOW_PATH.fullmatch(self.event.path):
            return self.event.path.rsplit("/", 1)[1]
        return self.session_workflow_env or self.workflow_file

    @property
    def run_url(self) -> str:
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}" if self.run_id else ""

    def issue_comment(self) -> IssueComment:
        if not isinstance(self.event, IssueComment):
            raise PlanRunnerError(
                what=f"`reply` mode needs an issue_comment event, this job runs on {self.event_name or 'none'!r}",
                why="the workflow runs `mode: reply` on an event other than issue_comment",
                fix="run `mode: reply` only from the `issue_comment` trigger:\n"
                    "  on:\n    issue_comment:\n      types: [created]",
            )
        return self.event

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GitHubContext:
        api_url = _url(env, "GITHUB_API_URL", DEFAULT_API_URL)
        server_url = _url(env, "GITHUB_SERVER_URL", DEFAULT_SERVER_URL)
        repository = env.get("GITHUB_REPOSITORY", "")
        if not _REPOSITORY.fullmatch(repository):
            raise PlanRunnerError(
                what=f"GITHUB_REPOSITORY is {repository!r}, not `owner/name`",
                why="plan-runner needs the repository to talk to the GitHub API",
                fix=_ACTIONS_FIX + ", e.g. GITHUB_REPOSITORY=octo-org/octo-repo",
            )
        run_id = env.get("GITHUB_RUN_ID", "")
        if run_id and not run_id.isdigit():
            raise PlanRunnerError(what=f"GITHUB_RUN_ID is {run_id!r}, not a number",
                                  why="the run id links reports to the job", fix=_ACTIONS_FIX)
        event_name = env.get("GITHUB_EVENT_NAME", "")
        event: Event = OtherEvent(event_name)
        if env.get("GITHUB_EVENT_PATH"):
            event = parse_event(event_name, _read_payload(env["GITHUB_EVENT_PATH"]))
        return cls(
            api_url=api_url,
            repository=repository,
            event_name=event_name,
            event=event,
            server_url=server_url,
            run_id=run_id,
            workflow_ref=env.get("GITHUB_WORKFLOW_REF", ""),
            ref_name=env.get("GITHUB_REF_NAME", ""),
            step_summary=Path(env["GITHUB_STEP_SUMMARY"]) if env.get("GITHUB_STEP_SUMMARY") else None,
            output=Path(env["GITHUB_OUTPUT"]) if env.get("GITHUB_OUTPUT") else None,
            session_workflow_env=_workflow_name(env, "PLAN_RUNNER_SESSION_WORKFLOW", ""),
            clock_workflow=_workflow_name(env, "PLAN_RUNNER_CLOCK_WORKFLOW", DEFAULT_CLOCK_WORKFLOW),
        )


def _workflow_name(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name) or default
    if value and not _WORKFLOW_FILE.fullmatch(value):
        raise PlanRunnerError(what=f"{name} is {value!r}, not a workflow file name",
                              why="plan-runner dispatches, enables and disables workflows by their file name",
                              fix=f"set {name} to a file name in .github/workflows, e.g. {default or DEFAULT_SESSION_WORKFLOW}")
    return value


def _url(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name) or default
    try:
        parts = urlsplit(value)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # e.g. an unbalanced IPv6 bracket or a bad port
        valid = False
    if not valid:
        raise PlanRunnerError(what=f"{name} is {value!r}, not an http(s) URL",
                              why="plan-runner builds every GitHub URL from it",
                              fix=f"unset {name} (default {default}) or set a URL such as {default}")
    return value.rstrip("/")


def _read_payload(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanRunnerError(what=f"cannot read the event payload GITHUB_EVENT_PATH={path}",
                              why=f"{type(exc).__name__}: {exc}", fix=_ACTIONS_FIX) from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PlanRunnerError(what=f"the event payload {path} is not JSON", why=str(exc),
                              fix=_ACTIONS_FIX) from None
