"""The git state store: plumbing-only writes, compare-and-swap, remotes, corrupt ledgers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import git
import pytest

import runner
from runner.core.errors import PlanRunnerError, StateConflict
from runner.core.ledger import Finished, Parked
from runner.adapters.store.state import GitStateStore
from runner.core.ports import AppendOptions

from tests.git_repos import configure, fast_import_history, init_repo
from runner.adapters.store.state import ledger_text

pytestmark = pytest.mark.integration

AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
ROOT = Path(runner.__file__).resolve().parents[1]


def make_repo(path: Path, files: dict[str, str] | None = None) -> git.Repo:
    return init_repo(path, files or {"README.md": "hello\n"})


def make_remote_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A bare "remote" with one commit on main, cloned to two working copies."""
    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True, initial_branch="main").close()
    with make_repo(tmp_path / "seed") as seed:
        seed.create_remote("origin", str(bare)).push("main:main")
    clones = []
    for name in ("a", "b"):
        with configure(git.Repo.clone_from(str(bare), tmp_path / name)):
            clones.append(tmp_path / name)
    return bare, clones[0], clones[1]


def parked(reason: str) -> Parked:
    return Parked(at=AT, reason=reason)


def remote_state(bare: Path, plan_id: str = "p") -> str | None:
    with git.Repo(bare) as r:
        try:
            return r.git.rev_parse("--verify", "--quiet", f"refs/plan-runner/state/{plan_id}")
        except git.GitCommandError:
            return None


def test_empty_store_reads_nothing(tmp_path):
    """A repository without state refs has no plans and an empty ledger with version None."""
    make_repo(tmp_path / "w").close()
    store = GitStateStore(tmp_path / "w")
    assert store.read("p") == ([], None)
    assert store.plans() == []
    assert store.read_file("p", "t.jsonl") is None


def test_append_then_read_round_trips_entries_and_files(tmp_path):
    """Appended entries come back in order with the new version; files are kept per plan."""
    make_repo(tmp_path / "w").close()
    store = GitStateStore(tmp_path / "w")
    v1 = store.append("alpha", [parked("one")], None, files={"transcript.jsonl": b"\x00bin\n"})
    v2 = store.append("alpha", [parked("two"), Finished(at=AT, reason="done")], v1)
    vb = store.append("beta", [parked("b")], None)  # another plan: its own ref, its own version
    entries, version = store.read("alpha")
    assert [e.type for e in entries] == ["park", "park", "finish"]
    assert [getattr(e, "reason") for e in entries] == ["one", "two", "done"]
    assert version == v2 and store.read("beta")[1] == vb != v2
    assert store.read_file("alpha", "transcript.jsonl") == b"\x00bin\n"
    assert store.read_file("beta", "transcript.jsonl") is None
    assert store.plans() == ["alpha", "beta"]
    with git.Repo(tmp_path / "w") as r:
        text = ledger_text(tmp_path / "w", "refs/plan-runner/state/alpha")
        assert len(text.splitlines()) == 3
        assert r.commit("refs/plan-runner/state/alpha").parents[0].hexsha == v1
        assert r.commit("refs/plan-runner/state/beta").parents == ()


def test_state_writes_leave_work_tree_and_index_alone(tmp_path):
    """Appending never touches HEAD, the index, or the user's uncommitted files."""
    work = tmp_path / "w"
    repo = make_repo(work, {"README.md": "hello\n", "src/a.py": "x = 1\n"})
    (work / "src/a.py").write_text("x = 2\n")  # unstaged
    (work / "staged.txt").write_text("staged\n")
    repo.index.add(["staged.txt"])
    (work / "mine.txt").write_text("precious\n")  # untracked
    before = repo.git.status("--porcelain")
    head = repo.head.commit.hexsha
    index_bytes = (work / ".git" / "index").read_bytes()
    store = GitStateStore(work)
    v = store.append("p", [parked("x")], None, files={"t": b"t"})
    store.append("p", [parked("y")], v)
    assert repo.git.status("--porcelain") == before
    assert repo.head.commit.hexsha == head and repo.active_branch.name == "main"
    assert (work / ".git" / "index").read_bytes() == index_bytes
    assert (work / "mine.txt").read_text() == "precious\n"
    assert (work / "src/a.py").read_text() == "x = 2\n"
    assert not (work / "p").exists()
    repo.close()


def test_stale_version_is_a_conflict_and_writes_nothing(tmp_path):
    """An append with an outdated version raises StateConflict and leaves the ref where it was."""
    make_repo(tmp_path / "w").close()
    store = GitStateStore(tmp_path / "w")
    v1 = store.append("p", [parked("one")], None)
    v2 = store.append("p", [parked("two")], v1)
    with pytest.raises(StateConflict):
        store.append("p", [parked("late")], v1)
    with pytest.raises(StateConflict):
        store.append("p", [parked("late")], None)
    entries, version = store.read("p")
    assert version == v2 and [e.reason for e in entries] == ["one", "two"]


def test_corrupt_ledger_line_names_plan_line_and_fix(tmp_path):
    """A ledger line that is not an entry raises a PlanRunnerError with plan, line number and fix."""
    work = tmp_path / "w"
    make_repo(work).close()
    store = GitStateStore(work)
    v = store.append("p", [parked("ok")], None)
    with git.Repo(work) as r:
        good = ledger_text(work, v).rstrip("\n")
        (tmp_path / "ledger").write_text(good + "\n" + '{"type": "park", "reason": 3}\n')
        blob = r.git.hash_object("-w", str(tmp_path / "ledger"))
        (tmp_path / "tree").write_text(f"100644 blob {blob}\t000000.jsonl\n")
        with open(tmp_path / "tree", "rb") as fh:
            segments = r.git.mktree(istream=fh)
        (tmp_path / "tree").write_text(f"040000 tree {segments}\tledger\n")
        with open(tmp_path / "tree", "rb") as fh:
            plan_tree = r.git.mktree(istream=fh)
        commit = r.git.commit_tree(plan_tree, "-p", v, "-m", "hand edit")
        r.git.update_ref("refs/plan-runner/state/p", commit, v)
    with pytest.raises(PlanRunnerError) as info:
        store.read("p")
    err = info.value
    assert "'p'" in err.what and "line 2" in err.what
    assert "git show refs/plan-runner/state/p:ledger/000000.jsonl" in err.fix and "line 2" in err.fix
    assert not isinstance(err, StateConflict)


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".git", "x\ny", " p"])
def test_bad_plan_id_is_a_clear_error(tmp_path, bad):
    """A plan id that cannot be a ref name is rejected with a fix."""
    make_repo(tmp_path / "w").close()
    store = GitStateStore(tmp_path / "w")
    with pytest.raises(PlanRunnerError) as info:
        store.append(bad, [parked("x")], None)
    assert info.value.fix


def test_not_a_repository_is_a_clear_error(tmp_path):
    """Pointing the store at a folder that is not a git repository says so."""
    with pytest.raises(PlanRunnerError) as info:
        GitStateStore(tmp_path)
    assert "not a git repository" in info.value.what


def test_remote_round_trip_between_two_clones(tmp_path):
    """State absent on the remote reads empty; an append is pushed and another clone reads it."""
    bare, a, b = make_remote_pair(tmp_path)
    sa, sb = GitStateStore(a), GitStateStore(b)
    assert sa.read("p") == ([], None)
    v1 = sa.append("p", [parked("from a")], None, files={"t.txt": b"T"})
    assert remote_state(bare) == v1
    entries, version = sb.read("p")
    assert version == v1 and [e.reason for e in entries] == ["from a"]
    assert sb.read_file("p", "t.txt") == b"T"
    v2 = sb.append("p", [parked("from b")], v1)
    assert sa.read("p")[1] == v2 == remote_state(bare)
    assert sa.plans() == ["p"]


def test_lost_push_is_a_conflict_and_resets_local_ref_to_remote(tmp_path):
    """When another clone pushed first the push is rejected: StateConflict, local ref = remote's."""
    bare, a, b = make_remote_pair(tmp_path)
    sa, sb = GitStateStore(a), GitStateStore(b)
    v1 = sa.append("p", [parked("one")], None)
    assert sb.read("p")[1] == v1
    v2 = sa.append("p", [parked("a wins")], v1)
    with pytest.raises(StateConflict):
        sb.append("p", [parked("b loses")], v1)
    assert remote_state(bare) == v2
    with git.Repo(b) as rb:
        assert rb.git.rev_parse("refs/plan-runner/state/p") == v2
    entries, version = sb.read("p")
    assert version == v2 and [e.reason for e in entries] == ["one", "a wins"]


def test_first_writers_race_on_the_remote(tmp_path):
    """Two clones creating the state branch: the second push (expecting it absent) conflicts."""
    bare, a, b = make_remote_pair(tmp_path)
    sa, sb = GitStateStore(a), GitStateStore(b)
    assert sa.read("p")[1] is None and sb.read("p")[1] is None
    v = sa.append("p", [parked("a")], None)
    with pytest.raises(StateConflict):
        sb.append("p", [parked("b")], None)
    with git.Repo(b) as rb:
        assert rb.git.rev_parse("refs/plan-runner/state/p") == v


def test_unreachable_remote_is_not_a_conflict(tmp_path):
    """A remote that cannot be reached gives a PlanRunnerError with a fix, not StateConflict."""
    make_repo(tmp_path / "w").close()
    with git.Repo(tmp_path / "w") as r:
        r.create_remote("origin", str(tmp_path / "nowhere.git"))
    store = GitStateStore(tmp_path / "w")
    with pytest.raises(PlanRunnerError) as info:
        store.read("p")
    assert not isinstance(info.value, StateConflict) and info.value.fix


CHILD = textwrap.dedent("""
    import sys, time
    from datetime import datetime, timezone
    from pathlib import Path
    from runner.core.errors import StateConflict
    from runner.core.ledger import Parked
    from runner.adapters.store.state import GitStateStore
    repo, expected, go, name = sys.argv[1:5]
    store = GitStateStore(Path(repo))
    while not Path(go).exists():
        time.sleep(0.005)
    try:
        v = store.append("p", [Parked(at=datetime.now(timezone.utc), reason=name)], expected or None)
        print("won", v)
    except StateConflict:
        print("conflict")
""")


def race(repos: list[Path], expected: str | None, go: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(repo), expected or "", str(go), f"w{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i, repo in enumerate(repos)]
    go.write_text("go")
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(out.strip())
    return results


def test_concurrent_local_appends_exactly_one_wins(tmp_path):
    """Two processes appending to the same repository with the same version: one wins, one conflicts."""
    make_repo(tmp_path / "w").close()
    store = GitStateStore(tmp_path / "w")
    v1 = store.append("p", [parked("base")], None)
    for round_ in range(3):
        expected = store.read("p")[1]
        results = race([tmp_path / "w"] * 2, expected, tmp_path / f"go{round_}")
        assert sorted(r.split()[0] for r in results) == ["conflict", "won"], results
        winner = next(r.split()[1] for r in results if r.startswith("won"))
        entries, version = store.read("p")
        assert version == winner and len(entries) == round_ + 2
    assert v1


def test_concurrent_remote_appends_exactly_one_wins(tmp_path):
    """Two clones pushing concurrently with the same version: exactly one reaches the remote."""
    bare, a, b = make_remote_pair(tmp_path)
    v1 = GitStateStore(a).append("p", [parked("base")], None)
    for round_ in range(3):
        expected = GitStateStore(a).read("p")[1]
        assert GitStateStore(b).read("p")[1] == expected
        results = race([a, b], expected, tmp_path / f"go{round_}")
        assert sorted(r.split()[0] for r in results) == ["conflict", "won"], results
        winner = next(r.split()[1] for r in results if r.startswith("won"))
        assert remote_state(bare) == winner
        for clone in (a, b):
            entries, version = GitStateStore(clone).read("p")
            assert version == winner and len(entries) == round_ + 2
    assert v1


def add_loose_tip(repo: git.Repo) -> None:
    """One more commit on main, stored as loose objects outside the history's pack."""
    repo.git.checkout("-f", "main")
    (Path(repo.working_tree_dir) / "counter.txt").write_text("the tip, unlike any older line\n")
    repo.index.add(["counter.txt"])
    repo.index.commit("tip")


def cut_history_below_tip(repo: git.Repo) -> None:
    """Delete the pack holding all history below the loose tip.

    The tip stays readable; walking past it now fails, which is how these tests
    prove that an operation never walks the work history.
    """
    for pack in (Path(repo.git_dir) / "objects" / "pack").iterdir():
        pack.unlink()
    with pytest.raises(git.GitCommandError):
        repo.git.rev_list("--count", "main")


@pytest.mark.parametrize("with_remote", [False, True])
def test_store_never_touches_work_history(tmp_path, with_remote):
    """With 10,000 work commits cut off below the tip, every store operation still works."""
    work = tmp_path / "w"
    repo = configure(git.Repo.init(work, initial_branch="main"))
    fast_import_history(repo, 10_000)
    add_loose_tip(repo)
    if with_remote:
        bare = tmp_path / "remote.git"
        git.Repo.init(bare, bare=True, initial_branch="main").close()
        repo.create_remote("origin", str(bare))
        repo.git.push("origin", "main")
    store = GitStateStore(work)
    v = store.append("p", [parked("before")], None)
    cut_history_below_tip(repo)  # any walk of the work history would now fail
    entries, version = store.read("p")
    assert version == v
    v2 = store.append("p", [parked("after")], version, files={"t": b"x"})
    assert [e.reason for e in store.read("p")[0]] == ["before", "after"]
    assert store.plans() == ["p"] and store.read_file("p", "t") == b"x"
    if with_remote:
        assert remote_state(bare) == v2
    repo.close()


def test_read_does_not_walk_state_history(tmp_path):
    """Reads and appends need only the tip of the state branch: older state commits may be gone."""
    work = tmp_path / "w"
    make_repo(work).close()
    store = GitStateStore(work)
    first = store.append("p", [parked("0")], None)
    version = first
    for i in range(1, 4):
        version = store.append("p", [parked(str(i))], version)
    (work / ".git" / "objects" / first[:2] / first[2:]).unlink()
    entries, got = store.read("p")
    assert got == version and [e.reason for e in entries] == ["0", "1", "2", "3"]
    store.append("p", [parked("4")], version)
    assert len(store.read("p")[0]) == 5


def test_declined_push_leaves_no_local_state(tmp_path):
    """When the remote declines the state push, the error is not a conflict and the local ref is unmoved."""
    bare, a, _b = make_remote_pair(tmp_path)
    store = GitStateStore(a)
    v1 = store.append("p", [parked("one")], None)
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(PlanRunnerError) as info:
        store.append("p", [parked("two")], v1)
    assert not isinstance(info.value, StateConflict)
    with git.Repo(a) as ra:
        assert ra.git.rev_parse("refs/plan-runner/state/p") == v1
    assert store.read("p")[1] == v1 == remote_state(bare)


def test_objects_written_without_git_are_valid_git_objects_in_gits_order(tmp_path):
    """Names that sort differently as trees ("a" is compared as "a/") and nested files: `git fsck --strict`
    accepts every object the store wrote, and git itself reads the ledger and files back."""
    make_repo(tmp_path / "r").close()
    store = GitStateStore(tmp_path / "r", remote=None)
    for plan in ("a", "a-b", "a.b", "a0", "b"):
        version = store.append(plan, [parked(f"why {plan}")], None, files={"t.tar.gz": b"\x00\x01" * 10,
                                                                         "e.json": b"{}"})
        version = store.append(plan, [Finished(at=AT, reason="done")], version, files={"e.json": b'{"x": 1}'})
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "x.jsonl").write_text("x\n")
    (tmp_path / "d" / "sub.txt").write_text("y\n")
    store.append("a", [], store.read("a")[1], options=AppendOptions(dirs={"transcripts": tmp_path / "d"}))
    fsck = subprocess.run(["git", "fsck", "--strict", "--no-dangling"], cwd=tmp_path / "r",
                          capture_output=True, text=True)
    assert fsck.returncode == 0 and not fsck.stderr.strip(), fsck.stderr
    listed = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/plan-runner/state/"],
                            cwd=tmp_path / "r", capture_output=True, text=True, check=True).stdout.split()
    assert listed == [f"refs/plan-runner/state/{p}" for p in ("a", "a-b", "a.b", "a0", "b")]
    shown = subprocess.run(["git", "show", "refs/plan-runner/state/a.b:files/e.json"], cwd=tmp_path / "r",
                           capture_output=True, text=True, check=True).stdout
    assert shown == '{"x": 1}'
    entries, _ = store.read("a.b")
    assert [e.type for e in entries] == ["park", "finish"] and store.plans() == ["a", "a-b", "a.b", "a0", "b"]
    assert store.read_file("a", "t.tar.gz") == b"\x00\x01" * 10
    store.read_dir("a", "transcripts", tmp_path / "back")
    assert (tmp_path / "back/sub/x.jsonl").read_text() == "x\n" and (tmp_path / "back/sub.txt").read_text() == "y\n"


# --- snapshots of the folded state ------------------------------------------------------------------------


def _write_with_snapshot(store: GitStateStore, plan_id: str, entries: list, version: str | None) -> str:
    from runner.core.policy import fold, snapshot_json

    before = store.read(plan_id)[0] if version else []
    return store.append(plan_id, entries, version, options=AppendOptions(snapshot=snapshot_json(fold(list(before) + entries))))


def test_a_snapshot_written_with_the_ledger_is_used_without_parsing_the_ledger(tmp_path):
    """A read whose snapshot matches the ledger blob folds nothing: the state comes from the snapshot."""
    from runner.core.policy import fold, folded

    make_repo(tmp_path / "w").close()
    store = GitStateStore(tmp_path / "w", remote=None)
    v = _write_with_snapshot(store, "p", [parked("one")], None)
    v = _write_with_snapshot(store, "p", [parked("two"), Finished(at=AT, reason="done")], v)
    ledger, version = store.read("p")
    assert version == v and ledger.snapshot is not None and ledger._parsed == {}
    state = folded(ledger)
    assert ledger._parsed == {} and state == fold(list(ledger)) and state.finished


@pytest.mark.parametrize("damage", ["garbage", "other ledger", "other fold version"])
def test_a_snapshot_that_does_not_match_is_rebuilt_never_trusted(tmp_path, damage):
    """A snapshot that does not parse, was folded from another ledger, or by another fold version is ignored:
    the state is folded from the entries, which are all checked."""
    import json

    from runner.core.policy import fold, folded

    make_repo(tmp_path / "w").close()
    store = GitStateStore(tmp_path / "w", remote=None)
    v = _write_with_snapshot(store, "p", [parked("one"), Finished(at=AT, reason="done")], None)
    with git.Repo(tmp_path / "w") as r:
        snap = json.loads(r.git.show(f"{v}:snapshot.json"))
        if damage == "garbage":
            text = "{not json"
        elif damage == "other ledger":
            snap["state"]["finished"] = False
            snap["ledger"] = "0" * 40
            text = json.dumps(snap)
        else:
            snap["state"]["fold"] = -1
            snap["state"]["state"]["finished"] = False
            text = json.dumps(snap)
        (tmp_path / "snap").write_text(text)
        blob = r.git.hash_object("-w", str(tmp_path / "snap"))
        listing = [line for line in r.git.ls_tree(v).splitlines() if not line.endswith("\tsnapshot.json")]
        (tmp_path / "tree").write_text("\n".join(listing + [f"100644 blob {blob}\tsnapshot.json"]) + "\n")
        with open(tmp_path / "tree", "rb") as fh:
            tree = r.git.mktree(istream=fh)
        r.git.update_ref("refs/plan-runner/state/p", r.git.commit_tree(tree, "-p", v, "-m", "edit"), v)
    ledger, _ = store.read("p")
    assert (ledger.snapshot is None) == (damage != "other fold version")
    state = folded(ledger)
    assert state.finished and state == fold([parked("one"), Finished(at=AT, reason="done")])


# --- directories kept as trees --------------------------------------------------------------------------


def test_a_directory_is_kept_as_a_tree_and_an_unchanged_file_is_not_stored_again(tmp_path):
    """Transcripts go in as a directory and come back out; a file unchanged since it was restored keeps its blob,
    and only the changed one is new."""
    make_repo(tmp_path / "w").close()
    src = tmp_path / "t1"
    (src / "projects").mkdir(parents=True)
    (src / "projects" / "s.jsonl").write_bytes(b"conversation\n" * 1000)
    (src / "stream.log").write_bytes(b"session one\n")
    store = GitStateStore(tmp_path / "w", remote=None)
    v1 = store.append("p", [parked("1")], None, options=AppendOptions(dirs={"transcripts": src}))
    later = GitStateStore(tmp_path / "w", remote=None)  # the next session: another process
    dest = tmp_path / "t2"
    later.read_dir("p", "transcripts", dest)
    assert (dest / "projects" / "s.jsonl").read_bytes() == b"conversation\n" * 1000
    with (dest / "stream.log").open("ab") as log:
        log.write(b"session two\n")
    v2 = later.append("p", [parked("2")], v1, options=AppendOptions(dirs={"transcripts": dest}))
    with git.Repo(tmp_path / "w") as r:
        def blob(v, path):
            return r.git.rev_parse(f"{v}:transcripts/{path}")
        assert blob(v1, "projects/s.jsonl") == blob(v2, "projects/s.jsonl")
        assert blob(v1, "stream.log") != blob(v2, "stream.log")
        assert r.git.show(f"{v2}:transcripts/stream.log") == "session one\nsession two"


def test_a_directory_over_its_bound_drops_the_oldest_files_then_cuts_the_head_of_the_newest(tmp_path):
    """`bound_dir` keeps the total under the limit: least recently written files go first, then the newest file
    keeps its last lines."""
    from runner.adapters.store.state import bound_dir

    root = tmp_path / "d"
    root.mkdir()
    old, new = root / "old.jsonl", root / "new.log"
    old.write_bytes(b"o" * 50 + b"\n")
    os.utime(old, ns=(1, 1))
    new.write_bytes(b"".join(b"line %03d\n" % i for i in range(30)))
    bound_dir(root, limit=100)
    assert not old.exists()
    kept = new.read_bytes()
    assert len(kept) <= 100 and kept.endswith(b"line 029\n") and kept.startswith(b"line ")


def _mktree(repo: Path, text: str) -> str:
    return subprocess.run(["git", "mktree"], cwd=repo, input=text, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_listing_plans_fetches_every_plan_once_and_the_reads_after_it_fetch_nothing(tmp_path):
    """`plans()` (status, tick) brings every plan's state ref in one fetch; one read per plan after it needs none,
    and sees what the other clone wrote."""
    bare, a, b = make_remote_pair(tmp_path)
    writer = GitStateStore(a)
    for plan_id in ("p", "q", "r"):
        writer.append(plan_id, [parked(plan_id)], None)
    reader = GitStateStore(b)
    assert reader.plans() == ["p", "q", "r"] and reader.network_ops == 1
    for plan_id in ("p", "q", "r"):
        entries, version = reader.read(plan_id)
        assert [e.reason for e in entries] == [plan_id] and version == remote_state(bare, plan_id)
    assert reader.network_ops == 1
    reader.read("p")  # a second read of a plan fetches again: it may have moved since
    assert reader.network_ops == 2


def test_a_big_appended_log_is_stored_in_blocks_and_only_its_new_blocks_are_new(tmp_path):
    """A log over the block threshold goes in as blocks of whole lines cut by content: appending to it, or cutting
    its head, keeps the earlier blocks (same blobs), the restored file is byte for byte the log, and a secret in
    the new lines is redacted in what is stored."""
    import runner.adapters.store.dirs as st

    make_repo(tmp_path / "w").close()
    src = tmp_path / "t1"
    src.mkdir()
    lines = [b'{"type": "assistant", "n": %d, "text": "%s"}\n' % (i, b"w" * (i % 97)) for i in range(60_000)]
    (src / "stream.log").write_bytes(b"".join(lines[:40_000]))
    store = GitStateStore(tmp_path / "w", remote=None)
    v1 = store.append("p", [parked("1")], None, options=AppendOptions(dirs={"transcripts": src}))
    later = GitStateStore(tmp_path / "w", remote=None)
    dest = tmp_path / "t2"
    later.read_dir("p", "transcripts", dest)
    assert (dest / "stream.log").read_bytes() == b"".join(lines[:40_000])
    with (dest / "stream.log").open("ab") as log:
        log.write(b"".join(lines[40_000:]) + b'{"key": "sk-ant-SECRETVALUE"}\n')
    v2 = later.append("p", [parked("2")], v1, options=AppendOptions(dirs={"transcripts": dest}, redact=(b"sk-ant-SECRETVALUE",)))

    def blocks(v):
        with git.Repo(tmp_path / "w") as r:
            listing = r.git.ls_tree(f"{v}:transcripts/stream.log{st.BLOCKS_SUFFIX}").splitlines()
        return [line.split()[2] for line in listing]
    b1, b2 = blocks(v1), blocks(v2)
    assert len(b1) >= 3 and b2[: len(b1) - 1] == b1[:-1]  # all but the last (then open) block are shared
    again = tmp_path / "t3"
    GitStateStore(tmp_path / "w", remote=None).read_dir("p", "transcripts", again)
    assert (again / "stream.log").read_bytes() == b"".join(lines) + b'{"key": "***"}\n'
    st._keep_tail(again / "stream.log", (again / "stream.log").stat().st_size - 100_000)  # the bound cuts the head
    cut = GitStateStore(tmp_path / "w", remote=None)
    cut.read_dir("p", "transcripts", tmp_path / "t4")
    st._keep_tail(tmp_path / "t4" / "stream.log", (tmp_path / "t4" / "stream.log").stat().st_size - 100_000)
    v3 = cut.append("p", [parked("3")], v2, options=AppendOptions(dirs={"transcripts": tmp_path / "t4"}))
    b3 = blocks(v3)
    assert len(set(b3) & set(b2)) >= len(b2) - 2  # only the blocks around the cut are new


# --- the ledger in segments ------------------------------------------------------------------------------------


def test_segments_fill_up_and_only_the_last_one_is_rewritten(tmp_path, monkeypatch):
    """At the boundary a full segment stays as it is (same blob) and the next entry opens a new one; a read
    that trusts the snapshot loads only the last segment, and every entry is still there when asked for."""
    import runner.adapters.store.layout as state

    monkeypatch.setattr(state, "SEGMENT_ENTRIES", 3)
    work = tmp_path / "w"
    make_repo(work).close()
    store = GitStateStore(work, remote=None)
    v = None
    trees = []
    for i in range(7):
        v = _write_with_snapshot(store, "p", [parked(f"e{i}")], v)
        trees.append(subprocess.run(["git", "ls-tree", f"{v}:ledger"], cwd=work, capture_output=True, text=True,
                                    check=True).stdout.splitlines())
    assert [len(t) for t in trees] == [1, 1, 1, 2, 2, 2, 3]
    assert trees[3][0] == trees[2][0] == trees[6][0]  # segment 000000, full after e2, never rewritten
    assert trees[5][1] == trees[6][1]  # segment 000001 full after e5
    ledger, version = GitStateStore(work, remote=None).read("p")
    assert version == v and ledger.snapshot is not None and len(ledger) == 7
    assert list(ledger._segments) == []  # nothing parsed: the state is the snapshot's
    assert ledger[-1].reason == "e6" and list(ledger._segments) == [2]  # looking back reads the last segment only
    assert [e.reason for e in ledger] == [f"e{i}" for i in range(7)]


def test_a_corrupt_segment_is_named_in_a_clear_error(tmp_path, monkeypatch):
    """A hand-edited segment changes the ledger's tree, so the snapshot is not trusted: every segment is checked
    and the bad line is reported with its segment and line; a missing segment is reported too."""
    import runner.adapters.store.layout as state

    monkeypatch.setattr(state, "SEGMENT_ENTRIES", 2)
    work = tmp_path / "w"
    make_repo(work).close()
    store = GitStateStore(work, remote=None)
    v = None
    for i in range(5):
        v = _write_with_snapshot(store, "p", [parked(f"e{i}")], v)
    listing = subprocess.run(["git", "ls-tree", f"{v}:ledger"], cwd=work, capture_output=True, text=True,
                             check=True).stdout
    bad = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=work, input='{"type": "park", "reason": 3}\n',
                         capture_output=True, text=True, check=True).stdout.strip()

    def commit_with(segments_text: str) -> None:
        seg_tree = _mktree(work, segments_text)
        top = subprocess.run(["git", "ls-tree", v], cwd=work, capture_output=True, text=True, check=True).stdout
        top = "".join(line + "\n" for line in top.splitlines() if not line.endswith("\tledger"))
        tree = _mktree(work, top + f"040000 tree {seg_tree}\tledger\n")
        commit = subprocess.run(["git", "commit-tree", tree, "-p", v, "-m", "hand edit"], cwd=work,
                                capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["git", "update-ref", "refs/plan-runner/state/p", commit], cwd=work, check=True)

    lines = listing.splitlines()
    commit_with("\n".join([lines[0], f"100644 blob {bad}\t000001.jsonl", lines[2]]) + "\n")
    with pytest.raises(PlanRunnerError) as info:
        GitStateStore(work, remote=None).read("p")
    assert "line 1 of ledger/000001.jsonl" in info.value.what
    assert "git show refs/plan-runner/state/p:ledger/000001.jsonl" in info.value.fix
    commit_with("\n".join([lines[0], lines[2]]) + "\n")  # 000001 missing
    with pytest.raises(PlanRunnerError) as info:
        GitStateStore(work, remote=None).read("p")
    assert "corrupt" in info.value.what and "gap" in info.value.what
