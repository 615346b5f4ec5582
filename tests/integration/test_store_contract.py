"""The state-store port's contract (`runner.core.ports.StateStore`), checked the same way on every store: the git
store without a remote, the git store over a real bare remote (two clones), and the in-memory store.

A test gets two handles on the same state (`pair`): for git, two stores (one repository, or two clones of one
remote); in memory, the one store twice. What one handle writes the other reads, and a write on a version the
other handle has moved past is a conflict."""

from __future__ import annotations

import inspect
from datetime import datetime, timezone
from pathlib import Path

import git
import pytest

from runner.adapters.store.memory import MemoryStateStore
from runner.adapters.store.state import GitStateStore
from runner.core.errors import PlanRunnerError, StateConflict
from runner.core.ledger import Finished, Parked
from runner.core.policy import fold, folded, snapshot_json
from runner.core.ports import AppendOptions, StateStore
from tests.git_repos import configure, init_repo

pytestmark = pytest.mark.integration

AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
KINDS = ("git", "git-remote", "memory")


def parked(reason: str) -> Parked:
    return Parked(at=AT, reason=reason)


def _pair(kind: str, tmp_path: Path):
    if kind == "memory":
        store = MemoryStateStore()
        return store, store
    if kind == "git":
        init_repo(tmp_path / "w", {"README.md": "hello\n"}).close()
        return GitStateStore(tmp_path / "w", remote=None), GitStateStore(tmp_path / "w", remote=None)
    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True, initial_branch="main").close()
    with init_repo(tmp_path / "seed", {"README.md": "hello\n"}) as seed:
        seed.create_remote("origin", str(bare)).push("main:main")
    for name in ("a", "b"):
        with configure(git.Repo.clone_from(str(bare), tmp_path / name)):
            pass
    return GitStateStore(tmp_path / "a"), GitStateStore(tmp_path / "b")


@pytest.fixture(params=KINDS)
def pair(request, tmp_path):
    one, two = _pair(request.param, tmp_path)
    yield one, two
    one.close()
    two.close()


@pytest.fixture
def store(pair):
    return pair[0]


def test_every_store_implements_the_whole_port_with_its_signatures():
    """Every member the port declares exists on both stores with the same parameters (no driver needs a probe)."""
    members = [n for n, v in vars(StateStore).items() if callable(v) and not n.startswith("_")]
    assert len(members) == 13, members
    for cls in (GitStateStore, MemoryStateStore):
        for name in members:
            want = list(inspect.signature(getattr(StateStore, name)).parameters)
            assert list(inspect.signature(getattr(cls, name)).parameters) == want, (cls.__name__, name)


def test_an_empty_store_holds_nothing(store, tmp_path):
    entries, version = store.read("p")
    assert (list(entries), version, entries.snapshot) == ([], None, None)
    assert store.plans() == [] and store.read_file("p", "e.json") is None
    store.read_dir("p", "transcripts", tmp_path / "out")
    assert (tmp_path / "out").is_dir() and list((tmp_path / "out").iterdir()) == []


def test_appends_read_back_in_order_with_files_from_the_other_handle(pair):
    one, two = pair
    v1 = one.append("p", [parked("a")], None, files={"e.json": b"1", "f.json": b"f"})
    v2 = one.append("p", [parked("b"), Finished(at=AT, reason="done")], v1, files={"e.json": b"2"})
    assert v1 != v2 and None not in (v1, v2)
    entries, version = two.read("p")
    assert version == v2 and [e.type for e in entries] == ["park", "park", "finish"]
    assert [e.reason for e in entries] == ["a", "b", "done"]
    assert two.read_file("p", "e.json") == b"2" and two.read_file("p", "f.json") == b"f"  # files merge
    assert two.plans() == ["p"]


def test_a_stale_version_is_a_conflict_and_writes_nothing(pair):
    """Compare-and-swap: the handle that read first and writes second loses, and nothing of its write lands."""
    one, two = pair
    v1 = one.append("p", [parked("a")], None)
    _, seen = two.read("p")
    v2 = one.append("p", [parked("b")], v1)
    with pytest.raises(StateConflict):
        two.append("p", [parked("late")], seen)
    with pytest.raises(StateConflict):
        two.append("p", [parked("first?")], None)  # the plan has state: "absent" is stale too
    entries, version = two.read("p")
    assert version == v2 and [e.reason for e in entries] == ["a", "b"]


def test_the_local_version_is_what_this_repository_holds_without_asking_the_remote(pair):
    """`local_version` answers from this repository alone: the version its own write left, seen by another handle
    of the same repository (another process in one clone), with no fetch."""
    one, _ = pair
    assert one.local_version("p") is None
    v1 = one.append("p", [parked("a")], None)
    assert one.local_version("p") == v1
    same = one if isinstance(one, MemoryStateStore) else GitStateStore(one.repo, remote=one.remote)
    assert same.local_version("p") == v1
    v2 = same.append("p", [parked("b")], v1)
    assert one.local_version("p") == v2 != v1


def test_plans_are_independent(pair):
    """A write to one plan never makes another plan's version stale."""
    one, two = pair
    vq = one.append("q", [parked("q1")], None)
    vp = one.append("p", [parked("p1")], None)
    _, seen_q = two.read("q")
    one.append("p", [parked("p2")], vp)
    assert seen_q == vq
    vq2 = two.append("q", [parked("q2")], seen_q)
    assert [e.reason for e in one.read("q")[0]] == ["q1", "q2"] and one.read("q")[1] == vq2
    assert [e.reason for e in one.read("p")[0]] == ["p1", "p2"]
    assert sorted(one.plans()) == ["p", "q"]


def test_a_snapshot_is_handed_over_only_with_the_ledger_it_was_folded_from(pair):
    one, two = pair
    entries = [parked("a"), Finished(at=AT, reason="done")]
    v = one.append("p", entries, None, options=AppendOptions(snapshot=snapshot_json(fold(entries))))
    ledger, _ = two.read("p")
    assert ledger.snapshot is not None and folded(ledger) == fold(entries) and folded(ledger).finished
    one.read("p")
    one.append("p", [parked("more")], v)  # no snapshot with this write: the old one is not vouched for
    ledger, _ = two.read("p")
    assert ledger.snapshot is None and folded(ledger) == fold(entries + [parked("more")])


def test_a_long_ledger_reads_back_whole_at_any_index(pair, monkeypatch):
    """Many appends (the git store in segments of 3 here): length, indexing from either end, slices, iteration."""
    import runner.adapters.store.layout as layout

    monkeypatch.setattr(layout, "SEGMENT_ENTRIES", 3)
    one, two = pair
    v = None
    for i in range(10):
        before = list(one.read("p")[0]) if v else []
        new = [parked(f"e{i}")]
        v = one.append("p", new, v, options=AppendOptions(snapshot=snapshot_json(fold(before + new))))
    ledger, version = two.read("p")
    assert version == v and len(ledger) == 10 and ledger.snapshot is not None
    assert ledger[-1].reason == "e9" and ledger[0].reason == "e0" and ledger[4].reason == "e4"
    assert [e.reason for e in ledger[2:5]] == ["e2", "e3", "e4"]
    assert [e.reason for e in ledger] == [f"e{i}" for i in range(10)]


def test_a_directory_round_trips_redacted_and_replaces_the_one_before(pair, tmp_path):
    one, two = pair
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.jsonl").write_bytes(b'{"key": "sk-ant-SECRET"}\n')
    (src / "b.txt").write_text("b\n")
    v = one.append("p", [parked("1")], None,
                   options=AppendOptions(dirs={"transcripts": src}, redact=(b"sk-ant-SECRET",)))
    two.read("p")
    back = tmp_path / "back"
    two.read_dir("p", "transcripts", back)
    assert (back / "sub" / "a.jsonl").read_bytes() == b'{"key": "***"}\n' and (back / "b.txt").read_text() == "b\n"
    (back / "b.txt").write_text("b2\n")
    v2 = two.append("p", [parked("2")], v, options=AppendOptions(dirs={"transcripts": back}))
    one.read("p")
    again = tmp_path / "again"
    one.read_dir("p", "transcripts", again)
    assert (again / "b.txt").read_text() == "b2\n" and (again / "sub" / "a.jsonl").read_bytes() == b'{"key": "***"}\n'
    assert v2 != v


def test_a_secret_holding_a_newline_is_redacted_before_the_directory_bound_cuts_its_oldest_lines(pair, tmp_path):
    """A transcript over the directory's bound keeps its newest lines, cut at a line end: where that cut falls inside
    a secret holding a newline (a PEM key), its second line alone would be kept, no longer the secret. The file is
    redacted whole first, so neither line of the secret is stored."""
    from runner.adapters.store.dirs import DIR_LIMIT

    one, two = pair
    first, second = "-----BEGIN TEST KEY-----MIIEvQIBADANBg", "kqhkiG9w0BAQEFAASC-----END TEST KEY-----"
    key = f"{first}\n{second}"
    src = tmp_path / "src"
    src.mkdir()
    head = f"{key}\n".encode()
    filler = b"x" * 99 + b"\n"
    count = (DIR_LIMIT + 5 - len(head)) // len(filler) + 1  # the bound's cut lands 5 bytes into the key
    (src / "log.txt").write_bytes(head + filler * count)
    v = one.append("p", [parked("1")], None, options=AppendOptions(dirs={"transcripts": src}, redact=(key.encode(),)))
    two.read("p")
    back = tmp_path / "back"
    two.read_dir("p", "transcripts", back)
    kept = (back / "log.txt").read_bytes()
    assert v and kept.startswith(b"***\n") and len(kept) <= DIR_LIMIT
    assert first.encode() not in kept and second.encode() not in kept


@pytest.mark.parametrize("bad", ["a/b", "", "..", "x y", "-opt"])
def test_a_name_that_cannot_be_stored_is_a_clear_error(store, bad):
    with pytest.raises(PlanRunnerError) as info:
        store.append(bad, [parked("x")], None)
    assert "cannot be stored" in info.value.what and info.value.fix
    with pytest.raises(PlanRunnerError):
        store.read(bad)
    with pytest.raises(PlanRunnerError):
        store.append("p", [parked("x")], None, files={bad or "?*": b""})


def test_deferred_pushes_land_with_flush(pair):
    """`defer_pushes` then `flush`: the other handle reads every plan written in between once flushed."""
    one, two = pair
    one.defer_pushes()
    one.append("p", [parked("p")], None)
    one.append("q", [parked("q")], None)
    assert one.flush() == {}
    assert [e.reason for e in two.read("p")[0]] == ["p"] and [e.reason for e in two.read("q")[0]] == ["q"]


def test_the_remote_members_answer_on_every_store(pair):
    """Without anything to restore or push, `restore_own` moves nothing and `push_pending` pushes nothing;
    `fetched_with` says whether the refspecs given to `fetch_also` came with the read."""
    one, two = pair
    v = one.append("p", [parked("a")], None)
    assert one.restore_own("p", v) == [] and one.restore_own("p", v, remote=False) == []
    assert one.push_pending("p") is False
    one.fetch_also("p", [], [])
    one.read("p")
    assert one.fetched_with("p") is False  # nothing extra was asked for


def test_a_local_session_runs_on_the_memory_store_through_the_port_alone(tmp_path):
    """The drivers ask only the port: a real local session (script agent, real gates, real git for the work) on
    the in-memory store records its start and verdict there, the next session starts from that state, and no
    state ref is written to the repository."""
    from runner.drivers.cli.local import LocalDispatcher, LocalParker
    from runner.drivers.session import Ports, Workspace
    from runner.drivers.session import run_session
    from tests import reliability_world as rw

    repo = rw.make_repo(tmp_path, rw.script([rw.MUL_STEP, {"commit": "Add mul"}], [{"say": "nothing"}]),
                        remote=False)
    store = MemoryStateStore()
    ws = Workspace(repo=repo, plan_path="plans/calc.md", env=rw.cli_env(PLAN_RUNNER_ISOLATION="none"))
    ports = Ports(store=store, dispatcher=LocalDispatcher(), parker=LocalParker(tmp_path / "reports"))
    first = run_session(ws, ports)
    assert first.record is not None and first.record.outcome.value in ("Advanced", "Progress"), first.message
    assert first.record.decided_by is not None  # the policy's rule, recorded with the verdict
    second = run_session(ws, ports)
    entries, _ = store.read("calc")
    kinds = [e.type for e in entries]
    assert kinds.count("started") == 2 and kinds.count("session") == 2 and kinds[:2] == ["started", "session"]
    assert second.record is not None and second.record.n == 2
    assert store.read_file("calc", "last-evidence.json")
    assert rw.git(repo, "for-each-ref", "refs/plan-runner/state/") == ""


# --- compaction: both stores fold a long ledger's oldest entries into one summary by the same rule ---------------

def _session(n: int) -> list:
    """Session n's two entries: every fifth Advanced (its checkpoint credited), the rest spread over other outcomes."""
    from datetime import timedelta

    from runner.core.actions import Blame, Outcome, SessionKind
    from runner.core.ledger import SessionStarted
    from tests.core_builders import record

    outcome = [Outcome.ADVANCED, Outcome.GATES_RED, Outcome.PROGRESS, Outcome.LIMIT_BACKOFF, Outcome.ROLLED_OVER][n % 5]
    started = SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint=f"1.{n}", started_at=AT + timedelta(hours=n),
                             base_sha="b" * 40)
    return [started, record(n=n, outcome=outcome, blame=Blame.AGENT if outcome is Outcome.GATES_RED else Blame.NONE,
                            checkpoint=f"1.{n}", tokens=100 * n, cost_usd=0.5,
                            advanced=(f"1.{n}",) if outcome is Outcome.ADVANCED else ())]


@pytest.fixture
def compacting(monkeypatch):
    """Segments of 4 entries; a ledger of more than 3 segments (12 entries) compacts, keeping its latest 4."""
    import runner.adapters.store.layout as layout

    monkeypatch.setattr(layout, "SEGMENT_ENTRIES", 4)
    monkeypatch.setattr(layout, "COMPACT_AFTER", 3)
    monkeypatch.setattr(layout, "KEEP_SEGMENTS", 1)


def _write(store, entries: list, version: str | None, plan: str = "p") -> str:
    state = folded(store.read(plan)[0]) if version else None
    return store.append(plan, entries, version, options=AppendOptions(snapshot=snapshot_json(fold(entries, state))))


def test_a_long_ledger_compacts_into_one_summary_that_folds_the_same(pair, compacting):
    """Every write that leaves more than 12 entries compacts: the other handle reads a summary first, then the
    latest entries as written; the ledger folds (from the snapshot and entry by entry) to the state of every entry
    written; the summary's totals are what status and logs show; a second compaction carries the first's on."""
    from runner.core.compaction import summary_line
    from runner.core.ledger import Summary, dump_entry

    one, two = pair
    written: list = []
    v = None
    summaries: list[Summary] = []
    for n in range(1, 21):
        v = _write(one, _session(n), v)
        written += _session(n)
        ledger, version = two.read("p")
        assert version == v and len(ledger) <= 12
        entries = list(ledger)
        if isinstance(entries[0], Summary):
            if not summaries or entries[0] != summaries[-1]:
                summaries.append(entries[0])
            summary = entries[0]
            assert summary.entries + len(entries) - 1 == len(written)
            assert [dump_entry(e) for e in entries[1:]] == [dump_entry(e) for e in written[summary.entries:]]
        assert folded(ledger) == fold(entries) == fold(written)  # snapshot, entries, and the uncompacted ledger
    assert len(summaries) >= 2, "twenty sessions compact more than once"
    first, last = summaries[0], summaries[-1]
    assert last.entries > first.entries and first.previous and last.previous and first.previous != last.previous
    gone = written[:last.entries]
    records = [e for e in gone if e.type == "session"]
    assert (last.sessions, last.first_session, last.last_session) == (len(records), 1, records[-1].n)
    assert last.outcomes == {o: sum(r.outcome.value == o for r in records) for o in {r.outcome.value for r in records}}
    assert last.credited == tuple(c for r in records if r.outcome.value == "Advanced" for c in r.advanced)
    assert last.credited_count == len(last.credited) and last.tokens == sum(r.tokens for r in records)
    assert last.cost_known and last.cost_usd == pytest.approx(0.5 * len(records)) and last.began == written[0].started_at
    assert summary_line(last).startswith(f"sessions 1-{records[-1].n} compacted ({len(records)} sessions: ")
    state = fold(written)
    assert (state.sessions, state.tokens) == (20, sum(100 * n for n in range(1, 21)))


def test_a_write_on_the_version_before_a_compaction_conflicts_and_lands_nothing(pair, compacting):
    """Compaction is a write like any other: a handle that read before it and writes after it loses the
    compare-and-swap, whatever it writes; once it reads again its write lands on the compacted ledger."""
    from runner.core.ledger import Summary

    one, two = pair
    v = None
    for n in range(1, 7):  # 12 entries: the next session compacts
        v = _write(one, _session(n), v)
    _, seen = two.read("p")
    compacted = _write(one, _session(7), v)
    with pytest.raises(StateConflict):
        two.append("p", [parked("late")], seen)
    ledger, version = two.read("p")
    assert version == compacted and isinstance(ledger[0], Summary) and all(
        getattr(e, "reason", "") != "late" for e in ledger)
    after = two.append("p", [parked("after")], version)
    ledger, version = one.read("p")
    assert version == after and ledger[-1].reason == "after" and folded(ledger).sessions == 7
    assert folded(ledger).parked and fold(list(ledger)) == folded(ledger)


def test_a_short_ledger_is_never_compacted(pair, compacting):
    """At the limit exactly (12 entries) nothing is summarised: every entry reads back as written."""
    one, two = pair
    v = None
    for n in range(1, 7):
        v = _write(one, _session(n), v)
    entries = list(two.read("p")[0])
    assert len(entries) == 12 and all(e.type != "summary" for e in entries)
