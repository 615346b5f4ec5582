"""Failing services: GitHub and the Messages API answer 5xx, 429, secondary limits, resets, slowly or cut off.
Retries are bounded and honour the headers; a service that stays down ends the job with a clear message,
the state intact and the plan resumable; nothing is done twice."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from runner.core.errors import ServiceUnavailable
from runner.adapters.github.events import GitHubContext
from runner.adapters.github.client import GitHubDriver
from runner.adapters.github.api import RetryPolicy
from tests.reliability_world import (
    GH_SCRIPT,
    PARK_SCRIPT,
    GitHubJobs,
    fold_ledger,
    ledger,
    make_repo,
    result_json,
    run_session,
)
from tests.servers import messages as m
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

DISPATCH = r"POST .*/dispatches$"
NEW_ISSUE = r"POST /repos/[^/]+/[^/]+/issues$"


def _driver(srv: GitHubServer, **policy) -> GitHubDriver:
    env = {"GITHUB_API_URL": srv.url, "GITHUB_REPOSITORY": f"{srv.owner}/{srv.repo}", "GITHUB_REF_NAME": "main",
           "GITHUB_WORKFLOW_REF": "octo-org/demo/.github/workflows/plan-runner.yml@refs/heads/main"}
    return GitHubDriver(GitHubContext.from_env(env), srv.token, retry=RetryPolicy.fast(**policy))


# --- GitHub: a POST must never be done twice ------------------------------------------------------------------


@pytest.mark.parametrize("what", ["dispatch", "park issue"])
def test_a_post_answered_too_slowly_is_not_repeated(what):
    """A dispatch or a new issue whose answer times out may have happened: it is not retried (no second run,
    no second issue); the call fails as ServiceUnavailable instead."""
    with GitHubServer() as srv, _driver(srv, timeout=1) as driver:
        srv.delay_next(1, seconds=1.6, match=DISPATCH if what == "dispatch" else NEW_ISSUE)
        with pytest.raises(ServiceUnavailable, match="unavailable"):
            if what == "dispatch":
                driver.dispatch_next("plans/calc.md", "calc#2")
            else:
                driver.open_park("calc", "plan-runner: calc needs a human", "report")
        time.sleep(1.0)  # the slow request completes on the server meanwhile
        assert len(srv.dispatches) + len(srv.issues) == 1
        if what == "park issue":  # the next job finds the issue the slow call created, and reuses it
            url = driver.open_park("calc", "plan-runner: calc needs a human", "report 2")
            assert len(srv.issues) == 1 and url.endswith("/issues/1")


def test_gets_are_retried_after_a_reset_and_a_timeout():
    """Reads are safe to repeat: a reset connection and a slow answer are retried and succeed."""
    with GitHubServer() as srv, _driver(srv, timeout=1) as driver:
        srv.reset_next(1, match=r"GET .*/permission$")
        srv.delay_next(1, seconds=1.6, match=r"GET .*/permission$")
        assert driver.permission(srv.owner) == "admin"
        time.sleep(1.0)  # the abandoned slow request is recorded when the server finishes it
        assert srv.count("GET", r".*/permission") == 3


def test_a_post_whose_answer_is_cut_off_is_not_repeated():
    """The server opened the park issue, but its answer arrives cut short: the POST is not sent again (the
    call fails as ServiceUnavailable), and the next job finds the issue by its marker: exactly one. (A
    dispatch answers 204, with no body to cut.)"""
    with GitHubServer() as srv, _driver(srv) as driver:
        srv.truncate_next(1, match=NEW_ISSUE)
        with pytest.raises(ServiceUnavailable):
            driver.open_park("calc", "plan-runner: calc needs a human", "report")
        url = driver.open_park("calc", "plan-runner: calc needs a human", "report 2")  # the next job
        assert len(srv.issues) == 1 and url.endswith("/issues/1") and srv.count("POST", r".*/issues$") == 1


def test_gets_whose_answer_is_cut_off_are_retried_then_given_up_clearly():
    """A read cut off mid-body is repeated and succeeds; one cut off every time ends as ServiceUnavailable after
    the retry budget (RetryPolicy.fast: 3 retries), never a hang or a traceback."""
    with GitHubServer() as srv, _driver(srv) as driver:
        srv.truncate_next(2, match=r"GET .*/permission$")
        assert driver.permission(srv.owner) == "admin"
        assert srv.count("GET", r".*/permission") == 3
        srv.truncate_next(10, match=r"GET .*/permission$")
        with pytest.raises(ServiceUnavailable, match="unavailable"):
            driver.permission(srv.owner)
        assert srv.count("GET", r".*/permission") == 3 + 4


def test_a_dispatch_answered_502_is_not_sent_again():
    """A 502 on the dispatch may hide a dispatch GitHub made: it fails as ServiceUnavailable after one POST; the
    ledger's intent and the session that never starts let a later tick redo it (LOST_DISPATCH_AFTER)."""
    with GitHubServer() as srv, _driver(srv) as driver:
        srv.fail_next(2, 502, match=DISPATCH)
        with pytest.raises(ServiceUnavailable, match="502"):
            driver.dispatch_next("plans/calc.md", "calc#2")
    assert srv.count("POST", r".*/dispatches") == 1 and srv.dispatches == []


@pytest.mark.parametrize("fault", ["429", "secondary"])
def test_transient_failures_of_the_dispatch_are_retried_with_backoff_honouring_retry_after(fault):
    """429 and a secondary rate limit with `retry-after: 1` on the dispatch (nothing was done): retried, the
    wait honours the header, exactly one run is dispatched."""
    with GitHubServer() as srv, _driver(srv) as driver:
        if fault == "429":
            srv.secondary_rate_limit(1, retry_after=1, match=DISPATCH)
            srv.fail_next(1, 429, match=DISPATCH)
        else:
            srv.secondary_rate_limit(1, retry_after=1, match=DISPATCH)
        started = time.monotonic()
        driver.dispatch_next("plans/calc.md", "calc#2")
        elapsed = time.monotonic() - started
    assert len(srv.dispatches) == 1
    assert elapsed >= 0.95, elapsed  # retry-after: 1 was honoured
    assert elapsed < 10


def test_a_retry_after_longer_than_the_budget_gives_up_at_once():
    """A secondary limit asking for longer than plan-runner waits in one job fails fast, without sleeping it."""
    with GitHubServer() as srv, _driver(srv, max_rate_limit_wait=2.0) as driver:
        srv.secondary_rate_limit(1, retry_after=3600, match=DISPATCH)
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable, match="rate limit"):
            driver.dispatch_next("plans/calc.md", "calc#2")
        assert time.monotonic() - started < 5 and srv.dispatches == []


# --- GitHub down for a whole job: a clear end, the state intact, the plan resumable --------------------------


def test_github_down_at_the_dispatch_ends_the_job_clearly_and_the_tick_resumes_once(tmp_path):
    """Dispatches answer 503 for the whole job: the job fails with a clear summary, the session and the dispatch
    intent are in the ledger, and once GitHub is back one tick dispatches the next run, exactly once."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, GH_SCRIPT)
        srv.fail_next(1000, 503, match=DISPATCH)
        outputs = jobs.session(expect=tuple(range(1, 100)), fast_retries=True)
        assert outputs["outcome"] == "error", outputs
        assert "GitHub stayed unavailable" in outputs["summary"] and "Traceback" not in outputs["summary"]
        log = jobs.log.getvalue()
        assert "::error title=plan-runner::GitHub stayed unavailable while dispatching" in log
        # the log says why and what to do, not only the summary (a reader of the job looks there first)
        assert "\n  why: Server Error; retries were exhausted\n  fix: re-run the job later" in log, log
        entries = [e for e in jobs.ledger() if e["type"] != "place"]  # (the place: where its progress shows)
        assert [e["type"] for e in entries] == ["started", "session", "dispatch"]
        assert entries[1]["outcome"] == "Advanced"
        srv.faults.clear()  # GitHub is back
        assert jobs.tick() and srv.dispatches == []  # the intent is recent: the run may yet start
        jobs.tick(timedelta(hours=1))  # it never started: the lost dispatch is redone, once
        jobs.tick(timedelta(hours=1))
        assert len(srv.dispatches) == 1
        assert jobs.session()["outcome"] == "Advanced"  # and the plan goes on from where it was
        assert fold_ledger(jobs.bare, "greeter").sessions == 2


def test_github_down_while_parking_opens_one_issue_once_it_is_back(tmp_path):
    """Issue creation failing for a whole job ends it clearly with the verdict recorded; the next job opens
    exactly one park issue."""
    with GitHubServer() as srv:
        jobs = GitHubJobs(tmp_path, srv, PARK_SCRIPT)
        srv.fail_next(1000, 502, match=NEW_ISSUE)
        outputs = jobs.session(expect=tuple(range(1, 100)), fast_retries=True)
        assert outputs["outcome"] == "error" and "GitHub stayed unavailable" in outputs["summary"]
        assert [e["type"] for e in jobs.ledger()] == ["started", "session"]
        srv.faults.clear()
        assert jobs.session()["outcome"] == "parked"
        assert len([i for i in srv.issues.values() if "plan-runner" in i["labels"]]) == 1
        assert [e["type"] for e in jobs.ledger()] == ["started", "session", "park"]


# --- the Messages API, through plan-runner's anthropic backend ----------------------------------------------


def _anthropic_repo(tmp_path):
    return make_repo(tmp_path, "sessions: [[{say: unused}]]", agent_extra="\n  model: claude-test-1")


def _with_backend(repo, backend: str = "anthropic") -> None:
    plan = repo / "plans" / "calc.md"
    plan.write_text(plan.read_text().replace("backend: script", f"backend: {backend}"))
    from tests.reliability_world import git

    git(repo, "commit", "-qam", "use the anthropic backend")
    git(repo, "push", "-q", "origin", "main")


def _api_env(srv: m.MessagesServer) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": srv.url, "ANTHROPIC_API_KEY": "sk-ant-test-key-0001"}


def test_messages_api_5xx_with_retry_after_is_retried_and_the_session_completes(tmp_path):
    """A stream cut off mid-answer, a 503 with `retry-after: 1`, then an answer: the session completes,
    having waited as asked. (The answer calls no tool, so the built-in agent asks once more, with its reminder
    that nothing was done: a fourth request, a new turn, not a retry.)"""
    repo = _anthropic_repo(tmp_path)
    _with_backend(repo)
    with m.MessagesServer() as srv:
        down = m.error_turn(503, "api_error", "service unavailable", {"retry-after": "1"})
        srv.enqueue(m.cut(m.reply("half an answer that never ends"), 3), down, m.reply("Nothing to do."),
                    m.reply("Still nothing to do."))
        started = time.monotonic()
        out = result_json(run_session(repo, env=_api_env(srv)))
        elapsed = time.monotonic() - started
        sent = srv.message_requests
        assert len(sent) == 4, [r.json["messages"][-1] for r in sent]
        assert sent[0].json["messages"] == sent[1].json["messages"] == sent[2].json["messages"]  # the same turn, retried
        assert "You have not called any tool" in json.dumps(sent[3].json["messages"][-1])
    assert out["outcome"] == "NoProgress", out  # it said something and did nothing: judged by evidence
    assert elapsed >= 1.0


def test_messages_api_that_stays_down_backs_off_without_burning_an_attempt(tmp_path):
    """The API answers 529 overloaded every time: bounded retries, then LimitBackoff (environment's fault, no
    attempt burned), the ledger intact and the same session kind scheduled after the wait."""
    repo = _anthropic_repo(tmp_path)
    _with_backend(repo)
    with m.MessagesServer() as srv:
        srv.responder = lambda body: m.error_turn(529, "overloaded_error", "Overloaded", {"retry-after": "0"})
        out = result_json(run_session(repo, env=_api_env(srv)))
        calls = len(srv.message_requests)
    assert 1 < calls <= 5, calls
    assert out["outcome"] == "LimitBackoff" and out["blame"] == "environment"
    assert out["attempts"]["1"]["used"] == 0
    assert out["next_action"]["action"] == "wait" and out["next_action"]["then"]["kind"] == "delivery"
    state = fold_ledger(repo)
    assert state.sessions == 1 and state.open_session is None
    again = result_json(run_session(repo, env=_api_env(srv)))
    assert again["status"] == "waiting"  # resumable: it runs when the wait is over, not before


def test_messages_api_rate_limit_waits_until_the_reset_the_headers_give(tmp_path):
    """429 with reset headers 10 minutes out: LimitBackoff until exactly that time, read from the headers.
    The `retry-after` is much shorter (60 s), so the reset can only come from the headers, and the
    comparison is exact: it does not depend on how long the machine takes to run the session."""
    repo = _anthropic_repo(tmp_path)
    _with_backend(repo)
    reset = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=10)
    with m.MessagesServer() as srv:
        srv.responder = lambda body: m.rate_limited(retry_after_s=60, reset_at=reset)
        out = result_json(run_session(repo, env=_api_env(srv)))
    assert out["outcome"] == "LimitBackoff", out
    until = datetime.fromisoformat(out["next_action"]["until"])
    assert until == reset, (until, reset)
    assert [e["type"] for e in ledger(repo)] == ["started", "session"]
