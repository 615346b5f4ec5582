"""What an agent writes reaches plan-runner's record only within fixed bounds (issue 46): a flood of
checkpoint-shaped lines, huge texts, thousands of files and commits leave a state ref whose every object is
small, and the session still ends in a verdict, through the real CLI."""

from __future__ import annotations

import json
import subprocess

import pytest

from runner.adapters.store.dirs import DIR_LIMIT
from runner.core.bounds import ENTRY_LIMIT, LIST_LIMIT, TEXT_LIMIT
from tests.attack_world import CREDITED, arena  # noqa: F401 - the fixture
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


def test_agent_cli_settings_committed_by_the_agent_are_reverted_and_park(arena):
    """`.claude/`, `.mcp.json` and `.codex/` committed on the work branch are protected: reverted before anything
    is pushed, and the session parks for a human saying which."""
    a = arena("agent_config")
    run = a.session()
    assert run.outcome == "NeedsHuman", run.out
    text = "\n".join(run.out["reasons"])
    for path in (".claude/settings.json", ".mcp.json", ".codex/config.toml"):
        assert path in text
    tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", "plan-runner/calc"], cwd=a.bare,
                          capture_output=True, text=True).stdout
    assert "calc/mul.py" in tree and ".claude/" not in tree and ".mcp.json" not in tree and ".codex/" not in tree
    a.assert_all_well(run)


def test_only_session_transcripts_that_read_as_json_lines_are_kept_of_the_agents_state(arena):
    """Of what the agent wrote into its CLI's state folder, only a session transcript reading as JSON lines
    reaches the state ref: settings, the CLI's own state file, compressed and binary files (under any name),
    plain text under a transcript's name are all left out."""
    a = arena("state_smuggle")
    run = a.session()
    assert run.outcome in CREDITED, run.out
    assert b"state-write-failed" not in a.loot_text(), a.loot_text()[-2000:]
    tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", REF], cwd=a.bare, capture_output=True,
                          text=True, check=True).stdout.splitlines()
    kept = [p for p in tree if "agent-state/" in p]
    assert [p.rsplit("/", 1)[1] for p in kept] == ["0123abcd-honest.jsonl"], kept
    blobs = subprocess.run(f"git rev-list --objects {REF} | git cat-file --batch-check='%(objectname)' | "
                           "git cat-file --batch", shell=True, cwd=a.bare, capture_output=True).stdout
    assert b"HOSTILE-SMUGGLED" not in blobs and b"sandbox_mode" not in blobs and b"\x1f\x8b" not in blobs


def test_a_plan_can_let_the_agent_change_its_clis_configuration(arena):
    """`agent_config_protected: false`: the same commits are the agent's to make, credited, and pushed."""
    a = arena("agent_config", front_extra="agent_config_protected: false\n")
    run = a.session()
    assert run.outcome in CREDITED, run.out
    assert not any(".mcp.json" in r for r in run.out["reasons"])
    tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", "plan-runner/calc"], cwd=a.bare,
                          capture_output=True, text=True).stdout
    assert ".claude/settings.json" in tree and ".mcp.json" in tree
