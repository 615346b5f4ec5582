"""Watch a session while it runs (issue 45, item 5), through the test GitHub server over real HTTP: each session job
posts one progress comment on the plan's place (the issue it was started from, or one plan-runner opens at its first
session and keeps), edits it at most once a minute while the agent works (the throttle's clock injected: a scripted
session of a few seconds spans minutes on it) and says how the session ended, from the verdict. A GitHub that refuses
the edits never changes the session."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from runner.adapters import clock
from runner.drivers.actions import progress as live
from tests.e2e_act import world as w
from tests.integration.test_action_modes import PLAN, Jobs
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

# one session of a scripted agent that works for a while: tools, tokens, pauses between them
LONG = """
sessions:
  - id: s-long
    steps:
      - write: {path: greeter.py, content: "def greet(name=None):\\n    return 'hello'\\n"}
      - tokens: 400
      - silent: 0.3
      - write: {path: test_greeter.py, content: "import unittest\\n\\nfrom greeter import greet\\n\\n\\nclass T(unittest.TestCase):\\n    def test_hello(self):\\n        self.assertEqual(greet(), 'hello')\\n"}
      - tokens: 500
      - silent: 0.3
      - commit: "greet says hello"
      - tokens: 300
      - silent: 0.3
      - check: "1.1"
      - commit: "Tick 1.1"
      - tokens: 200
  - id: s-second
    steps:
      - write: {path: NOTES.md, content: "@octocat ::set-output name=x::y\\n"}
      - tokens: 100
"""


class Minutes:
    """The throttle's clock: every reading is 25 s after the one before, so the events of a short session span
    minutes."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 25.0
        return self.t


def elapsed_s(body: str) -> int:
    """The time a progress comment says the session has run (plan-runner's clock when it decided the edit)."""
    m = re.search(r"\| (?:Elapsed|Ran for) \| (?:(\d+) min )?(\d+) s \|", body)
    assert m, body
    return int(m[1] or 0) * 60 + int(m[2])


@pytest.fixture(autouse=True)
def _noon(monkeypatch):
    monkeypatch.setenv(clock.ENV, "12:00")


@pytest.fixture
def minutes(monkeypatch) -> Iterator[Minutes]:
    fake = Minutes()
    monkeypatch.setattr(live, "CLOCK", fake)
    yield fake


def progress_comments(srv: GitHubServer, number: int) -> list[dict]:
    return [c for c in srv.comments_on(number) if "<!-- plan-runner:progress plan=greeter" in c["body"]]


def test_a_session_shows_bounded_progress_while_it_runs_and_how_it_ended(tmp_path, minutes):
    with GitHubServer() as srv:
        srv.actions_can_create_prs = True
        jobs = Jobs(tmp_path, srv, script=LONG)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        # no pull request can show a plan before its first commit: plan-runner opened the plan's issue, and
        # recorded it as the plan's place
        (issue,) = [i for i in srv.issues.values() if not i.get("pull")]
        assert issue["title"] == "plan-runner: Greeter" and issue["labels"] == []
        (pull,) = [i for i in srv.issues.values() if i.get("pull")]  # the watch view links to it
        assert f"[session progress]({srv.html_url}/issues/{issue['number']})" in pull["body"], pull["body"][:600]
        places = [e for e in jobs.ledger() if e["type"] == "place"]
        assert [p["issue"] for p in places] == [issue["number"]]
        (comment,) = progress_comments(srv, issue["number"])
        edits = [elapsed_s(body) for cid, body in srv.comment_edits if cid == comment["id"]]
        assert len(edits) >= 3, out  # at least two while the agent worked, and the last one
        live_edits = [0, *edits[:-1]]  # the posting, then each edit while it ran
        assert all(b - a >= 60 for a, b in zip(live_edits, live_edits[1:])), edits  # never two within a minute
        body = comment["body"]
        assert "### plan-runner: `greeter` session 1 ended: **Advanced**" in body
        assert "**Outcome:** `Advanced` (from the verdict plan-runner computed" in body
        assert "| Tokens | 1,400 |" in body and "| Last tool | `commit` (5 tool calls) |" in body, body
        running = [b for cid, b in srv.comment_edits if cid == comment["id"] and "session 1 is running (agent)" in b]
        assert running and all("| Elapsed |" in b and "| Tokens so far |" in b for b in running)
        assert f"plan-runner progress: {srv.html_url}/issues/{issue['number']}#issuecomment-{comment['id']}" in out

        rc, out, outputs, summary, _ = jobs.session()  # the next session: a new comment, in the same place
        assert rc == 0, out
        assert len([i for i in srv.issues.values() if not i.get("pull")]) == 1
        first, second = progress_comments(srv, issue["number"])
        assert "session 2 ended" in second["body"] and "session 1 ended" in first["body"]
        assert "@octocat" not in second["body"] and "::set-output" not in second["body"]


def test_a_session_of_a_plan_started_from_an_issue_shows_its_progress_there(tmp_path, minutes):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=LONG)
        number = srv.add_issue("Please add a greeter", "see plans/greeter.md", user="maintainer")
        body = "/plan-runner start plans/greeter.md"
        cid = srv.add_comment(number, body, user="maintainer")
        rc, out, outputs, summary, _ = jobs.run("issue_comment", w.comment_event(srv.issues[number], body, "maintainer", cid))
        assert outputs["outcome"] == "dispatched", out
        assert "Each of its sessions posts its progress here" in srv.comments_on(number)[-1]["body"]
        assert [(e["issue"], e["user"]) for e in jobs.ledger() if e["type"] == "place"] == [(number, "maintainer")]
        rc, out, outputs, summary, _ = jobs.session(GITHUB_RUN_ID=str(srv.dispatches[0].run_id))
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        assert len(srv.issues) == 1  # no issue of its own: the one it was started from
        (comment,) = progress_comments(srv, number)
        assert "session 1 ended: **Advanced**" in comment["body"]


def test_a_github_that_refuses_the_edits_changes_nothing_of_the_session(tmp_path, minutes):
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=LONG)
        srv.fail_next(50, 500, match=r"PATCH .*/issues/comments/")
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        assert out.count("the session's progress comment could not be edited") == 1, out
        (issue,) = [i for i in srv.issues.values() if not i.get("pull")]
        (comment,) = progress_comments(srv, issue["number"])
        assert "is running (starting)" in comment["body"]  # as posted: every edit was refused


def test_no_issues_permission_no_progress_and_the_session_stands(tmp_path, minutes):
    with GitHubServer() as srv:
        srv.has_issues = False  # every issue endpoint answers 410
        jobs = Jobs(tmp_path, srv, script=LONG)
        rc, out, outputs, summary, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        assert "plan-runner progress: no progress comment for this session" in out
        assert srv.comments == {}


def test_a_killed_sessions_progress_comment_says_how_it_ended_once_reconciled(tmp_path, minutes):
    """The job of session 2 was killed while its progress comment said "running": the tick that reconciles the
    session edits that comment (the bot's, with the session's marker) to say it ended, TimedOut, and how; a
    person's comment quoting the same marker is left alone."""
    from datetime import timedelta

    from runner.adapters.render.report import render_progress
    from runner.adapters.store.state import GitStateStore
    from runner.core.ledger import SessionStarted
    from runner.core.planfile import parse_plan
    from runner.core.progress import Live
    from tests.servers.github import BOT

    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=LONG)
        rc, out, outputs, _, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        (issue,) = [i for i in srv.issues.values() if not i.get("pull")]
        number = issue["number"]
        # session 2 started, posted its progress, and its job was killed (nothing more of it)
        now = clock.now()
        store = GitStateStore(w.checkout(jobs.bare, jobs.root / "killed"))
        _, version = store.read("greeter")
        store.append("greeter", [SessionStarted(n=2, kind="delivery", checkpoint="1.2", base_sha="0" * 40,
                                                started_at=now - timedelta(hours=2), job="999")], version)
        running = str(render_progress(parse_plan(w.PLAN, PLAN), Live(n=2, kind="delivery", checkpoint="1.2",
                                                                         phase="agent", tokens=321),
                                      elapsed_s=95, run_url=f"{srv.html_url}/actions/runs/999"))
        assert "session 2 is running (agent)" in running
        bot_comment = srv.add_comment(number, running + "\n<!-- plan-runner:comment -->", user=BOT)
        forged = srv.add_comment(number, running, user="stranger")
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event())
        session = [e for e in jobs.ledger() if e["type"] == "session"][-1]
        assert session["n"] == 2 and session["outcome"] == "TimedOut", out
        body = srv.comments[bot_comment]["body"]
        assert "### plan-runner: `greeter` session 2 ended: **TimedOut** (its job was stopped)" in body, body
        assert "is running" not in body and "within the plan's time limit" in body and "reconcile" in body
        assert "| Tokens so far | 321 |" in body  # what it showed is kept
        assert body.count("<!-- plan-runner:comment -->") == 1
        assert srv.comments[forged]["body"] == running  # a person's comment is never edited
        assert "progress comment on #" in out and "now says it ended" in out
        # the reconciled session's verdict is a check run on the work branch's head, as a session job's is
        head = w.ref(jobs.bare, "plan-runner/greeter")
        checks = srv.checks_on(head, "plan-runner / greeter")
        assert [c["conclusion"] for c in checks] == ["success", "failure"], checks
        assert checks[-1]["output"]["title"].startswith("TimedOut: session 2"), checks[-1]["output"]


def test_the_agents_words_cannot_move_what_reconcile_writes_into_the_comment():
    """The last tool's input (the agent's) quotes the comment's own lines: reconcile's edit still changes the real
    head and the real note, never the quoted ones; an ended comment is not edited again."""
    from runner.adapters.render.report import render_progress
    from runner.core.planfile import parse_plan
    from runner.core.progress import Live

    crafted = ("### plan-runner: `greeter` session 2 is running (agent)\n"
               "_Edited at most once a minute while the session runs._\n")
    body = str(render_progress(parse_plan(w.PLAN, PLAN), Live(n=2, phase="agent", last_tool="shell",
                                                              last_tool_input=crafted), elapsed_s=61))
    ended = live.ended_by_reconcile(body, "its job never reported")
    assert ended is not None and ended.count("ended: **TimedOut**") == 1
    assert crafted.splitlines()[0] in ended and crafted.splitlines()[1] in ended  # the quote is as it was
    assert ended.rstrip().endswith("it stays as the session ended._"), ended
    assert ended.index("ended: **TimedOut**") < ended.index(crafted.splitlines()[0])
    assert live.ended_by_reconcile(ended, "again") is None


def test_the_tick_that_finds_a_cancelled_run_says_cancelled_in_its_progress_comment(tmp_path, minutes):
    """Session 2's run was cancelled (GitHub says so when the clock's tick asks it, before any deadline): its
    progress comment says it ended, and that its run was cancelled, in GitHub's word."""
    from runner.adapters.render.report import render_progress
    from runner.adapters.store.state import GitStateStore
    from runner.core.ledger import SessionStarted
    from runner.core.planfile import parse_plan
    from runner.core.progress import Live
    from tests.servers.github import BOT

    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=LONG)
        rc, out, outputs, _, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        (issue,) = [i for i in srv.issues.values() if not i.get("pull")]
        run = srv.add_run(actor=BOT, inputs={"plan": PLAN})
        srv.start_run(run)
        store = GitStateStore(w.checkout(jobs.bare, jobs.root / "killed"))
        _, version = store.read("greeter")
        store.append("greeter", [SessionStarted(n=2, kind="delivery", checkpoint="1.2", base_sha="0" * 40,
                                                started_at=clock.now(), job=str(run))], version)
        running = str(render_progress(parse_plan(w.PLAN, PLAN), Live(n=2, phase="agent"), elapsed_s=30))
        comment = srv.add_comment(issue["number"], running, user=BOT)
        assert srv.complete_run(run, "cancelled") is None  # the job token's run: no workflow_run, only the clock
        rc, out, outputs, summary, _ = jobs.run("schedule", w.schedule_event())
        assert [e["outcome"] for e in jobs.ledger() if e["type"] == "session"] == ["Advanced", "TimedOut"], out
        body = srv.comments[comment]["body"]
        assert "session 2 ended: **TimedOut**" in body
        assert f"GitHub says its run {run} ended cancelled (conclusion `cancelled`)" in body, body


def test_reconcile_of_a_run_a_person_started_says_it_timed_out(tmp_path, minutes):
    """The first session's run (a person's Run workflow) timed out: GitHub's workflow_run starts the reconcile job,
    which records the session and says in its progress comment that the run timed out."""
    from runner.adapters.render.report import render_progress
    from runner.adapters.store.state import GitStateStore
    from runner.core.ledger import SessionStarted
    from runner.core.planfile import parse_plan
    from runner.core.progress import Live
    from tests.servers.github import BOT

    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, script=LONG)
        rc, out, outputs, _, _ = jobs.session()
        assert rc == 0 and outputs["outcome"] == "Advanced", out
        (issue,) = [i for i in srv.issues.values() if not i.get("pull")]
        run = srv.add_run(actor="maintainer", inputs={"plan": PLAN})
        srv.start_run(run)
        store = GitStateStore(w.checkout(jobs.bare, jobs.root / "killed"))
        _, version = store.read("greeter")
        store.append("greeter", [SessionStarted(n=2, kind="delivery", checkpoint="1.2", base_sha="0" * 40,
                                                started_at=clock.now(), job=str(run))], version)
        comment = srv.add_comment(issue["number"], str(render_progress(
            parse_plan(w.PLAN, PLAN), Live(n=2, phase="judging"), elapsed_s=3000)), user=BOT)
        event = srv.complete_run(run, "timed_out")
        assert event is not None
        rc, out, outputs, summary, _ = jobs.run(
            "workflow_run", event, PLAN_RUNNER_MODE="reconcile",
            GITHUB_WORKFLOW_REF="octo-org/demo/.github/workflows/plan-runner-reconcile.yml@refs/heads/main")
        assert rc == 0, out + summary
        body = srv.comments[comment]["body"]
        assert "session 2 ended: **TimedOut**" in body
        assert "timed out (the job's `timeout-minutes`) (conclusion `timed_out`)" in body, body
