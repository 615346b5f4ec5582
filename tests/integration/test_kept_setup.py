"""The set-up cache kept in place from one session to the next (runner.adapters.sandbox.agent_clone.KeptSetup):
skipped only while every restored entry is provably what the judge restored from the same archive file, whatever
the agent's code did with utime. Each change below must make `intact` refuse; a KeptSetup that trusts the tree
(e.g. `intact` returning True once a record exists) fails every case."""

from __future__ import annotations

import os
import time

import pytest

from runner.adapters.judge import untar
from runner.adapters.sandbox import agent_clone
from runner.adapters.sandbox.identity import Identity

ROOTS = (".venv", "src/pkg/_version.py")


@pytest.fixture
def kept(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_RUNNER_SANDBOX_ROOT", str(tmp_path / "sandbox"))
    (tmp_path / "sandbox").mkdir()
    built = tmp_path / "built"
    for rel, text in {".venv/bin/python": "#!/bin/sh\n", ".venv/lib/site.py": "x = 1\n",
                      "src/pkg/_version.py": "v = '1'\n"}.items():
        (built / rel).parent.mkdir(parents=True, exist_ok=True)
        (built / rel).write_text(text)
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
