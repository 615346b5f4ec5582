"""The push token minted inside plan-runner from a GitHub App's id and private key (`app-id`, `app-private-key`),
against the test server's App endpoints (tests/servers/github_apps.py: the JWT's RS256 signature checked with the
App's public key, tokens that expire, 401 past their hour) and git over smart HTTP with the action's header.

* a session job mints one token (PyGithub's AppAuth JWT), pushes the work branch and state with it (the App's
  bot on every receive-pack), masks it, and its agent never sees it nor the key;
* a token close to its hour is minted again before the next push;
* a push token the remote refuses (a stored installation token past its hour) ends in a recorded session: the
  job's token pushes the work instead, and the summary says what, why and the fix;
* the App's mistakes (a wrong key, not installed, only one of the two inputs) are what/why/fix, never a trace.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from runner.adapters.github.app_token import REFRESH_MARGIN_S, AppToken, Minted, mint
from runner.core.errors import PlanRunnerError
from runner.drivers.actions.main import run_action
from tests.e2e_act import world as w
from tests.integration.test_action_modes import Jobs
from tests.servers.github import GitHubServer
from tests.servers.github_apps import add_app

pytestmark = pytest.mark.integration
APP_ID = 4242
BOT = "plan-runner-pusher[bot]"
# The agent writes what it can see of its environment into the work (a leak would park the plan, and shows here).
SEEING_SCRIPT = w.SCRIPT.split("  - id: s-limited")[0].replace(
    '      - commit: "greet says hello"\n',
    '      - run: "env | sort > seen-env.txt; cat /proc/[0-9]*/environ > seen-proc.txt 2>/dev/null; true"\n'
    '      - commit: "greet says hello"\n', 1)


def keypair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


PRIVATE, PUBLIC = keypair()


class HttpJobs(Jobs):
    """Jobs whose checkout's `origin` is the test server's smart-HTTP remote: every push and fetch carries the
    action's header with the push token, and the server takes only a token it knows that has not expired."""

    def __init__(self, root, srv: GitHubServer, **kw) -> None:
        super().__init__(root, srv, **kw)
        srv.git_bare = self.bare

    def run(self, event_name, event, **extra):
        self.n += 1
        ws = w.checkout(self.bare, self.root / f"job{self.n}")
        w.git(ws, "remote", "set-url", "origin", f"{self.srv.url}/octo-org/demo.git")
        env = {**w.job_env(self.srv, ws, self.root / "runner", event_name, event, self.n),
               "PLAN_RUNNER_MODE": "session", "GITHUB_SERVER_URL": self.srv.url, **extra}
        out = io.StringIO()
        rc = run_action(env, out=out)
        outputs = w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
        return rc, out.getvalue(), outputs, Path(env["GITHUB_STEP_SUMMARY"]).read_text(), env


def app_env(srv: GitHubServer) -> dict[str, str]:
    return {"GITHUB_SERVER_URL": srv.url, "PLAN_RUNNER_APP_ID": str(APP_ID), "PLAN_RUNNER_APP_PRIVATE_KEY": PRIVATE}


def w_bot() -> str:
    from tests.servers.github import BOT as JOB_BOT

    return JOB_BOT


def receive_packs(srv: GitHubServer) -> list[tuple[str, bool]]:
    return [(login, ok) for method, path, login, ok in srv.git_requests if method == "POST"
            and path.endswith("git-receive-pack")]


def test_a_session_pushes_with_a_token_minted_from_the_app_and_nobody_else_sees_it(tmp_path) -> None:
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        jobs = HttpJobs(tmp_path, srv, script=SEEING_SCRIPT)
        rc, out, outputs, summary, env = jobs.session(**app_env(srv))
        assert rc == 0 and outputs["outcome"] == "Advanced", out + summary
        assert len(app.minted) == 1
        token = app.minted[0]["token"]
        assert f"::add-mask::{token}" in out  # masked before it was used
        pushes = receive_packs(srv)
        assert pushes and all(p == (BOT, True) for p in pushes), srv.git_requests
        assert w.ref(jobs.bare, "plan-runner/greeter") is not None
        published = "\n".join(line for line in out.splitlines() if not line.startswith("::add-mask::"))
        published += summary + json.dumps(outputs)
        where = published.find(token)
        assert where < 0, published[max(0, where - 300):where + 100]
        assert "PRIVATE KEY" not in published
        seen = w.git(jobs.bare, "show", "plan-runner/greeter:seen-env.txt")
        assert token not in seen and "PRIVATE KEY" not in seen and "PLAN_RUNNER_APP" not in seen
        assert "PLAN_RUNNER_PUSH_TOKEN" not in seen and "GIT_CONFIG" not in seen
        # the room: no process the agent can see carries them either (plan-runner's own environment has the key)
        procs = w.git(jobs.bare, "show", "plan-runner/greeter:seen-proc.txt")
        assert "PATH=" in procs  # it read its own processes' environments
        assert token not in procs and "PRIVATE KEY" not in procs and "PLAN_RUNNER_APP" not in procs
        assert "plan-runner isolation: isolated" in out  # the agent ran in its room
        # the JWT's request and the token's, as GitHub documents them; the token only for this repository
        mints = [c for c in srv.calls if c.path.endswith("/access_tokens")]
        assert [c.status for c in mints] == [201] and mints[0].body["repositories"] == ["demo"]


def test_a_plan_cannot_hand_the_push_token_or_the_key_to_its_agent(tmp_path) -> None:
    from runner.adapters.sandbox.agentenv import build_agent_env

    parent = {"PLAN_RUNNER_PUSH_TOKEN": "ghs_x", "PLAN_RUNNER_APP_PRIVATE_KEY": PRIVATE, "PATH": "/usr/bin"}
    for name in ("PLAN_RUNNER_PUSH_TOKEN", "PLAN_RUNNER_APP_PRIVATE_KEY"):
        with pytest.raises(PlanRunnerError, match="asks to pass"):
            build_agent_env(parent, allow=[name])
    assert set(build_agent_env(parent, allow=["PLAN_RUNNER_*"])) == {"PATH"}


def test_a_token_close_to_its_hour_is_minted_again_before_the_next_push() -> None:
    with GitHubServer() as srv:
        add_app(srv, APP_ID, PUBLIC)
        now = [time.time()]
        seen: list[str] = []
        app = AppToken(srv.url, "octo-org/demo", str(APP_ID), PRIVATE, clock=lambda: now[0], on_secret=seen.append)
        first = app.token()
        assert app.token() == first and app.minted == 1  # an hour left: kept
        now[0] += 3600 - REFRESH_MARGIN_S + 1  # less than the margin left
        second = app.token()
        assert second != first and app.minted == 2 and seen == [first, second]
        # the server's clock: a token past its hour answers 401 on the API
        srv.token_expiry[first] = time.time() - 1
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"{srv.repo_api}", headers={"Authorization": f"token {first}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req)
        assert refused.value.code == 401
        refused.value.close()


def test_the_apps_mistakes_are_what_why_fix() -> None:
    other, _ = keypair()
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        with pytest.raises(PlanRunnerError) as wrong_key:
            mint(srv.url, "octo-org/demo", str(APP_ID), other)  # signed with a key that is not the App's
        assert "401" in wrong_key.value.why and "app-private-key" in wrong_key.value.fix
        app.installed = False
        with pytest.raises(PlanRunnerError) as missing:
            mint(srv.url, "octo-org/demo", str(APP_ID), PRIVATE)
        assert "not installed" in missing.value.why
        app.installed, app.permissions = True, {"contents": "read"}
        with pytest.raises(PlanRunnerError) as weak:
            mint(srv.url, "octo-org/demo", str(APP_ID), PRIVATE)
        assert "422" in weak.value.why and "Contents and Pull requests" in weak.value.fix
        assert isinstance(Minted("t", 0.0), Minted)


def test_only_one_of_the_apps_inputs_fails_the_job_with_the_fix(tmp_path) -> None:
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session(PLAN_RUNNER_APP_ID=str(APP_ID))
        assert rc != 0 and outputs["outcome"] == "error"
        assert "without `app-private-key`" in summary and "Traceback" not in summary + out


def test_a_refused_push_token_ends_recorded_with_the_work_pushed_by_the_jobs_token(tmp_path) -> None:
    """A stored installation token past its hour (the `push-token` input): the remote refuses it (401), the job's
    token pushes the session and its work instead, and the summary says what, why and the fix."""
    with GitHubServer() as srv:
        stale = "ghs_stored_an_hour_ago_0123456789"
        srv.tokens[stale] = BOT
        srv.token_expiry[stale] = time.time() - 60
        jobs = HttpJobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session(GITHUB_SERVER_URL=srv.url, PLAN_RUNNER_PUSH_TOKEN=stale)
        assert rc == 0 and outputs["outcome"] == "Advanced", out + summary
        assert [e["type"] for e in jobs.ledger()].count("session") == 1  # recorded
        assert w.ref(jobs.bare, "plan-runner/greeter") is not None  # the work kept
        assert (BOT, False) in [(login, ok) for _, _, login, ok in srv.git_requests], srv.git_requests
        assert receive_packs(srv) and all(p == (w_bot(), True) for p in receive_packs(srv))
        assert "the remote refused the `push-token`" in summary and "app-id" in summary
        assert "::warning title=plan-runner push token::" in out
        assert "Traceback" not in summary + out


def test_a_push_refused_with_every_token_is_a_clear_error_never_a_trace(tmp_path) -> None:
    """Neither the App's token (past its hour at the push, the App suspended since: no new one) nor the job's
    token (read-only on git: 403) may push: the job fails with what, why and fix, never a trace; the agent's
    commits stay in the checkout's local refs."""
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        jobs = HttpJobs(tmp_path, srv)
        srv.git_read_only.add(srv.login)  # the job's token: `contents: read`
        srv.app_token_ttl = -1.0  # expired as it is made (revoked at once)
        app.max_mints = 1  # suspended after the first: no new one
        rc, out, outputs, summary, _ = jobs.session(**app_env(srv), RUNNER_TEMP=str(tmp_path / "runner-temp"))
        assert rc != 0 and outputs["outcome"] == "error", out + summary
        assert "refused plan-runner's token" in summary and "app-id" in summary, summary
        assert "Traceback" not in summary + out
        # refused at the session's start, before its agent ran: no commit of its own to keep
        assert outputs["unpushed-artifact"] == "" and outputs["unpushed-file"] == "", outputs
        assert "gh run download" not in summary


class RevokeWhenTheAgentWorks(io.StringIO):
    """The job's log; the first line of the agent's tools revokes every token the App minted and suspends the App
    (GitHub mints no new one): the session's start went through, its final push will not."""

    def __init__(self, srv: GitHubServer, app) -> None:
        super().__init__()
        self.srv, self.app, self.tripped = srv, app, False

    def write(self, text: str) -> int:
        if not self.tripped and "plan-runner tool:" in text:
            self.tripped = True
            with self.srv.lock:
                for minted in self.app.minted:
                    self.srv.token_expiry[minted["token"]] = time.time() - 1
                self.app.suspended = True
        return super().write(text)


def test_commits_refused_with_every_token_are_kept_as_an_artifact_with_the_commands_to_push_them(tmp_path) -> None:
    """The session's start is pushed with the App's token; then, while the agent works, the token is revoked and
    the App suspended (no new token), and the job's token may only read: the final push is refused with every token.
    The job fails with what, why, fix; the work branch's commits the remote has not got are written as a git bundle
    for the action's upload step (`unpushed-file`, `unpushed-artifact`), and the fix names the artifact and the
    commands that fetch and push it, which, run as given, put the agent's commit on the session's ref."""
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        srv.git_read_only.add(srv.login)  # the job's token: `contents: read`
        jobs = HttpJobs(tmp_path, srv)
        jobs.n += 1
        ws = w.checkout(jobs.bare, tmp_path / f"job{jobs.n}")
        w.git(ws, "remote", "set-url", "origin", f"{srv.url}/octo-org/demo.git")
        env = {**w.job_env(srv, ws, tmp_path / "runner", "workflow_dispatch", w.dispatch_event("plans/greeter.md"),
                           jobs.n),
               "PLAN_RUNNER_MODE": "session", **app_env(srv), "RUNNER_TEMP": str(tmp_path / "runner-temp")}
        log = RevokeWhenTheAgentWorks(srv, app)
        rc = run_action(env, out=log)
        out = log.getvalue()
        outputs = w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
        summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
        assert log.tripped and rc != 0 and outputs["outcome"] == "error", out + summary
        assert "refused plan-runner's token" in summary and "Traceback" not in summary + out, summary
        assert any(ok for method, path, login, ok in srv.git_requests if path.endswith("git-receive-pack"))
        assert w.ref(jobs.bare, "plan-runner/greeter") is None  # nothing of the agent's reached the remote
        follow_the_unpushed_commands(tmp_path, jobs.bare, outputs, summary, out)


def follow_the_unpushed_commands(tmp_path: Path, bare: Path, outputs: dict, summary: str, out: str) -> None:
    """The refused commits are in a bundle the action uploads (`unpushed-file`, `unpushed-artifact`), and the
    job's error names the artifact and the commands that push them; run as given (the download is the file itself)
    in a fresh clone, they put the agent's commit on the session's ref."""
    name = outputs["unpushed-artifact"]
    assert name == "plan-runner-greeter-session-1-unpushed", outputs
    bundle = Path(outputs["unpushed-file"])
    assert bundle.name == f"{name}.bundle" and bundle.is_file()
    assert f"::the agent's commits are kept in the artifact {name}: the summary says how to push them" in out
    lines = [line.strip() for line in summary.splitlines()]
    assert f"gh run download 1 --repo octo-org/demo --name {name}" in lines, summary
    commands = [line.split() for line in lines if line.startswith(("git fetch", "git push"))]
    assert [c[:2] for c in commands] == [["git", "fetch"], ["git", "push"]], summary
    clone = w.checkout(bare, tmp_path / "maintainer")
    shutil.copy(bundle, clone / bundle.name)  # what `gh run download` leaves in the folder
    for command in commands:
        subprocess.run(command, cwd=clone, check=True, capture_output=True)
    assert commands[1][-1].endswith(":refs/plan-runner/sessions/greeter/1")
    assert "greet says hello" in w.git(bare, "log", "--format=%s", "refs/plan-runner/sessions/greeter/1")


def test_pygithubs_debug_log_never_shows_a_minted_token(caplog) -> None:
    """PyGithub's requester logs at DEBUG (the runner's debug logging passes those records to the job's log), and
    an answer holding the token would be logged before it could be masked: nothing of the mint is logged."""
    import logging

    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        with caplog.at_level(logging.DEBUG, logger="github"):
            minted = mint(srv.url, "octo-org/demo", str(APP_ID), PRIVATE)
        assert minted.token == app.minted[0]["token"]
        assert minted.token not in caplog.text and not logging.getLogger("github.Requester").disabled


def test_a_minted_token_refused_by_the_remote_is_minted_again_and_the_push_goes_through(tmp_path) -> None:
    """The App's first token is revoked as soon as it is made (the remote answers 401): plan-runner mints a new
    one and pushes with it; the session is recorded with the App's token, no fallback, no warning."""
    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        app.revoke_next = 1
        jobs = HttpJobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session(**app_env(srv))
        assert rc == 0 and outputs["outcome"] == "Advanced", out + summary
        assert len(app.minted) == 2
        seen = [(login, ok) for _, _, login, ok in srv.git_requests]
        assert seen[0] == (BOT, False) and all(ok for _, ok in seen[1:]), seen
        assert receive_packs(srv) and all(p == (BOT, True) for p in receive_packs(srv))
        assert "push token" not in summary and "::warning title=plan-runner push token" not in out
        assert f"::add-mask::{app.minted[1]['token']}" in out
