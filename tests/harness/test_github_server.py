"""Tests for the local GitHub test server: shapes, status codes, headers and faults as api.github.com."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from github import Auth, Github, GithubException

from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

TOKEN = "test-token"


@pytest.fixture
def srv() -> Iterator[GitHubServer]:
    with GitHubServer(token=TOKEN) as server:
        yield server


@pytest.fixture
def http(srv: GitHubServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"token {TOKEN}"}, timeout=5) as client:
        yield client


@pytest.fixture
def gh(srv: GitHubServer) -> Iterator[Github]:
    client = Github(base_url=srv.url, auth=Auth.Token(TOKEN), retry=None, seconds_between_requests=None,
                    seconds_between_writes=None)
    yield client
    client.close()


REPO = "/repos/octo-org/demo"


def test_requests_need_the_configured_token(srv: GitHubServer) -> None:
    """No token or a wrong one gets 401 Bad credentials; `token` and `Bearer` schemes both work."""
    with httpx.Client(base_url=srv.url, timeout=5) as client:
        assert client.get(REPO).status_code == 401
        wrong = client.get(REPO, headers={"Authorization": "token nope"})
        assert wrong.status_code == 401 and wrong.json()["message"] == "Bad credentials"
        assert client.get(REPO, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get(REPO, headers={"Authorization": f"token {TOKEN}"}).status_code == 200


def test_every_response_carries_rate_limit_headers(http: httpx.Client) -> None:
    """x-ratelimit-* headers come with each answer and `remaining` goes down per request."""
    first = http.get(REPO)
    second = http.get(REPO)
    assert first.headers["x-ratelimit-limit"] == "5000"
    assert int(second.headers["x-ratelimit-remaining"]) == int(first.headers["x-ratelimit-remaining"]) - 1
    assert int(first.headers["x-ratelimit-reset"]) > time.time()
    assert first.headers["etag"].startswith('W/"')


def test_unknown_repo_and_route_are_404(http: httpx.Client) -> None:
    """Other repositories and unknown paths answer 404 Not Found."""
    assert http.get("/repos/else/where").status_code == 404
    assert http.get(f"{REPO}/nothing-here").json()["message"] == "Not Found"


def test_issue_lifecycle_through_pygithub(srv: GitHubServer, gh: Github) -> None:
    """Create, read, update (state, labels, body, title) an issue with PyGithub."""
    repo = gh.get_repo("octo-org/demo")
    issue = repo.create_issue("Title", body="Body", labels=["plan-runner"])
    assert (issue.number, issue.state, [lab.name for lab in issue.labels]) == (1, "open", ["plan-runner"])
    assert issue.user.login == "github-actions[bot]" and issue.user.type == "Bot"
    issue.edit(title="New", body="New body", labels=["a", "b"], state="closed")
    fetched = repo.get_issue(1)
    assert (fetched.title, fetched.body, fetched.state) == ("New", "New body", "closed")
    assert {lab.name for lab in fetched.labels} == {"a", "b"}
    assert fetched.closed_at is not None


def test_issue_list_filters(srv: GitHubServer, gh: Github) -> None:
    """Listing filters by state, by every given label and by creator, newest first."""
    srv.add_issue("a", labels=("plan-runner", "x"))
    srv.add_issue("b", labels=("plan-runner",), user="mona")
    srv.add_issue("c", state="closed", labels=("plan-runner",))
    repo = gh.get_repo("octo-org/demo")
    assert [i.title for i in repo.get_issues(state="open")] == ["b", "a"]
    assert [i.title for i in repo.get_issues(state="all", labels=["plan-runner"])] == ["c", "b", "a"]
    assert [i.title for i in repo.get_issues(labels=["plan-runner", "x"])] == ["a"]
    assert [i.title for i in repo.get_issues(creator="mona")] == ["b"]
    assert [i.title for i in repo.get_issues(state="closed")] == ["c"]


def test_pagination_uses_link_headers(srv: GitHubServer, http: httpx.Client, gh: Github) -> None:
    """Pages follow `Link: <...>; rel="next"` as GitHub sends them, and PyGithub walks them all."""
    for n in range(5):
        srv.add_issue(f"i{n}")
    page1 = http.get(f"{REPO}/issues", params={"per_page": 2})
    assert len(page1.json()) == 2
    assert 'rel="next"' in page1.headers["link"] and 'rel="last"' in page1.headers["link"]
    last = http.get(f"{REPO}/issues", params={"per_page": 2, "page": 3})
    assert len(last.json()) == 1 and 'rel="next"' not in last.headers["link"]
    paged = Github(base_url=srv.url, auth=Auth.Token(TOKEN), per_page=2, retry=None)
    try:
        assert len(list(paged.get_repo("octo-org/demo").get_issues())) == 5
    finally:
        paged.close()


def test_create_issue_validation(http: httpx.Client) -> None:
    """A missing title is 422 Validation Failed; a body that is not JSON is 400."""
    missing = http.post(f"{REPO}/issues", json={"body": "x"})
    assert missing.status_code == 422 and missing.json()["errors"][0]["field"] == "title"
    broken = http.post(f"{REPO}/issues", content=b"{nope", headers={"Content-Type": "application/json"})
    assert broken.status_code == 400


def test_comments_and_reactions(srv: GitHubServer, gh: Github, http: httpx.Client) -> None:
    """Comments are created and listed; a reaction is 201 when new and 200 when it exists."""
    number = srv.add_issue("park")
    issue = gh.get_repo("octo-org/demo").get_issue(number)
    created = issue.create_comment("hello")
    srv.add_comment(number, "/plan-runner resume", user="mona")
    assert [(c.body, c.user.login) for c in issue.get_comments()] == [("hello", "github-actions[bot]"),
                                                                       ("/plan-runner resume", "mona")]
    first = http.post(f"{REPO}/issues/comments/{created.id}/reactions", json={"content": "eyes"})
    again = http.post(f"{REPO}/issues/comments/{created.id}/reactions", json={"content": "eyes"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert http.post(f"{REPO}/issues/comments/{created.id}/reactions", json={"content": "wave"}).status_code == 422
    listed = http.get(f"{REPO}/issues/comments/{created.id}/reactions").json()
    assert [r["content"] for r in listed] == ["eyes"]
    assert http.get(f"{REPO}/issues/comments/999999/reactions").status_code == 404


def test_labels_list_and_create(gh: Github) -> None:
    """Creating a label answers 201 and lists it; creating it again answers 422."""
    repo = gh.get_repo("octo-org/demo")
    assert repo.create_label("plan-runner", "5319e7", "parked").name == "plan-runner"
    assert [(lab.name, lab.color) for lab in repo.get_labels()] == [("plan-runner", "5319e7")]
    with pytest.raises(GithubException) as dup:
        repo.create_label("plan-runner", "5319e7")
    assert dup.value.status == 422


@pytest.mark.parametrize("role, legacy", [("admin", "admin"), ("maintain", "write"), ("write", "write"),
                                          ("triage", "read"), ("read", "read"), ("none", "none")])
def test_collaborator_permission(srv: GitHubServer, http: httpx.Client, role: str, legacy: str) -> None:
    """The permission endpoint answers the legacy `permission` and the exact `role_name`, as GitHub does."""
    srv.set_permission("mona", role)
    data = http.get(f"{REPO}/collaborators/mona/permission").json()
    assert (data["permission"], data["role_name"], data["user"]["login"]) == (legacy, role, "mona")


def test_custom_role_reports_its_base_permission(srv: GitHubServer, http: httpx.Client) -> None:
    """A custom repository role answers its base role's legacy `permission` and its own name in `role_name`."""
    srv.add_custom_role("release-captain", "maintain")
    srv.set_permission("mona", "release-captain")
    data = http.get(f"{REPO}/collaborators/mona/permission").json()
    assert (data["permission"], data["role_name"]) == ("write", "release-captain")


def test_actions_bot_may_not_open_pull_requests_by_default(srv: GitHubServer, http: httpx.Client) -> None:
    """With the repository's default setting the Actions bot's pull request is refused with GitHub's 403."""
    srv.set_branch("work")
    new = {"head": "work", "base": "main", "title": "t"}
    refused = http.post(f"{REPO}/pulls", json=new)
    assert refused.status_code == 403
    assert refused.json()["message"] == "GitHub Actions is not permitted to create or approve pull requests."
    srv.actions_can_create_prs = True
    assert http.post(f"{REPO}/pulls", json=new).status_code == 201


def test_issues_disabled_answers_410(srv: GitHubServer, http: httpx.Client) -> None:
    """With issues disabled, creating, reading and commenting on issues answers 410 Gone."""
    number = srv.add_issue("old")
    srv.has_issues = False
    for method, path, body in (("POST", "/issues", {"title": "x"}), ("GET", f"/issues/{number}", None),
                               ("POST", f"/issues/{number}/comments", {"body": "x"})):
        answer = http.request(method, REPO + path, json=body)
        assert (answer.status_code, answer.json()["message"]) == (410, "Issues are disabled for this repo")
    assert http.get(REPO).json()["has_issues"] is False


def test_missing_token_permission_answers_403(srv: GitHubServer, http: httpx.Client) -> None:
    """A call the job's token was not granted answers 403 "Resource not accessible by integration"."""
    srv.token_scopes = {"issues": "read", "checks": "none"}
    assert http.get(f"{REPO}/issues").status_code == 200
    for answer in (http.post(f"{REPO}/issues", json={"title": "x"}), http.get(f"{REPO}/commits/main/check-runs")):
        assert (answer.status_code, answer.json()["message"]) == (403, "Resource not accessible by integration")


@pytest.mark.parametrize("path, body", [("/issues", {"title": "t"}), ("/issues/1/comments", {}),
                                        ("/issues/1", {})])
def test_bodies_over_65536_characters_are_refused(srv: GitHubServer, http: httpx.Client, path: str,
                                                  body: dict) -> None:
    """An issue, comment or issue edit with a body over 65,536 characters is refused with 422; one at it is not."""
    srv.add_issue("first")
    method = "PATCH" if path == "/issues/1" else "POST"
    too_long = http.request(method, REPO + path, json={**body, "body": "x" * 65_537})
    assert too_long.status_code == 422 and "too long" in too_long.json()["errors"][0]["message"]
    assert http.request(method, REPO + path, json={**body, "body": "x" * 65_536}).status_code in (200, 201)


def test_bot_permission_is_404(http: httpx.Client) -> None:
    """An app bot is not a collaborator: 404."""
    assert http.get(f"{REPO}/collaborators/dependabot[bot]/permission").status_code == 404


def test_workflow_dispatch(srv: GitHubServer, http: httpx.Client) -> None:
    """A dispatch answers 204 and is recorded; unknown workflows, inputs and refs are refused."""
    url = f"{REPO}/actions/workflows/plan-runner.yml/dispatches"
    ok = http.post(url, json={"ref": "main", "inputs": {"plan": "plans/a.md"}})
    assert ok.status_code == 204 and ok.content == b""
    assert [(d.workflow, d.ref, d.inputs) for d in srv.dispatches] == [("plan-runner.yml", "main",
                                                                         {"plan": "plans/a.md"})]
    assert http.post(url, json={"ref": "nope"}).status_code == 422
    srv.add_workflow("plan-runner.yml", inputs=("plan",))
    assert http.post(url, json={"ref": "main", "inputs": {"other": "1"}}).status_code == 422
    assert http.post(f"{REPO}/actions/workflows/x.yml/dispatches", json={"ref": "main"}).status_code == 404


def test_pull_requests(srv: GitHubServer, gh: Github) -> None:
    """Pull requests are created, filtered by head and base, fetched; duplicates and empty ones are 422."""
    srv.set_branch("feature")
    srv.actions_can_create_prs = True
    repo = gh.get_repo("octo-org/demo")
    pr = repo.create_pull(base="main", head="feature", title="T", body="B")
    assert (pr.number, pr.head.ref, pr.base.ref, pr.state) == (1, "feature", "main", "open")
    assert [p.number for p in repo.get_pulls(state="open", head="octo-org:feature")] == [1]
    assert list(repo.get_pulls(state="open", head="octo-org:other")) == []
    assert list(repo.get_pulls(base="release")) == []
    assert repo.get_pull(1).title == "T"
    assert repo.get_issue(1).pull_request is not None  # a pull request is an issue too
    with pytest.raises(GithubException) as dup:
        repo.create_pull(base="main", head="feature", title="T2", body="")
    assert dup.value.status == 422 and "already exists" in str(dup.value.data)
    srv.set_branch("same", srv.branches["main"])
    with pytest.raises(GithubException) as empty:
        repo.create_pull(base="main", head="same", title="T3", body="")
    assert "No commits between" in str(empty.value.data)


def test_check_runs_and_combined_status(srv: GitHubServer, http: httpx.Client) -> None:
    """Check runs list the latest run per name (or all), filter by name; the combined status folds contexts."""
    srv.set_check_run("abc", "tests", conclusion="failure")
    srv.set_check_run("abc", "tests", conclusion="success")
    srv.set_check_run("abc", "lint", status="in_progress")
    latest = http.get(f"{REPO}/commits/abc/check-runs").json()
    assert latest["total_count"] == 2
    assert {(r["name"], r["status"], r["conclusion"]) for r in latest["check_runs"]} == {
        ("tests", "completed", "success"), ("lint", "in_progress", None)}
    assert http.get(f"{REPO}/commits/abc/check-runs", params={"filter": "all"}).json()["total_count"] == 3
    assert http.get(f"{REPO}/commits/abc/check-runs", params={"check_name": "lint"}).json()["total_count"] == 1
    assert http.get(f"{REPO}/commits/abc/status").json()["state"] == "pending"  # no statuses yet
    srv.set_status("abc", "ci/a", "success")
    assert http.get(f"{REPO}/commits/abc/status").json()["state"] == "success"
    srv.set_status("abc", "ci/b", "error")
    combined = http.get(f"{REPO}/commits/abc/status").json()
    assert combined["state"] == "failure" and combined["total_count"] == 2


def test_branch_name_resolves_to_its_sha(srv: GitHubServer, http: httpx.Client) -> None:
    """Checks asked by branch name are those of the branch's head commit."""
    sha = srv.set_branch("plan-runner/x")
    srv.set_check_run(sha, "tests")
    assert http.get(f"{REPO}/commits/plan-runner/x/check-runs").json()["total_count"] == 1


def test_calls_are_logged(srv: GitHubServer, http: httpx.Client) -> None:
    """Every request is logged with method, path, query, body and status; `count` filters them."""
    http.get(f"{REPO}/issues", params={"state": "all"})
    http.post(f"{REPO}/issues", json={"title": "t"})
    assert [(c.method, c.path, c.status) for c in srv.calls] == [
        ("GET", f"{REPO}/issues", 200), ("POST", f"{REPO}/issues", 201)]
    assert srv.calls[0].query == {"state": "all"} and srv.calls[1].body == {"title": "t"}
    assert srv.count("POST") == 1 and srv.count(path=r".*/issues") == 2


def test_fail_next_answers_the_status_then_recovers(srv: GitHubServer, http: httpx.Client) -> None:
    """`fail_next(n, status)` fails exactly n requests, optionally only those matching a pattern."""
    srv.fail_next(2, status=502)
    assert [http.get(REPO).status_code for _ in range(3)] == [502, 502, 200]
    srv.fail_next(1, status=500, match=r"^POST ")
    assert http.get(REPO).status_code == 200
    assert http.post(f"{REPO}/issues", json={"title": "t"}).status_code == 500


def test_secondary_rate_limit_shape(srv: GitHubServer, http: httpx.Client) -> None:
    """A secondary rate limit is 403 with retry-after and GitHub's message."""
    srv.secondary_rate_limit(1, retry_after=7)
    answer = http.get(REPO)
    assert answer.status_code == 403 and answer.headers["retry-after"] == "7"
    assert answer.json()["message"].startswith("You have exceeded a secondary rate limit")


def test_primary_rate_limit_shape(srv: GitHubServer, http: httpx.Client) -> None:
    """A primary rate limit is 403 (or 429) with remaining 0 and the reset time."""
    srv.primary_rate_limit(1, reset_in=60, status=429)
    answer = http.get(REPO)
    assert answer.status_code == 429 and answer.headers["x-ratelimit-remaining"] == "0"
    assert int(answer.headers["x-ratelimit-reset"]) >= int(time.time()) + 59
    assert answer.json()["message"].startswith("API rate limit exceeded")


def test_delay_and_reset_faults(srv: GitHubServer) -> None:
    """`delay_next` slows an answer past a client timeout; `reset_next` drops the connection."""
    srv.delay_next(1, seconds=0.6)
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"token {TOKEN}"}, timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.get(REPO)
    srv.reset_next(1)
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"token {TOKEN}"}, timeout=2) as client:
        with pytest.raises(httpx.TransportError):
            client.get(REPO)
        assert client.get(REPO).status_code == 200


def test_close_is_idempotent_and_frees_the_port(srv: GitHubServer) -> None:
    """Closing twice is fine, and afterwards the port refuses connections."""
    url = srv.url
    srv.close()
    srv.close()
    with httpx.Client(timeout=1) as client, pytest.raises(httpx.ConnectError):
        client.get(url + REPO)


def test_a_listening_socket_closed_behind_the_servers_back_is_named_at_its_close() -> None:
    """A stray close in the test process of the number the server listens on (its port then free for another
    worker's listener) fails the test with that cause at the server's close, never silently."""
    import contextlib
    import os

    server = GitHubServer(token=TOKEN).start()
    number = server._httpd.socket.fileno()  # type: ignore[union-attr]
    os.close(number)  # what a double close elsewhere does
    stand_in = os.open(os.devnull, os.O_RDONLY)  # the freed number taken by the next file opened, as happens
    try:
        with pytest.raises(AssertionError, match="listening socket .* was closed or replaced while it served"):
            server.close()
    finally:
        with contextlib.suppress(OSError):
            os.close(stand_in)


def test_a_server_left_alone_closes_quietly() -> None:
    """The check above says nothing of a server whose socket was its own to the end."""
    with GitHubServer(token=TOKEN) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"token {TOKEN}"}, timeout=5) as client:
            assert client.get(f"/repos/{server.owner}/{server.repo}").status_code == 200
