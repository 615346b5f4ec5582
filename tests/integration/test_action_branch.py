"""A plan started on a branch other than the default one stays there (issue 45, item 6): every job of it after the
first dispatches its next session on the branch its sessions ran on (the `ref` of its `started` entries), whether
that job is a session, the clock's tick (which runs on the default branch) or a reply on the park issue (which runs
there too). Through the test GitHub server, which refuses a dispatch on a branch it does not have."""

from __future__ import annotations

import subprocess

import pytest

from runner.adapters import clock
from tests.e2e_act import world as w
from tests.integration.test_action_modes import Jobs
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration


def test_a_plan_started_on_a_branch_is_dispatched_there_by_every_later_job(tmp_path, monkeypatch):
    monkeypatch.setenv(clock.ENV, "12:00")
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=w.SCRIPT.replace("reset_in: 2,", "reset_in: 600,"))
        subprocess.run(["git", "branch", "feature", "main"], cwd=jobs.bare, check=True)
        on_feature = {"GITHUB_REF_NAME": "feature"}
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # Run workflow on `feature`: 1.1
        assert outputs["outcome"] == "Advanced", out
        assert [e["ref"] for e in jobs.ledger() if e["type"] == "started"] == ["feature"]
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # the dispatched run: a rate limit, a wait
        assert outputs["outcome"] == "LimitBackoff", out
        monkeypatch.setenv(clock.ENV, "12:15")
        rc, out, outputs, _, _ = jobs.run("schedule", w.schedule_event())  # the tick, on `main`, past the reset
        assert rc == 0 and len(srv.dispatches) == 2, out
        jobs.session(**on_feature)  # 1.2
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # the agent asks a human
        assert outputs["outcome"] == "NeedsHuman", out
        (issue,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
        cid = srv.add_comment(issue["number"], "/plan-runner resume\nEnglish.", user="maintainer")
        rc, out, outputs, _, _ = jobs.run("issue_comment", w.comment_event(issue, "/plan-runner resume\nEnglish.",
                                                                           "maintainer", cid))  # on `main`
        assert outputs["outcome"] == "accepted", out
        # the session's own dispatches, the tick's and the reply's: all on the plan's branch
        assert [d.ref for d in srv.dispatches] == ["feature"] * len(srv.dispatches) and len(srv.dispatches) == 4
        assert {srv.runs[d.run_id]["ref"] for d in srv.dispatches} == {"feature"}


def test_a_plan_run_on_the_default_branch_is_dispatched_there(tmp_path, monkeypatch):
    monkeypatch.setenv(clock.ENV, "12:00")
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, _, _ = jobs.session()
        assert outputs["outcome"] == "Advanced", out
        assert [d.ref for d in srv.dispatches] == ["main"]
        assert [e["ref"] for e in jobs.ledger() if e["type"] == "started"] == ["main"]


class BranchJobs(Jobs):
    """Jobs whose checkout is the branch the job runs on (GITHUB_REF_NAME), as actions/checkout gives it."""

    def run(self, event_name, event, **extra):
        import io
        from pathlib import Path

        from runner.drivers.actions.main import run_action

        self.n += 1
        branch = extra.get("GITHUB_REF_NAME", "main")
        ws = self.root / f"job{self.n}"
        w.git(self.bare.parent, "clone", "-q", "--branch", branch, str(self.bare), str(ws))
        mode = {"schedule": "tick", "issue_comment": "reply"}.get(event_name, "session")
        env = {**w.job_env(self.srv, ws, self.root / "runner", event_name, event, self.n), "PLAN_RUNNER_MODE": mode,
               **extra}
        out = io.StringIO()
        rc = run_action(env, out=out)
        print(out.getvalue(), end="")  # the job's log (an error's why included), shown by pytest if the test fails
        outputs = w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
        return rc, out.getvalue(), outputs, Path(env["GITHUB_STEP_SUMMARY"]).read_text(), env


def test_a_plan_that_exists_only_on_its_branch_is_ticked_and_answered(tmp_path, monkeypatch):
    """The plan file is on `feature` only (the default branch never had it): the tick and the reply, which run on
    the default branch, read it from the branch its sessions run on, so its wait is woken and its park answered."""
    monkeypatch.setenv(clock.ENV, "12:00")
    with GitHubServer() as srv:
        jobs = BranchJobs(tmp_path, srv, script=w.SCRIPT.replace("reset_in: 2,", "reset_in: 600,"),
                          plan=w.PLAN.replace("base: main", "base: feature"))  # its work starts on its branch
        subprocess.run(["git", "branch", "feature", "main"], cwd=jobs.bare, check=True)
        seed = w.checkout(jobs.bare, tmp_path / "seed-main")
        w.git(seed, "rm", "-q", "plans/greeter.md", "plans/greeter.script.yaml")
        w.git(seed, "commit", "-q", "-m", "the plan lives on its branch")
        w.git(seed, "push", "-q", "origin", "HEAD:main")
        on_feature = {"GITHUB_REF_NAME": "feature"}
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # 1.1
        assert outputs["outcome"] == "Advanced", out
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # a rate limit: the plan waits for the tick
        assert outputs["outcome"] == "LimitBackoff", out
        monkeypatch.setenv(clock.ENV, "12:15")
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event())  # on `main`: no plan file there
        assert rc == 0 and outputs["outcome"] == "dispatched" and len(srv.dispatches) == 2, out + summary
        assert "| `greeter` |" in summary
        jobs.session(**on_feature)  # 1.2
        rc, out, outputs, _, _ = jobs.session(**on_feature)  # the agent asks a human
        assert outputs["outcome"] == "NeedsHuman", out
        (issue,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
        cid = srv.add_comment(issue["number"], "/plan-runner resume\nEnglish.", user="maintainer")
        rc, out, outputs, summary, _ = jobs.run("issue_comment", w.comment_event(
            issue, "/plan-runner resume\nEnglish.", "maintainer", cid))  # on `main`
        assert outputs["outcome"] == "accepted", out + summary
        assert "`resume` accepted for plan `greeter`" in srv.comments_on(issue["number"])[-1]["body"]
        assert [d.ref for d in srv.dispatches] == ["feature"] * 4
        assert [e["command"] for e in jobs.ledger() if e["type"] == "reply"] == ["resume"]


def test_a_plan_with_state_and_no_file_anywhere_is_left_alone_by_the_tick(tmp_path, monkeypatch):
    """State for a plan whose file is on no branch (deleted): the tick skips it without an error, as before."""
    monkeypatch.setenv(clock.ENV, "12:00")
    with GitHubServer() as srv:
        jobs = BranchJobs(tmp_path, srv)
        rc, out, outputs, _, _ = jobs.session()
        assert outputs["outcome"] == "Advanced", out
        seed = w.checkout(jobs.bare, tmp_path / "seed-main")
        w.git(seed, "rm", "-q", "plans/greeter.md")
        w.git(seed, "commit", "-q", "-m", "plan deleted")
        w.git(seed, "push", "-q", "origin", "HEAD:main")
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event())
        assert rc == 0 and "greeter" not in summary, out + summary
