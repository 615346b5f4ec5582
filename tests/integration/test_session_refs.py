"""A job that dies after its agent still leaves the agent's commits on the remote."""

from __future__ import annotations

import pytest

from tests import reliability_world as rw

pytestmark = pytest.mark.integration


def test_a_finished_session_leaves_no_session_ref(tmp_path):
    """After the work branch and the ledger are pushed the session ref is deleted again."""
    repo = rw.make_repo(tmp_path, rw.script([rw.MUL_STEP, {"commit": "Add mul"}]))
    rw.result_json(rw.run_session(repo))
    bare = tmp_path / "origin.git"
    assert rw.git(bare, "for-each-ref", "refs/plan-runner/sessions/") == ""  # the plan's state ref stays
    assert "Add mul" in rw.git(bare, "log", "--format=%s", "plan-runner/calc")


def test_by_default_a_job_killed_outright_pushes_nothing_before_its_one_push(tmp_path):
    """A session killed outright (SIGKILL) before its final push has pushed its start (it was
    started by hand: no dispatch intent on the remote) but neither its commits nor a session ref: that is the
    price of one push per session (docs/reliability.md). The same clone's next session still saves the work
    (the agent's area is on its disk) and pushes it with the reconciled record."""
    repo = rw.make_repo(tmp_path, rw.script([rw.MUL_STEP, {"commit": "Add mul"}], [{"say": "again"}]))
    assert rw.run_session(repo, fault="before-persist").returncode != 0
    bare = tmp_path / "origin.git"
    assert rw.git(bare, "for-each-ref", "refs/plan-runner/sessions/") == ""
    assert [e["type"] for e in rw.ledger(bare)] == ["started"]
    out = rw.result_json(rw.run_session(repo))
    assert out["status"] == "ran"
    reconciled = [e for e in rw.ledger(bare) if e["type"] == "session" and e.get("reconciled")]
    assert reconciled and reconciled[0]["outcome"] == "TimedOut"
    assert "Add mul" in rw.git(bare, "log", "--format=%s", "plan-runner/calc")
