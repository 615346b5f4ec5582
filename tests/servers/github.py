"""A stateful GitHub REST API server on 127.0.0.1 for tests.

It speaks the subset of api.github.com that plan-runner uses, with the same
JSON shapes, status codes and rate-limit headers, so PyGithub runs against it
over real HTTP. Tests read and set its state directly (`srv.issues`,
`srv.dispatches`, `srv.calls`, `srv.set_permission(...)`) and inject faults
(`srv.fail_next`, `srv.secondary_rate_limit`, `srv.primary_rate_limit`,
`srv.delay_next`, `srv.reset_next`, `srv.truncate_next`).

It also gives GitHub's refusals, with GitHub's messages (checked against the
published OpenAPI description by tests/harness/test_github_contract.py):
* `srv.actions_can_create_prs = False` (GitHub's default for new repositories):
  a pull request opened with the Actions bot's token is refused with 403;
* `srv.has_issues = False`: every issue endpoint answers 410 Gone;
* `srv.token_scopes = {"issues": "read", ...}`: a call needing more than the
  job's token was granted answers 403 "Resource not accessible by integration", with the
  `X-Accepted-GitHub-Permissions` header naming what the call needs (e.g. `actions=write`);
* `srv.add_workflow(file, inputs=None)`: a workflow without a `workflow_dispatch` trigger,
  whose dispatch answers 422 "Workflow does not have 'workflow_dispatch' trigger";
* `srv.add_custom_role(name, base)`: a custom repository role, reported as
  GitHub does (`permission` the base role's legacy name, `role_name` the name);
* GitHub's rule for what the job's token does ("Triggering a workflow from a workflow"): events
  caused by GITHUB_TOKEN start no workflow run, except `workflow_dispatch` and `repository_dispatch`
  (`srv.starts_runs(event, actor)`). Every dispatch starts a run (`srv.runs`, `GET .../actions/runs/{id}`);
  `srv.complete_run(id, conclusion)` ends it and returns the `workflow_run` event GitHub would deliver,
  or None: for a run the job's token dispatched, none comes;
* a body longer than 65,536 characters is refused with 422.

Beside REST it answers `POST /graphql` for the one mutation plan-runner sends there,
`markPullRequestReadyForReview` (REST cannot take a pull request out of draft).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from tests.servers import github_shapes as shapes
from tests.servers.stopping import stop_loop

ROLES = ("admin", "maintain", "write", "triage", "read", "none")
MAX_BODY = 65_536  # characters GitHub accepts in an issue, comment or pull request body
BOT = "github-actions[bot]"  # the login of a job's GITHUB_TOKEN
# The only events the job's token causes that start workflow runs (docs.github.com, "Triggering a workflow from a
# workflow": "events triggered by the GITHUB_TOKEN, with the exception of workflow_dispatch and repository_dispatch,
# will not create a new workflow run").
JOB_TOKEN_TRIGGERS = frozenset({"workflow_dispatch", "repository_dispatch"})
RUN_CONCLUSIONS = ("success", "failure", "cancelled", "timed_out", "skipped", "neutral", "action_required", "stale")
# The legacy `permission` field folds the newer roles into the old four.
LEGACY = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read",
          "none": "none"}


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    response: Any = None
    actor: str = ""  # the login of the token that made the call (srv.token: srv.login; srv.tokens: theirs)


@dataclass(frozen=True)
class Dispatch:
    workflow: str
    ref: str
    inputs: dict[str, Any]
    run_id: int | None = None  # the run GitHub reported back (`return_run_details: true`)


@dataclass
class Fault:
    kind: str  # status | secondary | primary | delay | reset | truncate
    count: int
    match: re.Pattern[str] | None
    status: int = 502
    seconds: float = 0.0


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message"))
        self.status = status
        self.body = body
        self.headers = headers or {}


def not_found() -> ApiError:
    return ApiError(404, shapes.error("Not Found", 404))


class GitHubServer:
    """Use as a context manager; `.url` is the API base (GITHUB_API_URL)."""

    def __init__(self, *, owner: str = "octo-org", repo: str = "demo", token: str = "test-token",
                 login: str = "github-actions[bot]", default_branch: str = "main",
                 rate_limit: int = 5000) -> None:
        self.owner, self.repo, self.token, self.login = owner, repo, token, login
        self.default_branch = default_branch
        self.rate_limit, self.rate_used = rate_limit, 0
        self.lock = threading.RLock()
        self._sockets_lock = threading.Lock()  # the accept loop's own: it never waits on a request being served
        self._ids = 1000
        self.users: dict[str, dict[str, Any]] = {}
        self.issues: dict[int, dict[str, Any]] = {}  # pull requests too, as GitHub numbers them
        self.comments: dict[int, dict[str, Any]] = {}
        self.reactions: dict[int, list[dict[str, Any]]] = {}
        self.review_comments: dict[int, dict[str, Any]] = {}  # a pull request's review comments (on its diff)
        self.comment_edits: list[tuple[int, str]] = []  # (comment id, new body) of each `PATCH` of a comment
        self.labels: dict[str, dict[str, Any]] = {}
        self.permissions: dict[str, str] = {owner: "admin"}
        self.branches: dict[str, str] = {default_branch: self._sha(default_branch)}
        # file -> the workflow_dispatch inputs it declares, or None: it has no workflow_dispatch trigger.
        self.workflows: dict[str, tuple[str, ...] | None] | None = None  # None: accept any workflow
        self.dispatches: list[Dispatch] = []
        self.enabled: list[str] = []  # workflow files `PUT .../enable` was called for (the keep-alive, the clock)
        self.disabled: list[str] = []  # workflow files `PUT .../disable` was called for
        # file -> GitHub's `state`: a file not listed is `active` (a workflow committed is enabled).
        self.workflow_states: dict[str, str] = {}
        self.runs: dict[int, dict[str, Any]] = {}  # workflow runs by id (a dispatch starts one; srv.add_run)
        self.check_runs: dict[str, list[dict[str, Any]]] = {}
        self.ready_for_review: list[int] = []  # pull requests GraphQL's markPullRequestReadyForReview took out of draft
        self.statuses: dict[str, list[dict[str, Any]]] = {}
        self.calls: list[Call] = []
        # More tokens the server accepts, each acting as its own login (a fine-grained personal token, a GitHub
        # App's installation token): what they do is theirs, e.g. a pull request they open is not the Actions bot's.
        self.tokens: dict[str, str] = {}
        self.actor = login  # who makes the call being served (set per request, under the lock)
        self.faults: list[Fault] = []
        self.actions_can_create_prs = False  # "Allow GitHub Actions to create and approve pull requests"
        self.has_issues = True
        self.token_scopes: dict[str, str] | None = None  # None: every permission the job can have
        self.custom_roles: dict[str, str] = {}  # custom role name -> its base role
        # GitHub Apps (tests/servers/github_apps.py): by App id; a token they minted expires (`token_expiry`)
        self.apps: dict[int, Any] = {}
        self.token_expiry: dict[str, float] = {}  # token -> epoch seconds it stops working (401 after)
        self.app_token_ttl = 3600.0
        self.git_bare: Any = None  # a bare repository served over smart HTTP at {url}/{owner}/{repo}.git
        self.git_requests: list[tuple[str, str, str, bool]] = []  # (method, path, the token's login, accepted)
        self.git_read_only: set[str] = set()  # logins git lets fetch but not push (403)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()
        self._listening: tuple[int, int] | None = None  # (device, inode) of the listening socket, from start()
        self.url = ""

    # ---- lifecycle -------------------------------------------------------

    def start(self) -> GitHubServer:
        server = self

        class Handler(_Handler):
            srv = server

        class Httpd(ThreadingHTTPServer):
            daemon_threads = True

            def process_request(self, request: Any, client_address: Any) -> None:
                with server._sockets_lock:
                    server._sockets.add(request)
                super().process_request(request, client_address)

            def shutdown_request(self, request: Any) -> None:
                with server._sockets_lock:
                    server._sockets.discard(request)
                super().shutdown_request(request)

        self._httpd = Httpd(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._listening = _identity(self._httpd.socket)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="github-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._httpd is None:
            return
        assert self._thread is not None
        # A listening socket closed behind the server's back (a stray close in this process of a number that had
        # become it) frees its port: the jobs' calls are then refused, or answered by another test's listener that
        # took the port (CI20's `hello`, CI12's `echo:PUT`). Said here, so such a failure names its cause.
        replaced = _identity(self._httpd.socket) != self._listening
        stop_loop(self._httpd, self._thread, "the test GitHub server")
        with self._sockets_lock:
            for sock in list(self._sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        try:
            self._httpd.server_close()
        except OSError:
            if not replaced:
                raise
        self._thread.join(5)
        self._httpd = None
        if replaced:
            raise AssertionError(f"the test GitHub server's listening socket ({self.url}) was closed or replaced "
                                 "while it served: something in this process closed a descriptor it did not own")

    def __enter__(self) -> GitHubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def html_url(self) -> str:
        return f"{self.url}/{self.owner}/{self.repo}"

    @property
    def repo_api(self) -> str:
        return f"{self.url}/repos/{self.owner}/{self.repo}"

    # ---- test-side setup and inspection ---------------------------------

    def next_id(self) -> int:
        with self.lock:
            self._ids += 1
            return self._ids

    @staticmethod
    def _sha(seed: str) -> str:
        return hashlib.sha1(seed.encode()).hexdigest()

    def user_json(self, login: str) -> dict[str, Any]:
        if login not in self.users:
            self.users[login] = shapes.user(self.url, login, 9000 + len(self.users))
        return self.users[login]

    def set_permission(self, login: str, role: str) -> None:
        assert role in ROLES or role in self.custom_roles, role
        self.permissions[login] = role

    def add_custom_role(self, name: str, base: str) -> None:
        """An organisation's custom repository role inheriting `base` (read, triage, write or maintain)."""
        assert base in ("read", "triage", "write", "maintain"), base
        self.custom_roles[name] = base

    def set_branch(self, name: str, sha: str | None = None) -> str:
        self.branches[name] = sha or self._sha(f"{name}:{time.time_ns()}")
        return self.branches[name]

    def add_workflow(self, file: str, inputs: tuple[str, ...] | None = ("plan",)) -> None:
        """A workflow GitHub knows; `inputs=None`: its `on:` has no `workflow_dispatch` (422 on dispatch)."""
        self.workflows = {**(self.workflows or {}), file: inputs}

    def workflow_active(self, file: str) -> bool:
        return self.workflow_states.get(file, "active") == "active"

    def schedule_fires(self, file: str) -> bool:
        """Whether the workflow's `schedule` would start a run now: only an active workflow's does (a disabled
        workflow starts no run for any trigger, "Disabling and enabling a workflow")."""
        with self.lock:
            return self.workflow_active(file)

    def starts_runs(self, event: str, actor: str) -> bool:
        """Whether an `event` that `actor` caused starts workflow runs: not when the actor is the job's token (the
        Actions bot), but for the two dispatches."""
        return actor != BOT or event in JOB_TOKEN_TRIGGERS

    def add_run(self, workflow: str = "plan-runner.yml", *, event: str = "workflow_dispatch", actor: str = "maintainer",
                ref: str = "main", inputs: dict[str, Any] | None = None) -> int:
        """A workflow run GitHub started (e.g. a person's dispatch from the Actions tab); its id."""
        with self.lock:
            run_id = self.next_id()
            self.user_json(actor)
            self.runs[run_id] = {"id": run_id, "workflow": workflow, "event": event, "actor": actor, "ref": ref,
                                 "inputs": dict(inputs or {}), "status": "queued", "conclusion": None,
                                 "created_at": shapes.now_iso(), "updated_at": shapes.now_iso(),
                                 "number": len(self.runs) + 1}
            return run_id

    def start_run(self, run_id: int) -> None:
        with self.lock:
            self.runs[run_id].update(status="in_progress", updated_at=shapes.now_iso())

    def complete_run(self, run_id: int, conclusion: str) -> dict[str, Any] | None:
        """The run ends with `conclusion` (a cancel, a timeout, a lost runner: GitHub marks it so). Returns the
        `workflow_run` (completed) event payload GitHub delivers to the workflows that listen for it, or None when
        it starts no run: the run was caused by the job's token (a session dispatched by the session before it),
        and GitHub starts no workflow for the events of that token but the two dispatches."""
        assert conclusion in RUN_CONCLUSIONS, conclusion
        with self.lock:
            run = self.runs[run_id]
            run.update(status="completed", conclusion=conclusion, updated_at=shapes.now_iso())
            if not self.starts_runs("workflow_run", run["actor"]):
                return None
            return {"action": "completed", "workflow_run": {
                "id": run_id, "conclusion": conclusion, "event": run["event"], "status": "completed",
                "path": f".github/workflows/{run['workflow']}", "name": run["workflow"].rsplit(".", 1)[0],
                "head_branch": run["ref"]}, "sender": {"login": run["actor"]}}

    def run_json(self, record: dict[str, Any]) -> dict[str, Any]:
        return shapes.workflow_run(self.repo_api, self.html_url, record, self.repo_json(),
                                   self.user_json(record["actor"]), self.resolve_sha(record["ref"]))

    def add_issue(self, title: str, body: str = "", *, user: str | None = None,
                  labels: tuple[str, ...] = (), state: str = "open") -> int:
        with self.lock:
            record = self._new_issue(user or self.login, title, body, list(labels))
            record["state"] = state
            return record["number"]

    def add_comment(self, number: int, body: str, *, user: str) -> int:
        with self.lock:
            return self._new_comment(number, body, user)["id"]

    def add_review_comment(self, pull: int, body: str, *, user: str, path: str = "") -> int:
        """A review comment on a line of pull request #pull's diff (its own ids; reactions in `srv.reactions`)."""
        with self.lock:
            self.user_json(user)
            ident = self.next_id()
            self.review_comments[ident] = {"id": ident, "pull": pull, "body": body, "user": user, "path": path,
                                           "created_at": shapes.now_iso()}
            return ident

    def set_check_run(self, sha: str, name: str, status: str = "completed",
                      conclusion: str | None = "success") -> None:
        with self.lock:
            self.check_runs.setdefault(sha, []).append({
                "id": self.next_id(), "sha": sha, "name": name, "status": status,
                "conclusion": conclusion if status == "completed" else None, "created_at": shapes.now_iso()})

    def set_status(self, sha: str, context: str, state: str) -> None:
        assert state in ("error", "failure", "pending", "success"), state
        with self.lock:
            self.statuses.setdefault(sha, []).append({
                "id": self.next_id(), "sha": sha, "context": context, "state": state,
                "created_at": shapes.now_iso()})

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """Requests so far, optionally by method and a regex the path must fully match."""
        with self.lock:
            return sum(1 for c in self.calls if (method is None or c.method == method)
                       and (path is None or re.fullmatch(path, c.path)))

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.comments.values() if c["issue"] == number]

    # ---- fault injection -------------------------------------------------

    def _fault(self, fault: Fault) -> None:
        with self.lock:
            self.faults.append(fault)

    @staticmethod
    def _pattern(match: str | None) -> re.Pattern[str] | None:
        return re.compile(match) if match else None

    def fail_next(self, n: int = 1, status: int = 502, *, match: str | None = None) -> None:
        """The next `n` requests (matching "METHOD /path" by regex search) answer `status`."""
        self._fault(Fault("status", n, self._pattern(match), status=status))

    def secondary_rate_limit(self, n: int = 1, retry_after: int | None = 1, *, match: str | None = None) -> None:
        self._fault(Fault("secondary", n, self._pattern(match), status=403, seconds=retry_after or 0))

    def primary_rate_limit(self, n: int = 1, reset_in: float = 1.0, status: int = 403, *,
                           match: str | None = None) -> None:
        self._fault(Fault("primary", n, self._pattern(match), status=status, seconds=reset_in))

    def delay_next(self, n: int = 1, seconds: float = 1.0, *, match: str | None = None) -> None:
        self._fault(Fault("delay", n, self._pattern(match), seconds=seconds))

    def reset_next(self, n: int = 1, *, match: str | None = None) -> None:
        """Close the connection with a TCP reset instead of answering."""
        self._fault(Fault("reset", n, self._pattern(match)))

    def truncate_next(self, n: int = 1, *, match: str | None = None) -> None:
        """Do the request, then send only half of the answer's body (the full Content-Length) and close:
        the client cannot know whether what it asked for happened."""
        self._fault(Fault("truncate", n, self._pattern(match)))

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.match is None or fault.match.search(f"{method} {path}"):
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    # ---- state changes used by the routes -------------------------------

    def _new_issue(self, author: str, title: str, body: str | None, labels: list[str],
                   pull: dict[str, Any] | None = None) -> dict[str, Any]:
        number = len(self.issues) + 1
        stamp = shapes.now_iso()
        self.user_json(author)
        for name in labels:
            self.ensure_label(name)
        record = {"id": self.next_id(), "number": number, "title": title, "body": body, "user": author,
                  "state": "open", "labels": list(dict.fromkeys(labels)), "created_at": stamp,
                  "updated_at": stamp, "comment_count": 0, "pull": pull}
        self.issues[number] = record
        return record

    def _new_comment(self, number: int, body: str, author: str) -> dict[str, Any]:
        issue = self.issues.get(number)
        if issue is None:
            raise not_found()
        self.user_json(author)
        stamp = shapes.now_iso()
        record = {"id": self.next_id(), "issue": number, "body": body, "user": author, "created_at": stamp,
                  "updated_at": stamp}
        self.comments[record["id"]] = record
        issue["comment_count"] += 1
        return record

    def ensure_label(self, name: str, color: str = "ededed", description: str | None = None) -> dict[str, Any]:
        key = name.lower()
        if key not in self.labels:
            self.labels[key] = {"id": self.next_id(), "name": name, "color": color, "description": description}
        return self.labels[key]

    def issue_json(self, record: dict[str, Any]) -> dict[str, Any]:
        labels = [self.labels[name.lower()] for name in record["labels"]]
        return shapes.issue(self.repo_api, self.html_url, record, labels, self.users)

    def comment_json(self, record: dict[str, Any]) -> dict[str, Any]:
        return shapes.comment(self.repo_api, self.html_url, record, self.users,
                              self.reactions.get(record["id"], []))

    def repo_json(self) -> dict[str, Any]:
        return shapes.repository(self.url, self.url, self.user_json(self.owner), self.repo, 42,
                                 self.default_branch, has_issues=self.has_issues)

    def pull_json(self, record: dict[str, Any]) -> dict[str, Any]:
        return shapes.pull(self.repo_api, self.html_url, record, self.repo_json(), self.users)

    def has_commit(self, sha: str) -> bool:
        """Whether the repository holds the commit (a check run's `head_sha`): read from the bare remote when the
        branches are a real repository's (tests/e2e_act/world.py BareBranches), else any full sha."""
        bare = getattr(self.branches, "bare", None)
        if bare is not None:
            import subprocess

            return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=bare,
                                  capture_output=True).returncode == 0
        return bool(re.fullmatch(r"[0-9a-f]{40}", sha)) or sha in self.branches.values()

    def checks_on(self, sha: str, name: str | None = None) -> list[dict[str, Any]]:
        """The check runs on a commit (oldest first), optionally of one name."""
        with self.lock:
            return [r for r in self.check_runs.get(sha, []) if name is None or r["name"] == name]

    def resolve_sha(self, ref: str) -> str:
        return self.branches.get(ref, ref)

    def rate_headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": str(self.rate_limit),
            "x-ratelimit-remaining": str(max(0, self.rate_limit - self.rate_used)),
            "x-ratelimit-reset": str(int(time.time()) + 3600),
            "x-ratelimit-used": str(self.rate_used),
            "x-ratelimit-resource": "core",
        }


def _identity(sock: socket.socket) -> tuple[int, int] | None:
    """The open file a socket's descriptor refers to (device, inode), or None when the number is closed."""
    try:
        st = os.fstat(sock.fileno())
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


class _Handler(BaseHTTPRequestHandler):
    srv: GitHubServer
    protocol_version = "HTTP/1.1"
    timeout = 10  # idle keep-alive connections end instead of pinning a thread

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _read_body(self) -> bytes:
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":  # git's packs past its post buffer
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _serve(self, method: str) -> None:
        from tests.servers import github_apps as apps
        from tests.servers.github_routes import route

        srv = self.srv
        parts = urlsplit(self.path)
        path = unquote(parts.path).rstrip("/") or "/"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        raw = self._read_body()
        if apps.GIT_PATH.fullmatch(path):
            status, headers, data = apps.serve_git(srv, method, self.path, self.headers, raw)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if apps.is_app_route(srv, path):
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                body = None
            with srv.lock:
                status, answer = apps.serve_app(srv, method, path, body, self.headers.get("Authorization") or "")
                srv.calls.append(Call(method, path, query, body, status, answer, "app"))
            self._send(method, Reply(status, answer))
            return
        fault = srv.take_fault(method, path)
        if fault is not None and fault.kind == "reset":
            self._reset()
            with srv.lock:
                srv.calls.append(Call(method, path, query, None, 0))
            return
        truncate = fault is not None and fault.kind == "truncate"
        if fault is not None and fault.kind in ("delay", "truncate"):
            if fault.kind == "delay":
                time.sleep(fault.seconds)
            fault = None
        body: Any = None
        if fault is not None:
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                pass
        try:
            if fault is not None:
                reply = self._fault_reply(fault)
            elif not (actor := self._actor()):
                reply = Reply(401, shapes.error("Bad credentials", 401))
            else:
                try:
                    body = json.loads(raw) if raw.strip() else None
                except ValueError:
                    raise ApiError(400, shapes.error("Problems parsing JSON", 400)) from None
                with srv.lock:
                    if path != "/rate_limit":
                        srv.rate_used += 1
                    srv.actor = actor
                    try:
                        reply = route(srv, method, path, query, body)
                    finally:
                        srv.actor = srv.login
        except ApiError as exc:
            reply = Reply(exc.status, exc.body, exc.headers)
        with srv.lock:
            srv.calls.append(Call(method, path, query, body, reply.status, reply.body, self._actor()))
        self._send(method, reply, truncate=truncate)

    def _actor(self) -> str:
        """The login the request's token acts as; "" for no or an unknown token."""
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            return ""
        given = given.strip()
        if given == self.srv.token:
            return self.srv.login
        if self.srv.token_expiry.get(given, float("inf")) <= time.time():
            return ""  # an installation token past its hour: 401 Bad credentials
        return self.srv.tokens.get(given, "")

    def _fault_reply(self, fault: Fault) -> Reply:
        if fault.kind == "secondary":
            headers = {"retry-after": str(int(fault.seconds))} if fault.seconds else {}
            message = ("You have exceeded a secondary rate limit. Please wait a few minutes before you try "
                       "again. If you reach out to GitHub Support for help, please include the request ID.")
            return Reply(403, shapes.error(message, 403), headers)
        if fault.kind == "primary":
            reset = int(time.time() + fault.seconds)
            headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset), "x-ratelimit-used": "5000"}
            message = "API rate limit exceeded for installation ID 1. If you reach out to GitHub Support ..."
            return Reply(fault.status, shapes.error(message, fault.status), headers)
        reason = "Server Error" if fault.status >= 500 else "Injected failure"
        return Reply(fault.status, shapes.error(reason, fault.status))

    def _reset(self) -> None:
        # SO_LINGER with a zero timeout makes close() send RST, as a dropped proxy does.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _send(self, method: str, reply: Reply, *, truncate: bool = False) -> None:
        data = b"" if reply.body is None else json.dumps(reply.body).encode()
        if truncate and len(data) < 2:
            data = b" " * 64 + data  # a body to cut (JSON allows the leading space)
        headers = {**self.srv.rate_headers(), **reply.headers}
        try:
            self.send_response(reply.status)
            if data:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            if method == "GET" and reply.status == 200:
                self.send_header("ETag", f'W/"{hashlib.sha1(data).hexdigest()}"')
            self.send_header("X-GitHub-Request-Id", f"TEST:{len(self.srv.calls)}")
            self.send_header("X-GitHub-Api-Version-Selected", "2022-11-28")
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if truncate:
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client gave up (its timeout); nothing to tell


def paginate(srv: GitHubServer, path: str, query: dict[str, str], items: list[Any]) -> Reply:
    """One page of `items` and a `Link` header as GitHub sends it."""
    try:
        per_page = max(1, min(100, int(query.get("per_page", 30))))
        page = max(1, int(query.get("page", 1)))
    except ValueError:
        raise ApiError(422, shapes.error("Invalid page or per_page", 422)) from None
    last = max(1, -(-len(items) // per_page))

    def link(number: int, rel: str) -> str:
        return f'<{srv.url}{path}?{urlencode({**query, "per_page": per_page, "page": number})}>; rel="{rel}"'

    links = []
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links += [link(1, "first"), link(page - 1, "prev")]
    headers = {"Link": ", ".join(links)} if links else {}
    return Reply(200, items[(page - 1) * per_page: page * per_page], headers)
