"""The set-up cache kept in place from one session to the next (runner.adapters.sandbox.agent_clone.KeptSetup):
skipped only while every restored entry is provably what the judge restored from the same archive file, whatever
the agent's code did with utime. Each change below must make `intact` refuse; a KeptSetup that trusts the tree
(e.g. `intact` returning True once a record exists) fails every case."""

from __future__ import annotations

import os
import time

import pytest

from runner.adapters.judge import untar
from runner.adapters.sandbox import agent_clone, kept_tree
from runner.adapters.sandbox.identity import Identity

ROOTS = (".venv", "src/pkg/_version.py")


@pytest.fixture(params=["find", "python"])
def kept(request, tmp_path, monkeypatch):
    """A restored cache and its record; `intact` lists it by GNU find (kept_tree.listed_under), or by the walk in
    Python where there is no find."""
    if request.param == "python":
        monkeypatch.setattr(kept_tree, "_find", [None])
    else:
        assert kept_tree._find_program() is not None, "GNU find (findutils) is not on this machine's PATH"
    monkeypatch.setenv("PLAN_RUNNER_SANDBOX_ROOT", str(tmp_path / "sandbox"))
    (tmp_path / "sandbox").mkdir()
    built = tmp_path / "built"
    for rel, text in {".venv/bin/python": "#!/bin/sh\n", ".venv/lib/site.py": "x = 1\n",
                      "src/pkg/_version.py": "v = '1'\n"}.items():
        (built / rel).parent.mkdir(parents=True, exist_ok=True)
        (built / rel).write_text(text)
    (built / ".venv/include").mkdir()  # an empty folder: only its identity says it is the restored one
    archive = tmp_path / "cache.tar"
    fd = os.open(built, os.O_RDONLY | os.O_DIRECTORY)
    try:
        untar.write(archive, built, ROOTS, source_fd=fd)
    finally:
        os.close(fd)
    area = agent_clone.area_for(tmp_path / "repo", "p")
    agent_clone._own_root(area)
    tree = area.gates
    (tree / "src/pkg").mkdir(parents=True)
    (tree / "src/pkg/__init__.py").write_text("")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    keep = agent_clone.KeptSetup(area, Identity(), scratch)
    untar.extract(archive, tree, ROOTS)
    keep.recorded(archive, tree, ROOTS)
    return keep, archive, tree


def test_an_untouched_restore_is_kept_and_stays_kept(kept):
    keep, archive, tree = kept
    assert keep.intact(archive, tree, ROOTS)
    assert keep.intact(archive, tree, ROOTS)  # the record is put back for the session after


def test_a_folder_whose_times_alone_moved_is_kept(kept):
    """A file added to a folder of the cache and removed again: the folder's times moved, nothing else did."""
    keep, archive, tree = kept
    time.sleep(0.01)
    (tree / ".venv/lib/tmp.py").write_text("x")
    (tree / ".venv/lib/tmp.py").unlink()
    assert keep.intact(archive, tree, ROOTS)
    assert keep.intact(archive, tree, ROOTS)


def _set_attribute(path):
    try:
        os.setxattr(path, "user.plan_runner_test", b"1")
    except OSError as exc:
        pytest.fail(f"this file system takes no user attribute on {path}: {exc}")


def _rewrite_keeping_times(path):
    st = os.stat(path)
    path.write_text("x = 2\n")  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace(path):
    text = path.read_text()
    path.unlink()
    path.write_text(text)


@pytest.mark.parametrize("change", [
    pytest.param(lambda t: _rewrite_keeping_times(t / ".venv/lib/site.py"), id="rewritten, mtime put back"),
    pytest.param(lambda t: (t / ".venv/lib/sitecustomize.py").write_text("import os\n"), id="a file added"),
    pytest.param(lambda t: (t / ".venv/lib/site.py").unlink(), id="a file removed"),
    pytest.param(lambda t: os.chmod(t / ".venv/bin/python", 0o777), id="chmod"),
    pytest.param(lambda t: _replace(t / "src/pkg/_version.py"), id="replaced by an equal file"),
    pytest.param(lambda t: os.link(t / ".venv/lib/site.py", t / "src/pkg/other.py"), id="hard-linked elsewhere"),
    pytest.param(lambda t: ((t / ".venv/lib/site.py").unlink(), os.symlink("/etc/passwd", t / ".venv/lib/site.py")),
                 id="a link in its place"),
    pytest.param(lambda t: _set_attribute(t / ".venv/lib"), id="an attribute on a folder"),
    pytest.param(lambda t: (_set_attribute(t / ".venv/lib"), (t / ".venv/lib/x").write_text(""),
                            (t / ".venv/lib/x").unlink()), id="an attribute on a folder whose times moved anyway"),
    pytest.param(lambda t: os.chmod(t / ".venv/include", 0o777), id="chmod of a folder"),
    pytest.param(lambda t: ((t / ".venv/include").rename(t / "old"), (t / ".venv/include").mkdir(0o755),
                            (t / "old").rmdir()), id="an empty folder made again"),  # (another inode: the old is there)
    pytest.param(lambda t: ((t / ".venv/lib").rename(t / ".venv/old"), (t / ".venv/lib").mkdir(),
                            os.rename(t / ".venv/old/site.py", t / ".venv/lib/site.py"), (t / ".venv/old").rmdir()),
                 id="a folder replaced by another with the same file"),
])
def test_any_change_to_a_restored_entry_restores_again(kept, change):
    keep, archive, tree = kept
    time.sleep(0.01)
    change(tree)
    assert not keep.intact(archive, tree, ROOTS)


def test_another_archive_file_restores_again(kept):
    keep, archive, tree = kept
    data = archive.read_bytes()
    archive.unlink()
    archive.write_bytes(data)  # the same bytes, another file: what the record vouched for is gone
    assert not keep.intact(archive, tree, ROOTS)


def test_no_record_no_keep(kept):
    keep, archive, tree = kept
    keep._record(tree).unlink()
    assert not keep.intact(archive, tree, ROOTS)
