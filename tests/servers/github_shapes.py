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
    url = f"{api}/users/{login}"
    return {
        "login": login,
        "id": ident,
        "node_id": node_id("User", ident),
        "type": "Bot" if login.endswith("[bot]") else "User",
        "site_admin": False,
        "url": url,
        "html_url": f"{api.replace('/api/v3', '')}/{login}",
        "avatar_url": f"{api}/avatars/{ident}",
        "gravatar_id": "",
        "followers_url": f"{url}/followers",
        "following_url": f"{url}/following{{/other_user}}",
        "gists_url": f"{url}/gists{{/gist_id}}",
        "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{url}/subscriptions",
        "organizations_url": f"{url}/orgs",
        "repos_url": f"{url}/repos",
        "events_url": f"{url}/events{{/privacy}}",
        "received_events_url": f"{url}/received_events",
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
        "commits_url": f"{repo_api}/pulls/{number}/commits",
        "review_comments_url": f"{repo_api}/pulls/{number}/comments",
        "review_comment_url": f"{repo_api}/pulls/comments{{/number}}",
        "statuses_url": f"{repo_api}/statuses/{pr['head_sha']}",
        "_links": {key: {"href": href} for key, href in (
            ("self", f"{repo_api}/pulls/{number}"), ("html", f"{html}/pull/{number}"),
            ("issue", f"{repo_api}/issues/{number}"), ("comments", f"{repo_api}/issues/{number}/comments"),
            ("review_comments", f"{repo_api}/pulls/{number}/comments"),
            ("review_comment", f"{repo_api}/pulls/comments{{/number}}"),
            ("commits", f"{repo_api}/pulls/{number}/commits"), ("statuses", f"{repo_api}/statuses/{pr['head_sha']}"))},
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "auto_merge": None,
        "merge_commit_sha": None,
        "merged_by": None,
        "mergeable_state": "unknown",
        "maintainer_can_modify": False,
        "comments": record.get("comment_count", 0),
        "review_comments": 0,
        "commits": 1,
        "additions": 1,
        "deletions": 0,
        "changed_files": 1,
        "head": branch_ref(repo_json, owner, pr["head"], pr["head_sha"]),
        "base": branch_ref(repo_json, owner, pr["base"], pr["base_sha"]),
        "author_association": "NONE",
    }


# The `{name}_url` templates every repository object carries, as api.github.com spells them.
_REPO_URLS = {
    "archive_url": "/{archive_format}{/ref}", "assignees_url": "/assignees{/user}", "blobs_url": "/git/blobs{/sha}",
    "branches_url": "/branches{/branch}", "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}", "commits_url": "/commits{/sha}", "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}", "contributors_url": "/contributors", "deployments_url": "/deployments",
    "downloads_url": "/downloads", "events_url": "/events", "forks_url": "/forks", "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}", "git_tags_url": "/git/tags{/sha}", "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}", "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}", "keys_url": "/keys{/key_id}", "labels_url": "/labels{/name}",
    "languages_url": "/languages", "merges_url": "/merges", "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}", "pulls_url": "/pulls{/number}",
    "releases_url": "/releases{/id}", "stargazers_url": "/stargazers", "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers", "subscription_url": "/subscription", "tags_url": "/tags",
    "teams_url": "/teams", "trees_url": "/git/trees{/sha}",
}


def repository(api: str, html_root: str, owner: dict[str, Any], name: str, ident: int,
               default_branch: str, has_issues: bool = True) -> dict[str, Any]:
    full = f"{owner['login']}/{name}"
    url = f"{api}/repos/{full}"
    html = f"{html_root}/{full}"
    stamp = "2024-01-01T00:00:00Z"
    return {
        "id": ident,
        "node_id": node_id("Repository", ident),
        "name": name,
        "full_name": full,
        "private": True,
        "owner": owner,
        "html_url": html,
        "description": None,
        "fork": False,
        "url": url,
        **{key: url + tail for key, tail in _REPO_URLS.items()},
        "git_url": f"{html}.git".replace("http://", "git://").replace("https://", "git://"),
        "ssh_url": f"git@localhost:{full}.git",
        "clone_url": f"{html}.git",
        "svn_url": html,
        "mirror_url": None,
        "homepage": None,
        "language": None,
        "license": None,
        "size": 1,
        "forks": 0, "forks_count": 0, "watchers": 0, "watchers_count": 0, "stargazers_count": 0,
        "subscribers_count": 1, "network_count": 0, "open_issues": 0, "open_issues_count": 0,
        "default_branch": default_branch,
        "has_issues": has_issues,
        "has_projects": False, "has_wiki": False, "has_pages": False, "has_downloads": False,
        "has_discussions": False,
        "archived": False,
        "disabled": False,
        "visibility": "private",
        "created_at": stamp, "updated_at": stamp, "pushed_at": stamp,
        "permissions": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
    }


def github_actions_app(repo_api: str) -> dict[str, Any]:
    api = repo_api.split("/repos/")[0]
    return {"id": 15368, "slug": "github-actions", "node_id": node_id("Integration", 15368),
            "owner": user(api, "github", 9919), "name": "GitHub Actions", "description": "Automate your workflow",
            "external_url": "https://help.github.com/en/actions", "html_url": "https://github.com/apps/github-actions",
            "created_at": "2018-07-30T09:30:17Z", "updated_at": "2019-12-10T19:04:12Z",
            "permissions": {"checks": "write", "contents": "write"}, "events": ["check_run", "push"]}


def check_run(repo_api: str, html: str, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "node_id": node_id("CheckRun", record["id"]),
        "head_sha": record["sha"],
        "external_id": "",
        "url": f"{repo_api}/check-runs/{record['id']}",
        "html_url": f"{html}/runs/{record['id']}",
        "details_url": record.get("details_url") or f"{html}/runs/{record['id']}",
        "status": record["status"],
        "conclusion": record.get("conclusion"),
        "started_at": record["created_at"],
        "completed_at": record["created_at"] if record["status"] == "completed" else None,
        "name": record["name"],
        "output": {**{"title": None, "summary": record.get("summary"), "text": None},
                   **(record.get("output") or {}), "annotations_count": 0,
                   "annotations_url": f"{repo_api}/check-runs/{record['id']}/annotations"},
        "check_suite": {"id": record["id"] + 1},
        "app": github_actions_app(repo_api),
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
        "avatar_url": None,
        "context": record["context"],
        "created_at": record["created_at"],
        "updated_at": record["created_at"],
    }


def workflow_run(repo_api: str, html: str, record: dict[str, Any], repo_json: dict[str, Any],
                 actor: dict[str, Any], head_sha: str) -> dict[str, Any]:
    """GET .../actions/runs/{run_id}: the fields GitHub's description requires."""
    ident = record["id"]
    url = f"{repo_api}/actions/runs/{ident}"
    wf_id = sum(record["workflow"].encode()) + 1000
    return {
        "id": ident, "name": record["workflow"].rsplit(".", 1)[0], "node_id": node_id("WorkflowRun", ident),
        "check_suite_id": ident + 1, "head_branch": record["ref"], "head_sha": head_sha,
        "path": f".github/workflows/{record['workflow']}", "run_number": record["number"], "run_attempt": 1,
        "display_title": record["workflow"], "event": record["event"], "status": record["status"],
        "conclusion": record["conclusion"], "workflow_id": wf_id, "url": url,
        "html_url": f"{html}/actions/runs/{ident}", "pull_requests": [], "created_at": record["created_at"],
        "updated_at": record["updated_at"], "run_started_at": record["created_at"], "actor": actor,
        "triggering_actor": actor, "jobs_url": f"{url}/jobs", "logs_url": f"{url}/logs",
        "check_suite_url": f"{repo_api}/check-suites/{ident + 1}", "artifacts_url": f"{url}/artifacts",
        "cancel_url": f"{url}/cancel", "rerun_url": f"{url}/rerun", "previous_attempt_url": None,
        "workflow_url": f"{repo_api}/actions/workflows/{wf_id}",
        "head_commit": {"id": head_sha, "tree_id": head_sha, "message": "plan-runner", "timestamp": record["created_at"],
                        "author": {"name": "Maintainer", "email": "m@example.invalid"},
                        "committer": {"name": "Maintainer", "email": "m@example.invalid"}},
        "repository": repo_json, "head_repository": repo_json, "head_repository_id": repo_json["id"],
    }
