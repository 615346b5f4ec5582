"""The endpoints of the test GitHub server: one function per route, called under the server lock."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.servers import github_shapes as shapes
from tests.servers.github import BOT, LEGACY, MAX_BODY, ApiError, Dispatch, GitHubServer, Reply, not_found, paginate

Handler = Callable[[GitHubServer, re.Match[str], dict[str, str], Any], Reply]
SPEC_PREFIX = "/repos/{owner}/{repo}"


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    spec: str  # the path template in GitHub's OpenAPI description
    scope: tuple[str, str]  # (GITHUB_TOKEN permission, "read" | "write") the call needs
    gone_without_issues: bool = False  # answers 410 when the repository has issues disabled


ROUTES: list[Route] = []
_LEVEL = {"none": 0, "read": 1, "write": 2}


def at(method: str, pattern: str, spec: str, scope: tuple[str, str],
       gone_without_issues: bool = False) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        ROUTES.append(Route(method, re.compile(pattern), fn, SPEC_PREFIX + spec, scope, gone_without_issues))
        return fn
    return register


def route(srv: GitHubServer, method: str, path: str, query: dict[str, str], body: Any) -> Reply:
    if path == "/graphql" and method == "POST":
        return graphql(srv, body)
    prefix = f"/repos/{srv.owner}/{srv.repo}"
    if path != prefix and not path.startswith(prefix + "/"):
        raise not_found()
    rest = path[len(prefix):]
    for r in ROUTES:
        match = r.pattern.fullmatch(rest)
        if match and r.method == method:
            permission, level = r.scope
            # token_scopes is the job token's grant; another token (srv.tokens) may do what its routes need
            job_token = srv.actor == srv.login
            granted = "write" if srv.token_scopes is None or not job_token else srv.token_scopes.get(permission, "none")
            if permission != "metadata" and _LEVEL[granted] < _LEVEL[level]:
                # GitHub names what the route needs for fine-grained actors (apps, the job's token): see
                # https://github.blog/changelog/2023-08-10-x-accepted-github-permissions-header-for-fine-grained-permission-actors
                raise ApiError(403, shapes.error("Resource not accessible by integration", 403),
                               {"X-Accepted-GitHub-Permissions": f"{permission}={level}"})
            if r.gone_without_issues and not srv.has_issues:
                raise ApiError(410, shapes.error("Issues are disabled for this repo", 410))
            return r.handler(srv, match, query, body)
    raise not_found()


def body_text(body: Any, resource: str, key: str = "body") -> str | None:
    """The optional `body` field, refused as GitHub does when it is not a string or too long."""
    text = body.get(key) if isinstance(body, dict) else None
    if text is not None and not isinstance(text, str):
        raise ApiError(422, shapes.validation(resource, key))
    if text is not None and len(text) > MAX_BODY:
        raise ApiError(422, shapes.validation(resource, key, "custom",
                                              f"body is too long (maximum is {MAX_BODY} characters)"))
    return text


def need(body: Any, key: str, resource: str, kind: type = str) -> Any:
    if not isinstance(body, dict) or not isinstance(body.get(key), kind):
        raise ApiError(422, shapes.validation(resource, key, "missing_field"))
    return body[key]


def issue_of(srv: GitHubServer, match: re.Match[str]) -> dict[str, Any]:
    record = srv.issues.get(int(match["n"]))
    if record is None:
        raise not_found()
    return record


def labels_of(srv: GitHubServer, body: Any, key: str = "labels") -> list[str]:
    raw = body.get(key, []) if isinstance(body, dict) else body
    if not isinstance(raw, list):
        raise ApiError(422, shapes.validation("Label", key))
    names = [item["name"] if isinstance(item, dict) else item for item in raw]
    if not all(isinstance(name, str) and name for name in names):
        raise ApiError(422, shapes.validation("Label", key))
    return [srv.ensure_label(name)["name"] for name in names]


@at("GET", "", "", ("metadata", "read"))
def get_repo(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    return Reply(200, srv.repo_json())


@at("GET", "/issues", "/issues", ("issues", "read"))
def list_issues(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    state = q.get("state", "open")
    wanted = {name.strip().lower() for name in q.get("labels", "").split(",") if name.strip()}
    items = []
    for record in sorted(srv.issues.values(), key=lambda r: r["number"], reverse=q.get("direction") != "asc"):
        if state != "all" and record["state"] != state:
            continue
        if wanted - {name.lower() for name in record["labels"]}:
            continue
        if q.get("creator") and record["user"] != q["creator"]:
            continue
        items.append(srv.issue_json(record))
    return paginate(srv, f"/repos/{srv.owner}/{srv.repo}/issues", q, items)


@at("POST", "/issues", "/issues", ("issues", "write"), gone_without_issues=True)
def create_issue(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    title = need(body, "title", "Issue")
    text = body_text(body, "Issue")
    record = srv._new_issue(srv.login, title, text, labels_of(srv, body))
    return Reply(201, srv.issue_json(record), {"Location": srv.issue_json(record)["url"]})


@at("GET", r"/issues/(?P<n>\d+)", "/issues/{issue_number}", ("issues", "read"), gone_without_issues=True)
def get_issue(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    return Reply(200, srv.issue_json(issue_of(srv, m)))


@at("PATCH", r"/issues/(?P<n>\d+)", "/issues/{issue_number}", ("issues", "write"),
    gone_without_issues=True)
def update_issue(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    record = issue_of(srv, m)
    if not isinstance(body, dict):
        raise ApiError(422, shapes.validation("Issue", "body"))
    if "state" in body:
        if body["state"] not in ("open", "closed"):
            raise ApiError(422, shapes.validation("Issue", "state"))
        if body["state"] != record["state"]:
            record["closed_at"] = shapes.now_iso() if body["state"] == "closed" else None
            record["state_reason"] = body.get("state_reason") or (
                "completed" if body["state"] == "closed" else "reopened")
        record["state"] = body["state"]
    if "title" in body:
        record["title"] = need(body, "title", "Issue")
    if "body" in body:
        record["body"] = body_text(body, "Issue")
    if "labels" in body:
        record["labels"] = labels_of(srv, body)
    record["updated_at"] = shapes.now_iso()
    return Reply(200, srv.issue_json(record))


@at("POST", r"/issues/(?P<n>\d+)/labels", "/issues/{issue_number}/labels", ("issues", "write"),
    gone_without_issues=True)
def add_labels(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    record = issue_of(srv, m)
    record["labels"] = list(dict.fromkeys(record["labels"] + labels_of(srv, body)))
    return Reply(200, [shapes.label(srv.repo_api, srv.labels[n.lower()]) for n in record["labels"]])


@at("GET", r"/issues/(?P<n>\d+)/comments", "/issues/{issue_number}/comments", ("issues", "read"),
    gone_without_issues=True)
def list_comments(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    number = issue_of(srv, m)["number"]
    items = [srv.comment_json(c) for c in srv.comments_on(number)]
    return paginate(srv, f"/repos/{srv.owner}/{srv.repo}/issues/{number}/comments", q, items)


@at("POST", r"/issues/(?P<n>\d+)/comments", "/issues/{issue_number}/comments", ("issues", "write"),
    gone_without_issues=True)
def create_comment(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    need(body, "body", "IssueComment")
    record = srv._new_comment(issue_of(srv, m)["number"], body_text(body, "IssueComment") or "", srv.login)
    return Reply(201, srv.comment_json(record))


def comment_of(srv: GitHubServer, m: re.Match[str]) -> dict[str, Any]:
    record = srv.comments.get(int(m["id"]))
    if record is None:
        raise not_found()
    return record


@at("PATCH", r"/issues/comments/(?P<id>\d+)", "/issues/comments/{comment_id}", ("issues", "write"))
def update_comment(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    need(body, "body", "IssueComment")
    record = comment_of(srv, m)
    if record["user"] != srv.actor and LEGACY.get(srv.permissions.get(srv.actor, "none")) != "admin":
        raise ApiError(403, shapes.error("Resource not accessible by integration", 403))
    record.update(body=body_text(body, "IssueComment") or "", updated_at=shapes.now_iso())
    srv.comment_edits.append((record["id"], record["body"]))
    return Reply(200, srv.comment_json(record))


@at("GET", r"/issues/comments/(?P<id>\d+)/reactions", "/issues/comments/{comment_id}/reactions",
    ("issues", "read"))
def list_reactions(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    ident = comment_of(srv, m)["id"]
    items = [shapes.reaction(r, srv.users) for r in srv.reactions.get(ident, [])]
    return paginate(srv, f"/repos/{srv.owner}/{srv.repo}/issues/comments/{ident}/reactions", q, items)


@at("POST", r"/issues/comments/(?P<id>\d+)/reactions", "/issues/comments/{comment_id}/reactions",
    ("issues", "write"))
def create_reaction(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    return _react(srv, comment_of(srv, m)["id"], body)


def _react(srv: GitHubServer, ident: int, body: Any) -> Reply:
    content = need(body, "content", "Reaction")
    if content not in shapes.REACTIONS:
        raise ApiError(422, shapes.validation("Reaction", "content"))
    existing = srv.reactions.setdefault(ident, [])
    for record in existing:
        if record["user"] == srv.login and record["content"] == content:
            return Reply(200, shapes.reaction(record, srv.users))  # GitHub: already reacted
    record = {"id": srv.next_id(), "user": srv.login, "content": content, "created_at": shapes.now_iso()}
    existing.append(record)
    return Reply(201, shapes.reaction(record, srv.users))


@at("POST", r"/pulls/comments/(?P<id>\d+)/reactions", "/pulls/comments/{comment_id}/reactions",
    ("pull-requests", "write"))
def create_review_reaction(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    if int(m["id"]) not in srv.review_comments:
        raise not_found()
    return _react(srv, int(m["id"]), body)


@at("GET", "/labels", "/labels", ("issues", "read"))
def list_labels(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    items = [shapes.label(srv.repo_api, lab) for lab in srv.labels.values()]
    return paginate(srv, f"/repos/{srv.owner}/{srv.repo}/labels", q, items)


@at("POST", "/labels", "/labels", ("issues", "write"))
def create_label(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    name = need(body, "name", "Label")
    if name.lower() in srv.labels:
        raise ApiError(422, shapes.validation("Label", "name", "already_exists"))
    color = body.get("color", "ededed")
    if not isinstance(color, str) or not re.fullmatch(r"[0-9a-fA-F]{6}", color):
        raise ApiError(422, shapes.validation("Label", "color"))
    record = srv.ensure_label(name, color, body.get("description"))
    return Reply(201, shapes.label(srv.repo_api, record))


@at("GET", "/collaborators/(?P<user>[^/]+)/permission", "/collaborators/{username}/permission",
    ("metadata", "read"))
def permission(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    login = m["user"]
    role = srv.permissions.get(login)
    if role is None and login.endswith("[bot]"):
        # GitHub answers 404 for app bots: they are not users of the repository.
        raise ApiError(404, shapes.error(f"{login} is not a user", 404))
    role = role or "none"
    # A custom role reports its base role's legacy name in `permission` and its own name in `role_name`.
    base = srv.custom_roles.get(role, role)
    return Reply(200, {"permission": LEGACY[base], "role_name": role,
                       "user": {**srv.user_json(login), "role_name": role}})


@at("POST", "/actions/workflows/(?P<wf>[^/]+)/dispatches", "/actions/workflows/{workflow_id}/dispatches",
    ("actions", "write"))
def dispatch(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    ref = need(body, "ref", "Dispatch")
    inputs = body.get("inputs") or {}
    workflow = m["wf"]
    if not srv.workflow_active(workflow):
        raise ApiError(422, shapes.error("Cannot trigger a 'workflow_dispatch' on a disabled workflow", 422))
    if srv.workflows is not None:
        if workflow not in srv.workflows:
            raise not_found()
        if srv.workflows[workflow] is None:
            raise ApiError(422, shapes.error("Workflow does not have 'workflow_dispatch' trigger", 422))
        unexpected = sorted(set(inputs) - set(srv.workflows[workflow]))
        if unexpected:
            raise ApiError(422, shapes.error(f"Unexpected inputs provided: {unexpected}", 422))
    if ref.removeprefix("refs/heads/") not in srv.branches:
        raise ApiError(422, shapes.error(f"No ref found for: {ref}", 422))
    # A dispatch starts a run even when the job's token asks (one of GitHub's two exceptions to its rule)
    assert srv.starts_runs("workflow_dispatch", srv.actor)
    run_id = srv.add_run(workflow, event="workflow_dispatch", actor=srv.actor, ref=ref.removeprefix("refs/heads/"),
                         inputs=inputs)
    if body.get("return_run_details") is True:  # 200 with the run's id and URLs, else 204 (the OpenAPI description)
        srv.dispatches.append(Dispatch(workflow, ref, dict(inputs), run_id))
        return Reply(200, {"workflow_run_id": run_id,
                           "run_url": f"{srv.url}/repos/{srv.owner}/{srv.repo}/actions/runs/{run_id}",
                           "html_url": f"https://github.com/{srv.owner}/{srv.repo}/actions/runs/{run_id}"})
    srv.dispatches.append(Dispatch(workflow, ref, dict(inputs)))
    return Reply(204)


@at("GET", r"/actions/runs/(?P<id>\d+)", "/actions/runs/{run_id}", ("actions", "read"))
def get_run(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    record = srv.runs.get(int(m["id"]))
    if record is None:
        raise not_found()
    return Reply(200, srv.run_json(record))


@at("PUT", "/actions/workflows/(?P<wf>[^/]+)/enable", "/actions/workflows/{workflow_id}/enable", ("actions", "write"))
def enable_workflow(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    if srv.workflows is not None and m["wf"] not in srv.workflows:
        raise not_found()
    srv.enabled.append(m["wf"])
    srv.workflow_states[m["wf"]] = "active"
    return Reply(204)


@at("PUT", "/actions/workflows/(?P<wf>[^/]+)/disable", "/actions/workflows/{workflow_id}/disable",
    ("actions", "write"))
def disable_workflow(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    """GitHub: 204, the workflow's `state` becomes `disabled_manually`; none of its triggers start a run."""
    if srv.workflows is not None and m["wf"] not in srv.workflows:
        raise not_found()
    srv.disabled.append(m["wf"])
    srv.workflow_states[m["wf"]] = "disabled_manually"
    return Reply(204)


@at("GET", "/actions/workflows/(?P<wf>[^/]+)", "/actions/workflows/{workflow_id}", ("actions", "read"))
def get_workflow(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    if srv.workflows is not None and m["wf"] not in srv.workflows:
        raise not_found()
    wf_id = sum(m["wf"].encode()) + 1000
    return Reply(200, {"id": wf_id, "node_id": f"W_{wf_id}", "name": m["wf"], "path": f".github/workflows/{m['wf']}",
                       "state": srv.workflow_states.get(m["wf"], "active"),
                       "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
                       "url": f"{srv.repo_api}/actions/workflows/{wf_id}",
                       "html_url": f"https://github.com/{srv.owner}/{srv.repo}/blob/main/.github/workflows/{m['wf']}",
                       "badge_url": f"https://github.com/{srv.owner}/{srv.repo}/workflows/{m['wf']}/badge.svg"})


def pull_of(srv: GitHubServer, m: re.Match[str]) -> dict[str, Any]:
    record = srv.issues.get(int(m["n"]))
    if record is None or not record.get("pull"):
        raise not_found()
    return record


@at("GET", "/pulls", "/pulls", ("pull-requests", "read"))
def list_pulls(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    state = q.get("state", "open")
    items = []
    for record in sorted(srv.issues.values(), key=lambda r: r["number"], reverse=True):
        pr = record.get("pull")
        if not pr or (state != "all" and record["state"] != state):
            continue
        if q.get("head") and q["head"] not in (f"{srv.owner}:{pr['head']}", pr["head"]):
            continue
        if q.get("base") and q["base"] != pr["base"]:
            continue
        items.append(srv.pull_json(record))
    return paginate(srv, f"/repos/{srv.owner}/{srv.repo}/pulls", q, items)


@at("POST", "/pulls", "/pulls", ("pull-requests", "write"))
def create_pull(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    head, base = need(body, "head", "PullRequest"), need(body, "base", "PullRequest")
    title = need(body, "title", "PullRequest")
    text = body_text(body, "PullRequest")
    if srv.actor == BOT and not srv.actions_can_create_prs:
        # Settings > Actions > General > "Allow GitHub Actions to create and approve pull requests",
        # off by default; `pull-requests: write` in the workflow does not lift it.
        raise ApiError(403, {"message": "GitHub Actions is not permitted to create or approve pull requests.",
                             "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                             "status": "403"})
    head = head.split(":", 1)[-1]
    for key, name in (("head", head), ("base", base)):
        if name not in srv.branches:
            raise ApiError(422, shapes.validation("PullRequest", key))
    if srv.branches[head] == srv.branches[base]:
        raise ApiError(422, shapes.validation("PullRequest", "base", "custom",
                                              f"No commits between {base} and {head}"))
    for record in srv.issues.values():
        if record.get("pull") and record["state"] == "open" and record["pull"]["head"] == head:
            raise ApiError(422, shapes.validation("PullRequest", "head", "custom",
                                                  f"A pull request already exists for {srv.owner}:{head}."))
    pull = {"head": head, "base": base, "head_sha": srv.branches[head], "base_sha": srv.branches[base],
            "draft": bool(body.get("draft"))}
    record = srv._new_issue(srv.actor, title, text, [], pull=pull)
    return Reply(201, srv.pull_json(record))


@at("GET", r"/pulls/(?P<n>\d+)", "/pulls/{pull_number}", ("pull-requests", "read"))
def get_pull(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    return Reply(200, srv.pull_json(pull_of(srv, m)))


@at("PATCH", r"/pulls/(?P<n>\d+)", "/pulls/{pull_number}", ("pull-requests", "write"))
def update_pull(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    record = pull_of(srv, m)
    if isinstance(body, dict) and "body" in body:
        record["body"] = body_text(body, "PullRequest")
    for key in ("title", "state"):
        if isinstance(body, dict) and key in body:
            record[key] = need(body, key, "PullRequest")
    if isinstance(body, dict) and body.get("state") in ("open", "closed"):
        record["closed_at"] = shapes.now_iso() if body["state"] == "closed" else None
    record["updated_at"] = shapes.now_iso()
    return Reply(200, srv.pull_json(record))


CHECK_CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out")
CHECK_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
MAX_CHECK_OUTPUT = 65_535


def _check_fields(srv: GitHubServer, body: dict[str, Any], record: dict[str, Any]) -> None:
    """The fields of POST and PATCH .../check-runs as GitHub takes them ("Create a check run"): a conclusion makes
    the run completed; completed needs a conclusion; output needs title and summary, each text at most 65,535
    characters; action_required needs a details_url."""
    status = body.get("status", record.get("status", "queued"))
    conclusion = body.get("conclusion", record.get("conclusion"))
    if status not in CHECK_STATUSES:
        raise ApiError(422, shapes.validation("CheckRun", "status"))
    if conclusion is not None:
        if conclusion not in CHECK_CONCLUSIONS:
            raise ApiError(422, shapes.validation("CheckRun", "conclusion"))
        status = "completed"
    if status == "completed" and conclusion is None:
        raise ApiError(422, shapes.validation("CheckRun", "conclusion", "missing_field"))
    details = body.get("details_url", record.get("details_url"))
    if conclusion == "action_required" and not details:
        raise ApiError(422, shapes.validation("CheckRun", "details_url", "missing_field"))
    output = body.get("output")
    if output is not None:
        if not isinstance(output, dict) or not isinstance(output.get("title"), str) \
                or not isinstance(output.get("summary"), str):
            raise ApiError(422, shapes.validation("CheckRun", "output", "missing_field"))
        for key in ("summary", "text"):
            if len(output.get(key) or "") > MAX_CHECK_OUTPUT:
                raise ApiError(422, shapes.validation("CheckRun", f"output.{key}", "custom",
                                                      f"{key} is too long (maximum is {MAX_CHECK_OUTPUT} characters)"))
        record["output"] = {"title": output["title"], "summary": output["summary"], "text": output.get("text")}
    record.update(status=status, conclusion=conclusion, details_url=details)


@at("POST", "/check-runs", "/check-runs", ("checks", "write"))
def create_check_run(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    name = need(body, "name", "CheckRun")
    sha = need(body, "head_sha", "CheckRun")
    if not srv.has_commit(sha):
        raise ApiError(422, shapes.error(f"No commit found for SHA: {sha}", 422))
    record: dict[str, Any] = {"id": srv.next_id(), "sha": sha, "name": name, "created_at": shapes.now_iso(),
                              "actor": srv.actor}
    _check_fields(srv, body, record)
    srv.check_runs.setdefault(sha, []).append(record)
    return Reply(201, shapes.check_run(srv.repo_api, srv.html_url, record))


@at("PATCH", r"/check-runs/(?P<id>\d+)", "/check-runs/{check_run_id}", ("checks", "write"))
def update_check_run(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    for runs in srv.check_runs.values():
        for record in runs:
            if record["id"] == int(m["id"]):
                if not isinstance(body, dict):
                    raise ApiError(422, shapes.validation("CheckRun", "body"))
                _check_fields(srv, body, record)
                if "name" in body:
                    record["name"] = need(body, "name", "CheckRun")
                return Reply(200, shapes.check_run(srv.repo_api, srv.html_url, record))
    raise not_found()


@at("GET", "/commits/(?P<ref>.+)/check-runs", "/commits/{ref}/check-runs", ("checks", "read"))
def check_runs(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    runs = srv.check_runs.get(srv.resolve_sha(m["ref"]), [])
    if q.get("filter", "latest") == "latest":
        latest: dict[str, dict[str, Any]] = {}
        for run in runs:
            latest[run["name"]] = run  # later runs of the same name replace earlier ones
        runs = list(latest.values())
    runs = [r for r in reversed(runs) if (not q.get("check_name") or r["name"] == q["check_name"])
            and (not q.get("status") or r["status"] == q["status"])]
    page = paginate(srv, f"/repos/{srv.owner}/{srv.repo}/commits/{m['ref']}/check-runs", q, runs)
    items = [shapes.check_run(srv.repo_api, srv.html_url, r) for r in page.body]
    return Reply(200, {"total_count": len(runs), "check_runs": items}, page.headers)


@at("GET", "/commits/(?P<ref>.+)/status", "/commits/{ref}/status", ("statuses", "read"))
def combined_status(srv: GitHubServer, m: re.Match[str], q: dict[str, str], body: Any) -> Reply:
    sha = srv.resolve_sha(m["ref"])
    latest: dict[str, dict[str, Any]] = {}
    for record in srv.statuses.get(sha, []):
        latest[record["context"]] = record
    states = {r["state"] for r in latest.values()}
    if states & {"failure", "error"}:
        state = "failure"
    elif "pending" in states or not states:
        state = "pending"
    else:
        state = "success"
    statuses = [shapes.commit_status(srv.repo_api, r) for r in reversed(latest.values())]
    return Reply(200, {"state": state, "statuses": statuses, "sha": sha, "total_count": len(statuses),
                       "repository": srv.repo_json(), "commit_url": f"{srv.repo_api}/commits/{sha}",
                       "url": f"{srv.repo_api}/commits/{sha}/status"})


# ---- GraphQL: the one mutation REST lacks --------------------------------------------------------------

_MUTATION = re.compile(r"^\s*mutation\b[^{]*\{\s*(?P<name>\w+)\s*\(\s*input\s*:\s*\$input\s*\)")


def graphql(srv: GitHubServer, body: Any) -> Reply:
    """POST /graphql with `markPullRequestReadyForReview(input: {pullRequestId})`, as PyGithub's
    `graphql_named_mutation` sends it: GitHub answers 200 even for an error, with `errors` (a NOT_FOUND for an
    unknown node id); the REST API cannot take a pull request out of draft (no `draft` in PATCH .../pulls/{n})."""
    query = body.get("query") if isinstance(body, dict) else None
    match = _MUTATION.match(query or "")
    if match is None or match["name"] != "markPullRequestReadyForReview":
        return Reply(200, {"errors": [{"message": "this test server knows one mutation: "
                                                  "markPullRequestReadyForReview", "type": "UNSUPPORTED"}]})
    if srv.token_scopes is not None and srv.actor == srv.login and \
            _LEVEL[srv.token_scopes.get("pull-requests", "none")] < _LEVEL["write"]:
        return Reply(200, {"errors": [{"type": "FORBIDDEN", "message": "Resource not accessible by integration"}]})
    node = ((body.get("variables") or {}).get("input") or {}).get("pullRequestId")
    for record in srv.issues.values():
        if record.get("pull") and shapes.node_id("PullRequest", record["id"]) == node:
            record["pull"]["draft"] = False
            record["updated_at"] = shapes.now_iso()
            srv.ready_for_review.append(record["number"])
            return Reply(200, {"data": {"markPullRequestReadyForReview": {
                "clientMutationId": None, "pullRequest": {"isDraft": False}}}})
    return Reply(200, {"errors": [{"type": "NOT_FOUND", "path": ["markPullRequestReadyForReview"],
                                   "message": f"Could not resolve to a node with the global id of '{node}'"}]})
