"""A review comment that steers a plan (issue 45) gets its reaction on the review comment itself, through the
endpoint review comments have (`POST .../pulls/comments/{id}/reactions`, `pull-requests: write`); a reply job whose
workflow predates that permission still takes the note and says what to add."""

from __future__ import annotations

import pytest

from runner.adapters import clock
from tests.integration.test_action_modes import Jobs
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration
OLD_REPLY_JOB = {"contents": "write", "issues": "write", "actions": "write"}  # the reply job before this change


def review_event(srv: GitHubServer, number: int, rid: int, user: str = "maintainer") -> dict:
    return {"action": "created", "pull_request": {"number": number},
            "comment": {"id": rid, "body": "Keep the greeting short.", "path": "greeter.py",
                        "user": {"login": user, "type": "User"},
                        "html_url": f"{srv.html_url}/pull/{number}#discussion_r{rid}"},
            "repository": {"full_name": "octo-org/demo"}, "sender": {"login": user}}


def test_a_review_comment_without_pull_requests_write_is_noted_without_its_reaction(tmp_path, monkeypatch):
    monkeypatch.setenv(clock.ENV, "12:00")
    with GitHubServer() as srv:
        srv.actions_can_create_prs = True
        jobs = Jobs(tmp_path, srv)
        rc, out, outputs, _, _ = jobs.session()
        assert outputs["outcome"] == "Advanced", out
        (pull,) = [i for i in srv.issues.values() if i.get("pull")]
        rid = srv.add_review_comment(pull["number"], "Keep the greeting short.", user="maintainer", path="greeter.py")
        srv.token_scopes = dict(OLD_REPLY_JOB)
        rc, out, outputs, summary, _ = jobs.run("pull_request_review_comment", review_event(srv, pull["number"], rid))
        assert rc == 0 and outputs["outcome"] == "noted", out
        assert rid not in srv.reactions and [e["user"] for e in jobs.ledger() if e["type"] == "note"] == ["maintainer"]
        assert "The review comment got no reaction" in summary and "`pull-requests: write`" in summary
        assert "noted for plan `greeter`" in srv.comments_on(pull["number"])[-1]["body"]
