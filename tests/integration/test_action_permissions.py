"""The up-front check of the job token's permissions, read from the workflow file the job runs
(GITHUB_WORKFLOW_REF, GITHUB_JOB), as GitHub derives the token from it: a job whose `permissions:` lack what
plan-runner needs fails with what/why/fix before anything is installed, recorded or asked of GitHub.

The workflow is the one `plan-runner init` writes, with a permission removed; the jobs run the real action
code in-process against the GitHub test server and a bare remote.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from runner.drivers.actions.main import run_action
from runner.adapters.github.permissions import check_job_permissions, granted_by, job_block, missing, needed
from runner.core.errors import PlanRunnerError
from runner.adapters.init import write_init
from runner.adapters.source import Source
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration
PLAN = "plans/greeter.md"
WORKFLOW = ".github/workflows/plan-runner.yml"
CLOCK = ".github/workflows/plan-runner-clock.yml"  # the tick's own workflow
CLOCK_ENV = {"GITHUB_WORKFLOW_REF": f"octo-org/demo/{CLOCK}@refs/heads/main",
             "PLAN_RUNNER_SESSION_WORKFLOW": "plan-runner.yml"}


def init_workflow(tmp: Path, path: str = WORKFLOW) -> str:
    out = tmp / "init"
    out.mkdir(exist_ok=True)
    if not (out / WORKFLOW).exists():
        write_init(out, source=Source("octo-org/plan-runner", "a" * 40, "0.1.0", "test"))
    return (out / path).read_text()


class World:
    def __init__(self, root: Path, srv: GitHubServer, workflow: str, plan: str = w.PLAN,
                 path: str = WORKFLOW) -> None:
        self.root, self.srv, self.n = root, srv, 0
        self.bare = w.make_remote(root, {PLAN: plan, "plans/greeter.script.yaml": w.SCRIPT, path: workflow,
                                         ".gitignore": "__pycache__/\n"})
        srv.branches = w.BareBranches(self.bare)

    def job(self, job: str, event_name: str, event: dict, **extra: str) -> tuple[int, str, dict[str, str], str]:
        self.n += 1
        ws = w.checkout(self.bare, self.root / f"job{self.n}")
        mode = {"schedule": "tick", "issue_comment": "reply"}.get(event_name, "session")
        env = {**w.job_env(self.srv, ws, self.root / "runner", event_name, event, self.n),
               "PLAN_RUNNER_MODE": mode, "GITHUB_JOB": job, **extra}
        out = io.StringIO()
        rc = run_action(env, out=out)
        return rc, out.getvalue(), w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text()), \
            Path(env["GITHUB_STEP_SUMMARY"]).read_text()

    def recorded(self) -> str:
        """Every state and session ref on the remote: empty when nothing was recorded."""
        return w.git(self.bare, "for-each-ref", "refs/plan-runner", "refs/heads/plan-runner")


def without(workflow: str, line: str) -> str:
    assert line in workflow, line
    return workflow.replace(line, "", 1)


def test_a_session_job_without_actions_write_fails_before_anything_is_recorded(tmp_path) -> None:
    workflow = without(init_workflow(tmp_path), "      actions: write        # dispatch the next session of this workflow\n")
    with GitHubServer() as srv:
        world = World(tmp_path, srv, workflow)
        rc, out, outputs, summary = world.job("session", "workflow_dispatch", w.dispatch_event(PLAN))
        assert rc != 0 and outputs["outcome"] == "error"
        assert "the job `session` in .github/workflows/plan-runner.yml does not give its token `actions: write`" \
            in summary
        assert "why: jobs.session.permissions grants checks: write, contents: write, issues: write, pull-requests: write" in summary
        assert "fix:" in summary and "actions: write  # dispatch the next session" in summary
        assert "Traceback" not in out + summary
        assert world.recorded() == ""
        assert srv.calls == []  # GitHub was asked nothing


def test_the_workflow_init_writes_passes_and_the_session_runs(tmp_path) -> None:
    with GitHubServer() as srv:
        world = World(tmp_path, srv, init_workflow(tmp_path))
        rc, out, outputs, _ = world.job("session", "workflow_dispatch", w.dispatch_event(PLAN))
        assert rc == 0 and outputs["outcome"] == "Advanced", out[-2000:]
        assert "preflight" not in out


def test_a_tick_job_without_actions_write_fails_and_a_tick_with_it_passes(tmp_path) -> None:
    good = init_workflow(tmp_path, CLOCK)
    bad = without(good, "      actions: write        # read a session's run; dispatch the runs that are due; disable this clock when idle\n")
    with GitHubServer() as srv:
        world = World(tmp_path, srv, bad, path=CLOCK)
        rc, _, outputs, summary = world.job("tick", "schedule", w.schedule_event(), **CLOCK_ENV)
        assert rc != 0 and outputs["outcome"] == "error" and "`actions: write`" in summary
        lines = [line.strip() for line in summary.splitlines()]
        block = lines[lines.index("jobs:"):]
        assert block[:4] == [
            "jobs:", "tick:", "permissions:",
            "actions: write  # dispatch the next session of this workflow (POST .../actions/workflows/{id}/dispatches)"]
        assert srv.calls == []


def test_a_checks_gate_needs_checks_and_statuses_read(tmp_path) -> None:
    """The workflow `init` writes grants `checks: write` (the verdict's check run), which reads too: a `checks:` gate
    then lacks only `statuses: read`; without the `checks:` line it lacks both."""
    plan = w.PLAN.replace("gates:\n", "gates:\n  - name: ci\n    checks: [build]\n    timeout_minutes: 1m\n")
    with GitHubServer() as srv:
        world = World(tmp_path, srv, init_workflow(tmp_path), plan=plan)
        rc, _, outputs, summary = world.job("session", "workflow_dispatch", w.dispatch_event(PLAN))
        assert rc != 0 and "does not give its token `statuses: read`" in summary
        assert world.recorded() == ""
    (tmp_path / "again").mkdir()
    no_checks = without(init_workflow(tmp_path / "again"),
                        "      checks: write         # publish each session's verdict as the check run `plan-runner / <plan>`\n")
    with GitHubServer() as srv:
        world = World(tmp_path / "again", srv, no_checks, plan=plan)
        rc, _, outputs, summary = world.job("session", "workflow_dispatch", w.dispatch_event(PLAN))
        assert rc != 0 and "`checks: read`, `statuses: read`" in summary
        assert "read the check runs a `checks:` gate waits for" in summary
        assert world.recorded() == ""


def test_no_block_warns_and_a_users_own_token_is_not_checked(tmp_path) -> None:
    workflow = init_workflow(tmp_path).replace("permissions:", "x-permissions:")
    with GitHubServer() as srv:
        world = World(tmp_path, srv, workflow)
        rc, out, outputs, _ = world.job("session", "workflow_dispatch", w.dispatch_event(PLAN))
        assert rc == 0 and "sets no `permissions:` for the job `session`" in out
    bad = without(init_workflow(tmp_path / "b"), "      actions: write        # dispatch the next session of this workflow\n") \
        if (tmp_path / "b").mkdir() is None else ""
    with GitHubServer() as srv:
        world = World(tmp_path / "b", srv, bad)
        rc, out, outputs, _ = world.job("session", "workflow_dispatch", w.dispatch_event(PLAN),
                                        PLAN_RUNNER_TOKEN_IS_JOB_TOKEN="false")
        assert rc == 0 and outputs["outcome"] == "Advanced"


@pytest.mark.parametrize(("block", "lacking"), [
    ({}, {"contents", "issues", "pull-requests", "actions"}),
    ("read-all", {"contents", "issues", "pull-requests", "actions"}),
    ("write-all", set()),
    ({"contents": "write", "issues": "write", "pull-requests": "write", "actions": "read"}, {"actions"}),
])
def test_how_github_reads_a_block(block, lacking) -> None:
    granted = granted_by(block)
    assert granted is not None and set(missing(needed("session"), granted)) == lacking


def test_a_job_block_replaces_the_workflows() -> None:
    wf = {"permissions": "write-all", "jobs": {"session": {"permissions": {"contents": "read"}}, "tick": {}}}
    assert job_block(wf, "session") == ({"contents": "read"}, "jobs.session.permissions")
    assert job_block(wf, "tick") == ("write-all", "the workflow's top-level permissions")
    assert job_block({"jobs": {"tick": {}}}, "tick") is None


def test_a_block_github_would_not_accept_is_a_clear_error(tmp_path) -> None:
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / WORKFLOW).write_text("jobs:\n  session:\n    permissions:\n      actions: sometimes\n")
    env = {"GITHUB_JOB": "session", "GITHUB_WORKSPACE": str(tmp_path), "GITHUB_REPOSITORY": "o/r",
           "GITHUB_WORKFLOW_REF": f"o/r/{WORKFLOW}@refs/heads/main"}
    with pytest.raises(PlanRunnerError) as info:
        check_job_permissions(env, "session")
    assert "is not a permissions block GitHub accepts" in info.value.what and info.value.fix


def test_a_403_is_read_for_the_permission_github_asked_for(tmp_path) -> None:
    """Past the up-front check (a token of the user's own, a repository default), a 403 on any call becomes a
    fix naming the permission GitHub put in `X-Accepted-GitHub-Permissions`, over real HTTP from PyGithub."""
    from runner.core.errors import Refused
    from runner.adapters.github.events import GitHubContext
    from runner.adapters.github.client import GitHubDriver
    from runner.adapters.github.api import RetryPolicy

    with GitHubServer() as srv:
        srv.token_scopes = {"issues": "read", "contents": "write"}
        n = srv.add_issue("a park issue")
        ctx = GitHubContext.from_env({"GITHUB_API_URL": srv.url, "GITHUB_REPOSITORY": f"{srv.owner}/{srv.repo}",
                                      "GITHUB_WORKFLOW_REF": f"{srv.owner}/{srv.repo}/{WORKFLOW}@refs/heads/main",
                                      "GITHUB_REF_NAME": "main", "GITHUB_RUN_ID": "7"})
        with GitHubDriver(ctx, srv.token, retry=RetryPolicy.fast()) as driver, pytest.raises(Refused) as info:
            driver.comment(n, "hello")
        assert srv.calls[-1].status == 403
    err = info.value
    assert "issues=write (X-Accepted-GitHub-Permissions)" in err.why
    assert err.fix.startswith("GitHub says this call needs issues: write") and "    issues: write" in err.fix
