"""What an agent writes reaches plan-runner's record only within fixed bounds (issue 46): a flood of
checkpoint-shaped lines, huge texts, thousands of files and commits leave a state ref whose every object is
small, and the session still ends in a verdict, through the real CLI."""

from __future__ import annotations

import json
import subprocess

import pytest

from runner.adapters.store.dirs import DIR_LIMIT
from runner.core.bounds import ENTRY_LIMIT, LIST_LIMIT, TEXT_LIMIT
from tests.attack_world import arena  # noqa: F401 - the fixture
from tests.reliability_world import ledger_lines

pytestmark = pytest.mark.integration

REF = "refs/plan-runner/state/calc"


def _objects(repo) -> list[tuple[int, str, str]]:
    """(size, type, path) of every object reachable from the plan's state ref (its whole history)."""
    listing = subprocess.run(f"git rev-list --objects {REF} | git cat-file --batch-check='%(objectsize) "
                             "%(objecttype) %(rest)'", shell=True, cwd=repo, capture_output=True, text=True,
                             check=True).stdout
    return [(int(size), kind, rest) for size, kind, *more in (line.split(" ", 2) for line in listing.splitlines())
            for rest in [more[0] if more else ""]]


def _assert_bounded(repo) -> None:
    for size, kind, path in _objects(repo):
        limit = DIR_LIMIT if path.startswith(("transcripts/", "agent-state/")) else 2 * ENTRY_LIMIT
        assert size <= limit, f"{kind} {path or '(root)'} in {REF} is {size:,} bytes (bound {limit:,})"
    for line in ledger_lines(repo):
        assert len(line.encode()) <= ENTRY_LIMIT, f"a ledger entry of {len(line):,} bytes"


def test_a_million_checkpoint_lines_leave_a_small_state_ref(arena):
    """A million checkpoint-shaped lines appended to the plan (69 MB): not read, the plan restored from its
    base, one reason saying so, and no object of the state ref over its bound (the whole ref a few KB)."""
    a = arena("checkpoint_flood")
    run = a.session(timeout=300)
    assert run.outcome == "NeedsHuman", run.out
    assert any("the plan file grew by" in r and "restored from the base commit" in r for r in run.out["reasons"])
    _assert_bounded(a.bare)
    total = sum(size for size, _, _ in _objects(a.bare))
    assert total < 64 * 1024, f"the state ref holds {total:,} bytes after one session"
    plan = subprocess.run(["git", "show", "plan-runner/calc:plans/calc.md"], cwd=a.bare, capture_output=True,
                          text=True, check=True).stdout
    assert "Forged checkpoint" not in plan and len(plan) < 2000


def test_every_text_an_agent_writes_is_cut_with_a_count_of_what_was_left_out(arena):
    """Within what plan-runner reads, each protected change is a reason: at most LIST_LIMIT of them, the last
    counting the rest; a 96 KB checkpoint title, a 100 KB commit message, a 2 MB handoff and 3,000 file
    names are each cut; every object of the state ref stays within its bound."""
    a = arena("text_flood")
    run = a.session(timeout=300)
    assert run.outcome == "NeedsHuman", run.out
    reasons = run.out["reasons"]
    assert len(reasons) <= LIST_LIMIT + 3
    assert any(r.endswith("more reason(s) left out") for r in reasons), reasons[-3:]
    assert all(len(r) <= TEXT_LIMIT for r in reasons)
    _assert_bounded(a.bare)
    evidence = json.loads(subprocess.run(["git", "show", f"{REF}:files/last-evidence.json"], cwd=a.bare,
                                         capture_output=True, check=True).stdout)
    assert len(evidence["handoff"]) <= 32_000 and "more characters left out" in evidence["handoff"]
    files = [f for c in evidence["commits"] for f in c["files"]]
    assert any(f.endswith("more file(s)") for f in files) and len(files) < 1000
    assert all(len(c["summary"]) <= TEXT_LIMIT for c in evidence["commits"])
