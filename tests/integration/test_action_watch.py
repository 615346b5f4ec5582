"""One place to watch a plan on GitHub: its pull request, a draft from the first credited work, rewritten in
place after every session job, closed with a link when the plan parks, reopened when it resumes, ready for
review at the finish (GraphQL markPullRequestReadyForReview: REST has no way out of draft). End to end through
`run_action` against the test GitHub server, PyGithub over real HTTP."""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.integration.test_action_modes import Jobs

pytestmark = pytest.mark.integration
HOSTILE = "HUMAN: <img src=x onerror=alert(1)> ping @octo-org/admins, see [docs](https://evil.example/x) | col"
SCRIPT = w.SCRIPT.replace("reset_in: 2,", "reset_in: 1,").replace(
    "HUMAN: should the README be in English or French?", HOSTILE)


def finish_posts(srv: GitHubServer) -> int:
    """Requests to open the finish's pull request (not a draft: the watch view's are drafts)."""
    return sum(1 for c in srv.calls if c.method == "POST" and c.path.endswith("/pulls")
               and not (isinstance(c.body, dict) and c.body.get("draft")))


def _pulls(srv: GitHubServer) -> list[dict]:
    return [i for i in srv.issues.values() if i.get("pull")]


def test_the_plans_pull_request_is_the_one_place_to_watch_it(tmp_path) -> None:
    with GitHubServer() as srv:
        srv.actions_can_create_prs = True  # the repository setting docs/github-actions.md asks for
        jobs = Jobs(tmp_path, srv, script=SCRIPT)

        rc, out, outputs, summary, _ = jobs.session()  # 1.1 credited: the draft opens
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        (pull,) = _pulls(srv)
        assert pull["pull"]["draft"] is True and pull["state"] == "open"
        assert pull["pull"]["head"] == "plan-runner/greeter" and pull["pull"]["base"] == "main"
        body = pull["body"]
        assert "<!-- plan-runner:watch plan=greeter -->" in body
        assert "| ✅ | `1.1`" in body and "| ⬜ | `1.2`" in body
        assert re.search(r"\| 1 \| delivery \| `1\.1` \| \*\*Advanced\*\* \(1\\\.1 done\) \| none \| 1,200 \|", body)
        assert "[run 1](https://github.example.invalid/octo-org/demo/actions/runs/1)" in body
        assert "`plan-runner logs plans/greeter.md 1`" in body
        assert "**Status:** running" in body and "**Next:** run a delivery session on 1\\.2" in body
        assert f"Watch the plan in its pull request: {srv.html_url}/pull/{pull['number']}" in summary

        rc, _, outputs, _, _ = jobs.session()  # rate limited: the same pull request, rewritten
        assert outputs["outcome"] == "LimitBackoff"
        assert _pulls(srv) == [pull] and "**LimitBackoff**" in pull["body"] and pull["pull"]["draft"] is True
        time.sleep(1.5)
        rc, _, outputs, _, _ = jobs.session()
        assert outputs["outcome"] == "Advanced" and "| ✅ | `1.2`" in pull["body"]

        rc, _, outputs, _, _ = jobs.session()  # the agent asks a human: the plan parks, the view closes
        assert outputs["outcome"] == "NeedsHuman"
        (issue,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
        assert pull["state"] == "closed" and outputs["issue-url"] in pull["body"]
        assert f"[park issue]({outputs['issue-url']})" in pull["body"]
        # published text: the agent's words are shown, never as markup, a mention or a link
        prose = re.sub(r"(?ms)^(`{3,})text\n.*?^\1$", "", pull["body"])  # fences show text as is
        assert "\\<img src" in prose and not re.search(r"(?<!\\)<img", prose)
        assert "@octo-org/admins" not in pull["body"]  # no mention anywhere, fenced or not
        assert "[docs](https://evil.example" not in prose

        cid = srv.add_comment(issue["number"], "/plan-runner resume\nEnglish.", user="maintainer")
        rc, _, outputs, _, _ = jobs.run("issue_comment", w.comment_event(issue, "/plan-runner resume\nEnglish.",
                                                                         "maintainer", cid))
        assert outputs["outcome"] == "accepted"
        rc, out, outputs, summary, _ = jobs.session()  # 2.1: the plan is finished
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        assert outputs["pull-request-url"] == f"{srv.html_url}/pull/{pull['number']}"
        assert _pulls(srv) == [pull] and pull["state"] == "open" and pull["pull"]["draft"] is False
        assert srv.ready_for_review == [pull["number"]]
        assert "finished: ready for review" in pull["body"] and "| ✅ | `2.1`" in pull["body"]
        assert len(re.findall(r"^\| \d+ \| delivery", pull["body"], re.M)) == 5

        body = pull["body"]
        calls = len(srv.calls)
        rc, _, outputs, _, _ = jobs.session()  # dispatched again by mistake: nothing recorded, nothing asked
        assert outputs["outcome"] == "finished" and pull["body"] == body
        assert not [c for c in srv.calls[calls:] if "/pulls" in c.path or c.path == "/graphql"]

        # in place, never spammed: one pull request created, no comment on it, at most two writes per job
        assert srv.count("POST", r"/repos/octo-org/demo/pulls") == 1
        assert srv.comments_on(pull["number"]) == []
        writes = srv.count("PATCH", r"/repos/octo-org/demo/pulls/\d+") + srv.count("POST", "/graphql")
        assert writes <= 2 * 5


def test_no_pull_request_before_any_credited_work(tmp_path) -> None:
    """A first session that credits nothing (the gate is red) opens nothing; its one list looks for the pull
    request of a run before a reset (none here); the next job of the run lists nothing."""
    script = "sessions:\n  - - write: {path: a.txt, content: x}\n    - commit: add a\n"
    plan = w.PLAN.replace("run: python3 -m unittest -q", "run: exit 1")
    with GitHubServer() as srv:
        srv.actions_can_create_prs = True
        jobs = Jobs(tmp_path, srv, script=script, plan=plan)
        rc, _, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "GatesRed"
        assert _pulls(srv) == [] and srv.count("GET", r"/repos/octo-org/demo/pulls") == 1
        assert "| 1 | delivery |" in summary and "**GatesRed**" in summary  # the job summary's timeline
        jobs.session()
        assert _pulls(srv) == [] and srv.count("GET", r"/repos/octo-org/demo/pulls") == 1


def test_a_refused_pull_request_warns_and_the_outcome_stands(tmp_path) -> None:
    """GitHub's default (Actions may not open pull requests): the session's verdict is untouched, the summary
    says what to change, nothing is retried within the job."""
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced"
        assert _pulls(srv) == [] and srv.count("POST", r"/repos/octo-org/demo/pulls") == 1
        assert "The plan's pull request was not updated" in summary
        assert "Allow GitHub Actions to create and approve pull requests" in summary
        assert "::warning title=plan-runner watch::" in out
        assert len(srv.dispatches) == 1  # the next session was dispatched all the same


def test_a_reset_closes_the_plans_pull_request_with_a_link_to_its_backup(tmp_path) -> None:
    """`plan-runner reset` in a clone (no GitHub token: it pushes the backup refs and deletes the plan's refs on
    the remote); the first job of the new run closes the old run's pull request, heads it and comments once with
    the backup ref that holds its work and the commit; the new run's own draft names the old one."""
    from tests.integration.test_own_workspace import cli
    from tests.reliability_world import git

    with GitHubServer() as srv:
        srv.actions_can_create_prs = True
        jobs = Jobs(tmp_path, srv, script=SCRIPT)
        assert jobs.session()[2]["outcome"] == "Advanced"
        (old,) = _pulls(srv)
        old_head = w.ref(jobs.bare, "plan-runner/greeter")
        clone = w.checkout(jobs.bare, tmp_path / "mine")
        proc = cli(clone, "reset", "plans/greeter.md")
        assert proc.returncode == 0 and "closed with a link to" in proc.stderr, proc.stderr
        (prefix,) = {r.rsplit("/", 1)[0] for r in git(jobs.bare, "for-each-ref", "--format=%(refname)",
                                                        "refs/plan-runner/backup/greeter/").splitlines()}
        assert old["state"] == "open"  # reset asked GitHub nothing

        rc, out, outputs, summary, _ = jobs.session()  # the new run: session 1 again, credited
        assert outputs["outcome"] == "Advanced", out
        assert [e["n"] for e in jobs.ledger() if e["type"] == "started"] == [1]
        assert old["state"] == "closed" and old["body"].startswith("<!-- plan-runner:closed-at-reset -->")
        (comment,) = srv.comments_on(old["number"])
        for text in (old["body"], comment["body"]):
            assert f"`{prefix}/branch`" in text and f"`{prefix}/state`" in text
            assert f"(https://github.example.invalid/octo-org/demo/commit/{old_head})" in text, text
            assert f"`git fetch origin {prefix}/branch:refs/heads/plan-runner/greeter-before-reset`" in text
        (new,) = [p for p in _pulls(srv) if p["state"] == "open"]
        assert new["pull"]["draft"] is True and f"#{old['number']} (closed)" in new["body"]
        assert f"Watch the plan in its pull request: {srv.html_url}/pull/{new['number']}" in summary

        jobs.session()  # the run goes on: the old pull request is never written to again
        assert len(srv.comments_on(old["number"])) == 1 and old["state"] == "closed"
        assert srv.count("POST", rf"/repos/octo-org/demo/issues/{old['number']}/comments") == 1  # (the others:
        # each session's progress comment, on the plan's issue)
