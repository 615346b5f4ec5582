"""JSON shapes of the GitHub REST API objects the test server returns.

Only the fields plan-runner and PyGithub read, plus the ones that make a
response look like api.github.com's (ids, node ids, urls, timestamps).
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from typing import Any

REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
DOCS = "https://docs.github.com/rest"


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, ident: int) -> str:
    return base64.b64encode(f"{kind}:{ident}".encode()).decode().rstrip("=")


def user(api: str, login: str, ident: int) -> dict[str, Any]:
    return {
        "login": login,
        "id": ident,
        "node_id": node_id("User", ident),
        "type": "Bot" if login.endswith("[bot]") else "User",
        "site_admin": False,
        "url": f"{api}/users/{login}",
        "html_url": f"{api.replace('/api/v3', '')}/{login}",
        "avatar_url": "",
    }


def error(message: str, status: int, **extra: Any) -> dict[str, Any]:
    return {"message": message, "documentation_url": DOCS, "status": str(status), **extra}


def validation(resource: str, field: str, code: str = "invalid", message: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"resource": resource, "field": field, "code": code}
    if message:
        err["message"] = message
    return error("Validation Failed", 422, errors=[err])


def label(repo_api: str, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "node_id": node_id("Label", record["id"]),
        "url": f"{repo_api}/labels/{record['name']}",
        "name": record["name"],
        "color": record.get("color", "ededed"),
        "default": False,
        "description": record.get("description"),
    }


def reaction_summary(url: str, reactions: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"url": url, "total_count": len(reactions)}
    for content in REACTIONS:
        summary[content] = sum(1 for r in reactions if r["content"] == content)
    return summary


def issue(repo_api: str, html: str, record: dict[str, Any], labels: list[dict[str, Any]],
          users: dict[str, dict[str, Any]]) -> dict[str, Any]:
    number = record["number"]
    url = f"{repo_api}/issues/{number}"
    out = {
        "id": record["id"],
        "node_id": node_id("Issue", record["id"]),
        "url": url,
        "repository_url": repo_api,
        "labels_url": f"{url}/labels{{/name}}",
        "comments_url": f"{url}/comments",
        "events_url": f"{url}/events",
        "html_url": f"{html}/{'pull' if record.get('pull') else 'issues'}/{number}",
        "number": number,
        "state": record["state"],
        "state_reason": record.get("state_reason"),
        "title": record["title"],
        "body": record.get("body"),
        "user": users[record["user"]],
        "labels": [label(repo_api, lab) for lab in labels],
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "comments": record.get("comment_count", 0),
        "created_at": record["created_at"],
        "updated_at": record["updated_at"],
        "closed_at": record.get("closed_at"),
        "author_association": "NONE",
        "reactions": reaction_summary(f"{url}/reactions", []),
    }
    if record.get("pull"):
        out["pull_request"] = {
            "url": f"{repo_api}/pulls/{number}",
            "html_url": f"{html}/pull/{number}",
            "diff_url": f"{html}/pull/{number}.diff",
            "patch_url": f"{html}/pull/{number}.patch",
            "merged_at": None,
        }
    return out


def comment(repo_api: str, html: str, record: dict[str, Any], users: dict[str, dict[str, Any]],
            reactions: list[dict[str, Any]]) -> dict[str, Any]:
    url = f"{repo_api}/issues/comments/{record['id']}"
    return {
        "id": record["id"],
        "node_id": node_id("IssueComment", record["id"]),
        "url": url,
        "html_url": f"{html}/issues/{record['issue']}#issuecomment-{record['id']}",
        "issue_url": f"{repo_api}/issues/{record['issue']}",
        "body": record["body"],
        "user": users[record["user"]],
        "created_at": record["created_at"],
        "updated_at": record["updated_at"],
        "author_association": record.get("association", "NONE"),
        "reactions": reaction_summary(f"{url}/reactions", reactions),
    }


def reaction(record: dict[str, Any], users: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "node_id": node_id("Reaction", record["id"]),
        "user": users[record["user"]],
        "content": record["content"],
        "created_at": record["created_at"],
    }


def branch_ref(repo_json: dict[str, Any], owner: dict[str, Any], name: str, sha: str) -> dict[str, Any]:
    return {"label": f"{owner['login']}:{name}", "ref": name, "sha": sha, "user": owner, "repo": repo_json}


def pull(repo_api: str, html: str, record: dict[str, Any], repo_json: dict[str, Any],
         users: dict[str, dict[str, Any]]) -> dict[str, Any]:
    number = record["number"]
    pr = record["pull"]
    owner = repo_json["owner"]
    return {
        "id": record["id"] + 500_000,
        "node_id": node_id("PullRequest", record["id"]),
        "url": f"{repo_api}/pulls/{number}",
        "html_url": f"{html}/pull/{number}",
        "diff_url": f"{html}/pull/{number}.diff",
        "patch_url": f"{html}/pull/{number}.patch",
        "issue_url": f"{repo_api}/issues/{number}",
        "comments_url": f"{repo_api}/issues/{number}/comments",
        "number": number,
        "state": record["state"],
        "locked": False,
        "title": record["title"],
        "body": record.get("body"),
        "user": users[record["user"]],
        "labels": [],
        "draft": pr.get("draft", False),
        "merged": False,
        "mergeable": None,
        "merged_at": None,
        "created_at": record["created_at"],
        "updated_at": record["updated_at"],
        "closed_at": record.get("closed_at"),
        "head": branch_ref(repo_json, owner, pr["head"], pr["head_sha"]),
        "base": branch_ref(repo_json, owner, pr["base"], pr["base_sha"]),
        "author_association": "NONE",
    }


def repository(api: str, html_root: str, owner: dict[str, Any], name: str, ident: int,
               default_branch: str, has_issues: bool = True) -> dict[str, Any]:
    full = f"{owner['login']}/{name}"
    return {
        "id": ident,
        "node_id": node_id("Repository", ident),
        "name": name,
        "full_name": full,
        "private": True,
        "owner": owner,
        "html_url": f"{html_root}/{full}",
        "url": f"{api}/repos/{full}",
        "default_branch": default_branch,
        "has_issues": has_issues,
        "archived": False,
        "disabled": False,
        "visibility": "private",
        "permissions": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
    }


def check_run(repo_api: str, html: str, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "node_id": node_id("CheckRun", record["id"]),
        "head_sha": record["sha"],
        "external_id": "",
        "url": f"{repo_api}/check-runs/{record['id']}",
        "html_url": f"{html}/runs/{record['id']}",
        "details_url": f"{html}/runs/{record['id']}",
        "status": record["status"],
        "conclusion": record.get("conclusion"),
        "started_at": record["created_at"],
        "completed_at": record["created_at"] if record["status"] == "completed" else None,
        "name": record["name"],
        "output": {"title": None, "summary": record.get("summary"), "text": None,
                   "annotations_count": 0, "annotations_url": ""},
        "check_suite": {"id": record["id"] + 1},
        "app": {"id": 15368, "slug": "github-actions", "name": "GitHub Actions"},
        "pull_requests": [],
    }


def commit_status(repo_api: str, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "node_id": node_id("StatusContext", record["id"]),
        "url": f"{repo_api}/statuses/{record['sha']}",
        "state": record["state"],
        "description": record.get("description"),
        "target_url": None,
        "context": record["context"],
        "created_at": record["created_at"],
        "updated_at": record["created_at"],
    }
