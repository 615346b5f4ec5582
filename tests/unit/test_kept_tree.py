"""The walk that proves a kept gates' tree (runner.adapters.sandbox.kept_tree), on a plain folder as the
user running the tests: recorded right after it is written, every change made after that (by any means a
process without privileges has) is moved aside, nothing else is, and nothing is followed."""

from __future__ import annotations

import marshal
import os
import time
from pathlib import Path

import pytest

from runner.adapters.sandbox import kept_tree


@pytest.fixture(params=["find", "python"])
def lister(request, monkeypatch):
    """Every walk below runs with GNU find listing the tree, and again with the walk in Python that stands in
    where there is no find."""
    if request.param == "python":
        monkeypatch.setattr(kept_tree, "_find", [None])
    else:
        assert kept_tree._find_program() is not None, "GNU find (findutils) is not on this machine's PATH"
    return request.param


@pytest.fixture
def tree(tmp_path, lister):
    root = tmp_path / "area" / "gates"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "src" / "pkg" / "a.py").write_text("a = 1\n")
    (root / "tests" / "test_a.py").write_text("def test(): pass\n")
    (root / "README.md").write_text("readme\n")
    os.symlink("README.md", root / "link")  # a tracked link: kept as a link
    yield from _recorded(root)


def _recorded(root: Path):
    """`root` recorded as a checkout just written (its clock settled), with the area's trash beside it."""
    trash = root.parent / ".trash"
    trash.mkdir(mode=0o700)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    tfd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY)
    afd = os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY)
    entries = kept_tree.record(fd, None)
    kept_tree.settle(afd, kept_tree.newest_ctime(entries))
    yield root, fd, tfd, entries, trash
    for f in (fd, tfd, afd):
        os.close(f)


def _prune(tree, limit=100):
    root, fd, tfd, entries, trash = tree
    return kept_tree.prune(fd, entries, tfd, limit)


def _odd_tree(root: Path) -> None:
    """Every kind of entry an unprivileged process makes, with names and times find and Python could print apart."""
    (root / "sub dir" / "deeper").mkdir(parents=True)
    (root / "sub dir" / "a file").write_text("x")
    (root / "new\nline").write_text("y")
    (root / os.fsdecode(b"not-utf8-\xff")).write_text("z")
    os.symlink("a file", root / "sub dir" / "link")
    os.mkfifo(root / "fifo")
    os.link(root / "sub dir" / "a file", root / "hard")
    (root / "old").write_text("")
    os.utime(root / "old", ns=(0, -1_500_000_001))  # before 1970: find prints a timespec's seconds as they are
    (root / "exact").write_text("")
    os.utime(root / "exact", ns=(0, 1_700_000_000_000_000_000))
    (root / "odd-mode").write_text("")
    os.chmod(root / "odd-mode", 0o4751)
    os.chmod(root / "sub dir" / "deeper", 0o1700)


def _by_find(fd: int, split=None) -> list[bytes]:
    find = kept_tree._find_program()
    assert find is not None, "GNU find (findutils) is not on this machine's PATH"
    out: list[bytes] = []
    assert kept_tree._find_listing(find, fd, None, split, out.extend)
    return out


def test_find_and_the_walk_in_python_list_a_tree_alike(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    _odd_tree(root)
    find = kept_tree._find_program()
    assert find is not None, "GNU find (findutils) is not on this machine's PATH"
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        by_find = _by_find(fd)
        by_python = kept_tree._python_listing(fd, None)
        assert by_find[0] == by_python[0] == kept_tree.line(os.fstat(fd), "")
        assert sorted(by_find) == sorted(by_python) and len(by_find) == 12
        assert {kept_tree._rel(ln) for ln in by_find} == {
            "", "sub dir", "sub dir/deeper", "sub dir/a file", "sub dir/link", "new\nline",
            os.fsdecode(b"not-utf8-\xff"), "fifo", "hard", "old", "exact", "odd-mode"}
        entries = kept_tree.record(fd, None)  # recorded as find lists it, proven as find lists it: all kept
        trash = tmp_path / "trash"
        trash.mkdir()
        tfd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert kept_tree.prune(fd, entries, tfd, 0) == set() and len(entries) == 12
        finally:
            os.close(tfd)
    finally:
        os.close(fd)


def test_a_listing_past_its_bound_stops_with_a_mismatch(tmp_path, lister):
    root = tmp_path / "t"
    root.mkdir()
    for n in range(50):
        (root / f"f{n}").write_text("")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert len(kept_tree.listing(fd, 51)) == 51
        with pytest.raises(kept_tree.Mismatch):
            kept_tree.listing(fd, 50)
    finally:
        os.close(fd)


def test_the_record_holds_every_entry_and_an_untouched_tree_passes_whole(tree):
    root, fd, tfd, entries, trash = tree
    assert set(entries) == {"", "src", "src/pkg", "src/pkg/a.py", "tests", "tests/test_a.py", "README.md", "link"}
    assert _prune(tree) == set()
    assert os.listdir(trash) == []


@pytest.mark.parametrize("change", [
    "rewrite-same-size-utime", "chmod", "hardlink", "replace-by-link", "replace-by-fifo", "touch-back"])
def test_a_changed_file_is_moved_aside_and_reported_gone(tree, change):
    root, fd, tfd, entries, trash = tree
    path = root / "tests" / "test_a.py"
    st = os.stat(path)
    if change == "rewrite-same-size-utime":
        path.write_text("def test(): 1/0\n"[:st.st_size].ljust(st.st_size))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    elif change == "chmod":
        path.chmod(0o666)
    elif change == "hardlink":
        os.link(path, root.parent / "elsewhere")
    elif change == "replace-by-link":
        path.unlink()
        os.symlink(root.parent / "elsewhere", path)
    elif change == "replace-by-fifo":
        path.unlink()
        os.mkfifo(path)
    elif change == "touch-back":  # a new file at the old name, its times set back to the old ones
        path.unlink()
        path.write_text("def test(): pass\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _prune(tree) == {"tests/test_a.py"}
    assert os.listdir(root / "tests") == []
    assert len(os.listdir(trash)) == 1
    assert "tests/test_a.py" not in entries and "tests" in entries


def test_untracked_entries_go_and_tracked_ones_stay(tree):
    root, fd, tfd, entries, trash = tree
    (root / "tests" / "conftest.py").write_text("import os\n")
    (root / "sitecustomize.py").write_text("import os\n")
    (root / ".venv" / "lib").mkdir(parents=True)
    os.symlink("/etc", root / ".venv" / "etc")
    assert _prune(tree) == set()
    assert sorted(os.listdir(root)) == ["README.md", "link", "src", "tests"]
    assert os.listdir(root / "tests") == ["test_a.py"]
    assert len(os.listdir(trash)) == 3


def test_a_folder_replaced_by_a_link_is_moved_aside_never_entered(tree, tmp_path):
    root, fd, tfd, entries, trash = tree
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the judge's to touch\n")
    os.rename(root / "src", tmp_path / "old-src")
    os.symlink(outside, root / "src")
    gone = _prune(tree)
    assert gone == {"src", "src/pkg", "src/pkg/a.py"}
    assert (outside / "keep.txt").read_text() == "not the judge's to touch\n"  # not followed, not moved
    assert not os.path.lexists(root / "src")


def test_a_folder_swapped_for_another_is_moved_aside(tree, tmp_path):
    root, fd, tfd, entries, trash = tree
    os.rename(root / "tests", tmp_path / "old-tests")
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("def test(): pass\n")
    assert _prune(tree) == {"tests", "tests/test_a.py"}


def test_a_changed_root_or_too_many_differences_refuse_reuse(tree):
    root, fd, tfd, entries, trash = tree
    for n in range(5):
        (root / f"new-{n}").write_text("x")
    with pytest.raises(kept_tree.Mismatch):
        _prune(tree, limit=3)
    os.chmod(root, 0o777)
    with pytest.raises(kept_tree.Mismatch):
        _prune(tree)


def test_an_acl_like_attribute_on_a_folder_is_seen(tree):
    root, fd, tfd, entries, trash = tree
    try:
        os.setxattr(root / "tests", "user.plan-runner-test", b"1")
    except OSError:
        pytest.skip("no user extended attributes on this file system")
    assert _prune(tree) == {"tests", "tests/test_a.py"}


def test_the_record_is_taken_away_when_read_and_refused_when_forged(tmp_path):
    path = tmp_path / kept_tree.RECORD
    kept_tree.save(path, sha="a" * 40, uid=os.geteuid(), entries={"": (1, 2, 3, 4, ())})
    assert kept_tree.load(path)["sha"] == "a" * 40
    assert not path.exists()  # a checkout cut short leaves no record: the next one is fresh
    kept_tree.save(path, sha="a" * 40, uid=os.geteuid(), entries={})
    path.chmod(0o644)
    assert kept_tree.load(path) is None  # readable (or writable) by others: not plan-runner's own record
    path.write_bytes(b"not a record")
    path.chmod(0o600)
    assert kept_tree.load(path) is None


def test_a_record_of_many_chunks_reads_back_whole_and_an_older_one_reads_as_none(tmp_path):
    path = tmp_path / kept_tree.RECORD
    entries = {f"d/f{i:05d}": kept_tree.file_key(os.stat(tmp_path), f"d/f{i:05d}")
               for i in range(3 * kept_tree._CHUNK + 7)}
    entries[""] = (kept_tree.line(os.stat(tmp_path), ""), ())
    kept_tree.save(path, sha="b" * 40, uid=os.geteuid(), entries=entries)
    rec = kept_tree.load(path)
    assert rec["entries"] == entries and list(rec["entries"]) == list(entries)
    kept_tree.save(path, sha="b" * 40, uid=os.geteuid(), entries=entries)
    path.write_bytes(path.read_bytes()[:-9])  # cut short
    assert kept_tree.load(path) is None
    # the format before frames: one marshal object, whose first bytes read as a length far past the file's end
    path.write_bytes(marshal.dumps({"v": 2, "sha": "b" * 40, "uid": os.geteuid(), "entries": entries}))
    path.chmod(0o600)
    assert kept_tree.load(path) is None and not path.exists()
    # a record of packed keys (version 3, in frames) reads as none: the next checkout is fresh
    kept_tree._put(path, {"v": 3, "sha": "b" * 40, "uid": os.geteuid(), "entries": {"": (1, 2, 3, 4, ())}})
    path.chmod(0o600)
    assert kept_tree.load(path) is None and not path.exists()


def test_settle_waits_until_the_file_systems_clock_has_moved(tmp_path, monkeypatch):
    monkeypatch.setattr(kept_tree, "_SETTLE_LIMIT_S", 0.2)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        probe = tmp_path / "p"
        probe.write_text("x")
        newest = os.stat(probe).st_ctime_ns
        kept_tree.settle(fd, newest)
        probe.write_text("y")  # any change from now on: another ctime
        assert os.stat(probe).st_ctime_ns > newest
        start = time.monotonic()
        with pytest.raises(kept_tree.Mismatch):
            kept_tree.settle(fd, time.time_ns() + 10 * 10**9)  # a clock that would have to run 10 s ahead
        assert time.monotonic() - start < 2
    finally:
        os.close(fd)


def test_drop_takes_a_folder_with_everything_below_it(tree):
    root, fd, tfd, entries, trash = tree
    kept_tree.drop(entries, {"src", "README.md"})
    assert set(entries) == {"", "tests", "tests/test_a.py", "link"}


def test_held_open_finds_a_descriptor_of_another_process(tree):
    import subprocess
    import sys
    root, fd, tfd, entries, trash = tree
    inodes = kept_tree.inodes(entries)
    dev = os.fstat(fd).st_dev
    assert kept_tree.held_open(dev, inodes) is None
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); print(1, flush=True); "
                             "time.sleep(30)", str(root / "README.md")], stdout=subprocess.PIPE)
    try:
        proc.stdout.readline()
        assert kept_tree.held_open(dev, inodes) == proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.fixture
def wide(tmp_path, monkeypatch):
    """A tree wide enough to be listed by three finds side by side (its record's threshold lowered): ten folders
    under `pkg`, names with what find's patterns and paths could trip on."""
    monkeypatch.setattr(kept_tree, "_SPLIT_FROM", 0)
    root = tmp_path / "area" / "gates"
    names = [f"d{n}" for n in range(7)] + ["with space", "glob*[x]?", "new\nline"]
    for name in names:
        (root / "pkg" / name / "sub").mkdir(parents=True)
        (root / "pkg" / name / "f.py").write_text(name)
        (root / "pkg" / name / "sub" / "g.py").write_text(name)
    (root / "top.txt").write_text("top")
    yield from _recorded(root)


def test_three_finds_side_by_side_list_what_one_lists(wide):
    root, fd, tfd, entries, trash = wide
    split = kept_tree._split(entries)
    assert split is not None and split[0] == 2 and len(split[1]) + len(split[2]) == 10
    one = _by_find(fd)
    three = _by_find(fd, split)
    assert three[0] == one[0] and sorted(three) == sorted(one) and len(one) == 2 + 1 + 10 * 4


def test_changes_are_found_across_three_finds(wide, tmp_path):
    root, fd, tfd, entries, trash = wide
    (root / "pkg" / "d1" / "sub" / "conftest.py").write_text("planted")  # below a folder the second find lists
    (root / "pkg" / "glob*[x]?" / "f.py").write_text("rewritten")  # below one the third lists
    os.rename(root / "pkg" / "d2", tmp_path / "d2")  # a recorded folder at the split's depth: a link now
    os.symlink(tmp_path / "d2", root / "pkg" / "d2")
    (root / "pkg" / "new" / "deep").mkdir(parents=True)  # a folder at that depth the record does not hold
    (root / "pkg" / "new" / "deep" / "x.py").write_text("x")
    gone = kept_tree.prune(fd, entries, tfd, 100)
    assert gone == {"pkg/glob*[x]?/f.py", "pkg/d2", "pkg/d2/f.py", "pkg/d2/sub", "pkg/d2/sub/g.py"}
    assert sorted(os.listdir(root / "pkg")) == sorted(["d0", "d1", "d3", "d4", "d5", "d6", "with space", "glob*[x]?",
                                                       "new\nline"])
    assert os.listdir(root / "pkg" / "d1" / "sub") == ["g.py"] and len(os.listdir(trash)) == 4
    assert os.listdir(tmp_path / "d2") != []  # the link moved aside, never followed
    os.rename(root / "pkg" / "d3", tmp_path / "d3")  # a folder a find starts in, gone: listed by the walk in Python
    assert kept_tree.prune(fd, entries, tfd, 100) == {"pkg/d3", "pkg/d3/f.py", "pkg/d3/sub", "pkg/d3/sub/g.py"}
