"""The ledger compacted on the git state store (issue 46): past COMPACT_AFTER segments its oldest entries fold into
one summary, the state ref a new root, so its tree and its history stay bounded however many sessions a plan
runs; the run state folds the same, another job's compaction is a write of plan-runner's (never "moved by the
agent"), and a compacting push replaces the remote's state under the same lease."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import git
import pytest

import runner.adapters.store.layout as layout
from runner.adapters.store.state import GitStateStore
from runner.core.actions import Blame, Outcome, SessionKind
from runner.core.ledger import SessionStarted, Summary
from runner.core.policy import fold, folded, snapshot_json
from runner.core.ports import AppendOptions
from tests.core_builders import T0, record
from tests.git_repos import configure, init_repo
from tests.reliability_world import cli_env

pytestmark = pytest.mark.integration

REF = "refs/plan-runner/state/p"
OUTCOMES = [Outcome.ADVANCED, Outcome.GATES_RED, Outcome.PROGRESS, Outcome.LIMIT_BACKOFF, Outcome.ROLLED_OVER]


@pytest.fixture
def small(monkeypatch):
    """Segments of 4 entries, compaction past 3 segments keeping the latest 4 entries."""
    monkeypatch.setattr(layout, "SEGMENT_ENTRIES", 4)
    monkeypatch.setattr(layout, "COMPACT_AFTER", 3)
    monkeypatch.setattr(layout, "KEEP_SEGMENTS", 1)


def session(n: int) -> list:
    outcome = OUTCOMES[n % len(OUTCOMES)]
    started = SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint=f"1.{n}", started_at=T0 + timedelta(hours=n),
                             base_sha="b" * 40)
    blame = Blame.AGENT if outcome is Outcome.GATES_RED else Blame.NONE
    return [started, record(n=n, outcome=outcome, blame=blame, checkpoint=f"1.{n}", tokens=100 * n, cost_usd=0.5,
                            advanced=(f"1.{n}",) if outcome is Outcome.ADVANCED else ())]


def write(store: GitStateStore, entries: list, version: str | None) -> str:
    state = folded(store.read("p")[0]) if version else None
    return store.append("p", entries, version, options=AppendOptions(snapshot=snapshot_json(fold(entries, state))))


def git_out(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_a_long_ledger_compacts_into_a_summary_and_folds_the_same(tmp_path, small):
    """Forty sessions (80 entries) in segments of 4: the ledger never holds more than 3 segments, its first entry
    is the summary of every session before the kept ones, the state folds the same from the compacted ledger
    (with or without the snapshot) as from every entry, and the ref's history is as short as its ledger."""
    init_repo(tmp_path / "w", {"README.md": "x\n"}).close()
    store = GitStateStore(tmp_path / "w", remote=None)
    written: list = []
    v = None
    for n in range(1, 41):
        v = write(store, session(n), v)
        written += session(n)
        assert len(git_out(tmp_path / "w", "ls-tree", f"{v}:ledger").splitlines()) <= 3
    ledger, version = GitStateStore(tmp_path / "w", remote=None).read("p")
    assert version == v and ledger.snapshot is not None
    entries = list(ledger)
    summary = entries[0]
    assert isinstance(summary, Summary) and len(entries) <= 3 * 4
    assert summary.entries + len(entries) - 1 == len(written)
    assert summary.last_session == entries[2].n - 1 if isinstance(entries[1], SessionStarted) else True
    kept_sessions = sum(1 for e in entries if getattr(e, "type", "") == "session")
    assert summary.sessions + kept_sessions == 40 and summary.first_session == 1
    assert sum(summary.outcomes.values()) == summary.sessions
    assert summary.credited == tuple(f"1.{n}" for n in range(5, summary.last_session + 1, 5))
    assert summary.tokens == sum(100 * n for n in range(1, summary.last_session + 1))
    full = fold(written)
    assert folded(ledger) == full  # from the snapshot
    assert fold(entries) == full  # entry by entry, from the summary on
    assert full.sessions == 40 and full.tokens == sum(100 * n for n in range(1, 41))
    history = int(git_out(tmp_path / "w", "rev-list", "--count", REF))
    assert history <= 2 * 4, f"{history} commits reachable from the state ref"
    assert "written on " in git_out(tmp_path / "w", "log", "--format=%s", REF).splitlines()[-1]


def test_a_compaction_by_another_job_is_plan_runners_write_and_pushes_under_the_lease(tmp_path, small):
    """Job A compacts and pushes (a non-fast-forward on the remote, under its lease); job B, whose agent ran
    meanwhile, finds the remote moved by a write of plan-runner's: nothing restored, its own write yields."""
    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True, initial_branch="main").close()
    with init_repo(tmp_path / "seed", {"README.md": "x\n"}) as seed:
        seed.create_remote("origin", str(bare)).push("main:main")
    for name in ("a", "b"):
        with configure(git.Repo.clone_from(str(bare), tmp_path / name)):
            pass
    a, b = GitStateStore(tmp_path / "a"), GitStateStore(tmp_path / "b")
    v = None
    for n in range(1, 7):  # 12 entries: 3 full segments, one more session compacts
        v = write(a, session(n), v)
    _, seen = b.read("p")
    assert seen == v
    new = write(a, session(7), v)
    assert "parent" not in git_out(tmp_path / "a", "cat-file", "-p", new)  # a new root
    assert git_out(bare, "rev-parse", REF).strip() == new
    assert b.restore_own("p", seen) == []  # another job's write: left alone
    assert git_out(bare, "rev-parse", REF).strip() == new
    ledger, version = b.read("p")
    assert version == new and isinstance(ledger[0], Summary) and folded(ledger).sessions == 7
    v = write(b, session(8), version)  # B carries on on the compacted ledger
    assert git_out(bare, "rev-parse", REF).strip() == v


def test_a_state_ref_moved_to_anything_else_is_still_restored(tmp_path, small):
    """A parentless commit whose ledger merely starts with a summary naming the old state, but does not keep its
    entries, is not taken for a compaction: the agent's move is undone."""
    init_repo(tmp_path / "w", {"README.md": "x\n"}).close()
    store = GitStateStore(tmp_path / "w", remote=None)
    v = None
    for n in range(1, 6):
        v = write(store, session(n), v)
    summary = Summary(at=T0, entries=9, previous=v, fold=0, state={}, sessions=5).model_dump_json()
    seg = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=tmp_path / "w", input=summary + "\n",
                         capture_output=True, text=True, check=True).stdout.strip()
    seg_tree = subprocess.run(["git", "mktree"], cwd=tmp_path / "w", input=f"100644 blob {seg}\t000000.jsonl\n",
                              capture_output=True, text=True, check=True).stdout.strip()
    top = subprocess.run(["git", "mktree"], cwd=tmp_path / "w", input=f"040000 tree {seg_tree}\tledger\n",
                         capture_output=True, text=True, check=True).stdout.strip()
    forged = git_out(tmp_path / "w", "commit-tree", top, "-m", "forged").strip()
    subprocess.run(["git", "update-ref", REF, forged], cwd=tmp_path / "w", check=True)
    assert store.restore_own("p", v)
    assert git_out(tmp_path / "w", "rev-parse", REF).strip() == v


def test_status_and_logs_read_a_compacted_ledger_through_the_real_cli(tmp_path):
    """A plan with 1,100 sessions behind it (the real thresholds: compacted past 8 segments of 256 entries) runs
    its next session, credited, through the real CLI; `status` counts every session and says what the summary
    stands for; `logs` shows the latest session and says why an early one is no longer there; every object of
    the state ref stays small and its history short."""
    import json
    import os
    import sys

    from runner.core.actions import RunSession
    from tests.integration.test_session_local import MUL, make_repo

    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
            - check: "1.1"
            - commit: "Add mul"
        """)
    plan = (repo / "plans" / "calc.md").read_text().replace("max_sessions: 10", "max_sessions: 5000")
    (repo / "plans" / "calc.md").write_text(plan)
    subprocess.run(["git", "commit", "-qam", "more sessions"], cwd=repo, check=True)
    store = GitStateStore(repo, remote=None)
    nxt = RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="progress: keep delivering")
    v, state = None, None
    for first, last in ((1, 1000), (1001, 1100)):
        entries = [e for n in range(first, last + 1) for e in (
            SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0 + timedelta(minutes=n),
                           base_sha="b" * 40),
            record(n=n, outcome=Outcome.PROGRESS, tokens=1000, cost_usd=0.01, next_action=nxt,
                   reasons=("1 work commit(s), gates green, no checkpoint flipped",)))]
        state = fold(entries, state)
        v = store.append("calc", entries, v, options=AppendOptions(snapshot=snapshot_json(state)))
    store.close()
    env = dict(os.environ)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "runner", *args], cwd=repo, capture_output=True, text=True,
                              env=env, timeout=180)

    ran = cli("session", "plans/calc.md", "--json")
    assert "Traceback" not in ran.stderr, ran.stderr
    out = json.loads(ran.stdout)
    assert out["outcome"] == "Advanced", out
    status = json.loads(cli("status", "--json").stdout)[0]
    assert status["sessions"] == 1101 and status["tokens"] >= 1_100_000 and status["cost_known"]
    assert status["compacted"].startswith("sessions 1-") and "Progress" in status["compacted"], status
    shown = cli("status")
    assert shown.returncode == 0 and "calc, earlier: sessions 1-" in shown.stdout, shown.stdout
    latest = cli("logs", "plans/calc.md")
    assert latest.returncode == 0 and latest.stdout.startswith("session 1101 "), latest.stdout[:500]
    early = cli("logs", "plans/calc.md", "3")
    assert early.returncode != 0 and "compacted past" in early.stderr and "sessions 1-" in early.stderr, early.stderr
    tree = git_out(repo, "ls-tree", "-r", "-l", "refs/plan-runner/state/calc")
    ledger = [line for line in tree.splitlines() if "\tledger/" in line]
    assert len(ledger) <= 8, tree
    assert all(int(line.split()[3]) < 4 * 2**20 for line in ledger), tree
    assert int(git_out(repo, "rev-list", "--count", "refs/plan-runner/state/calc")) <= 3


def _forge(repo, lines: list[bytes], message: str = "forged") -> str:
    """A parentless state commit whose ledger is `lines` in segments of 4 (the `small` thresholds)."""
    def run(*args, data: bytes | None = None) -> str:
        return subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, check=True).stdout.decode().strip()
    rows = []
    for i in range(0, len(lines), 4):
        blob = run("hash-object", "-w", "--stdin", data=b"".join(lines[i:i + 4]))
        rows.append(f"100644 blob {blob}\t{i // 4:06d}.jsonl\n")
    seg_tree = run("mktree", data="".join(rows).encode())
    top = run("mktree", data=f"040000 tree {seg_tree}\tledger\n".encode())
    return run("commit-tree", top, "-m", message)


def test_a_forged_compaction_that_keeps_the_entries_but_lies_in_its_summary_is_restored(tmp_path, small):
    """The agent's attack on compaction: with a way to push the state ref, it writes a parentless commit naming the
    real state as `previous` and keeping the latest entries byte for byte, under a summary that lies (no session
    run, nothing spent: the plan's session and cost budgets start again). Only a summary that is the one
    plan-runner would write for the entries it replaces makes a compaction: this one is restored on the remote,
    and an honest one (the same entries, summarised truly) is still taken for another job's write."""
    from runner.core.compaction import summarize
    from runner.core.ledger import dump_entry, parse_entry
    from runner.core.policy import RunState

    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True, initial_branch="main").close()
    with init_repo(tmp_path / "seed", {"README.md": "x\n"}) as seed:
        seed.create_remote("origin", str(bare)).push("main:main")
    with configure(git.Repo.clone_from(str(bare), tmp_path / "a")):
        pass
    a = GitStateStore(tmp_path / "a")
    v = None
    for n in range(1, 7):  # 12 entries, not compacted
        v = write(a, session(n), v)
    lines = [line + b"\n" for line in git_out(tmp_path / "a", "show", f"{v}:ledger/000000.jsonl").encode().split(b"\n")
             if line.strip()]
    lines += [line + b"\n" for seg in ("000001", "000002") for line in
              git_out(tmp_path / "a", "show", f"{v}:ledger/{seg}.jsonl").encode().split(b"\n") if line.strip()]
    assert len(lines) == 12
    honest = summarize([parse_entry(line.decode()) for line in lines[:8]], at=T0, previous=v)
    lie = honest.model_copy(update=dict(state=json.loads(RunState().model_dump_json()), sessions=0, tokens=0,
                                        cost_usd=0.0, outcomes={}, first_session=None, last_session=None))
    for summary, restored in ((lie, True), (honest, False)):
        forged = _forge(tmp_path / "a", [(dump_entry(summary) + "\n").encode(), *lines[8:]])
        subprocess.run(["git", "push", "-q", "--force", str(bare), f"{forged}:{REF}"], cwd=tmp_path / "a", check=True)
        moved = a.restore_own("p", v)
        assert bool(moved) is restored, moved
        assert git_out(bare, "rev-parse", REF).strip() == (v if restored else forged)
    assert folded(GitStateStore(tmp_path / "a").read("p")[0]).sessions == 6  # the honest one folds the same


def test_a_forged_append_on_the_remote_is_another_jobs_write_and_a_malformed_one_a_clear_error(tmp_path):
    """Through the real CLI (docs/security.md, "Appends to a plan's state ref by someone who can push"): a commit
    pushed onto the plan's state ref that appends a well-formed entry is taken as another job's write (outside the
    threat model: only write permission pushes that ref); one that appends a line that is no entry stops the
    next session and `status` with an error naming the ref and the line, never a traceback."""
    import os

    from tests.reliability_world import MUL_STEP, git as rgit, ledger, make_repo, result_json, run_session, script

    repo = make_repo(tmp_path, script([MUL_STEP, {"commit": "Add mul"}], [MUL_STEP], [MUL_STEP]))
    assert result_json(run_session(repo))["outcome"] == "Progress"
    ref = "refs/plan-runner/state/calc"

    def forge_append(line: str) -> None:
        rgit(repo, "fetch", "-q", "origin", f"+{ref}:{ref}")
        v = rgit(repo, "rev-parse", ref)
        segment = rgit(repo, "show", f"{v}:ledger/000000.jsonl") + "\n" + line + "\n"
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=segment, text=True,
                              capture_output=True, check=True).stdout.strip()
        env = dict(os.environ, GIT_INDEX_FILE=str(tmp_path / "forge.index"))
        subprocess.run(["git", "read-tree", v], cwd=repo, env=env, check=True)
        subprocess.run(["git", "update-index", "--cacheinfo", f"100644,{blob},ledger/000000.jsonl"], cwd=repo,
                       env=env, check=True)
        subprocess.run(["git", "update-index", "--force-remove", "snapshot.json"], cwd=repo, env=env, check=True)
        tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True,
                              check=True).stdout.strip()
        forged = rgit(repo, "commit-tree", tree, "-p", v, "-m", "plan-runner: calc: note")
        rgit(repo, "push", "-q", "origin", f"{forged}:{ref}")

    forge_append(json.dumps({"type": "note", "at": "2026-12-01T00:00:00Z", "text": "forged by a writer",
                             "user": "someone"}))
    second = run_session(repo)
    assert result_json(second)["outcome"] == "Progress", second.stderr[-2000:]
    notes = [e for e in ledger(tmp_path / "origin.git") if e["type"] == "note"]
    assert [n["text"] for n in notes] == ["forged by a writer"]  # taken as another job's write, as documented
    forge_append('{"type": "session", "outcome": "Finished"}')
    for args in (["session", "plans/calc.md", "--json"], ["status"]):
        proc = subprocess.run([sys.executable, "-m", "runner", *args], cwd=repo, capture_output=True, text=True,
                              env=cli_env(), timeout=120)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "corrupt" in proc.stderr and "ledger/000000.jsonl" in proc.stderr, proc.stderr
