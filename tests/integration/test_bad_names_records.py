"""File names that are not UTF-8 are representable in every record (issue 22): the judge keeps the raw name
to restore the file, and the evidence holds a lossless escaped form, so the session is recorded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.adapters.git.work import commit_files, deleted_files, display_path, files_changed, read_file_at
from runner.adapters.judge.collect import PROTECTED_PATHS
from tests.core_builders import evidence
from tests.git_repos import init_repo

pytestmark = pytest.mark.integration


def test_an_invalid_utf8_workflow_name_is_restored_and_recorded(tmp_path):
    with init_repo(tmp_path / "w", {"README.md": "hi\n", "tests/test_\xe9.py": "x\n"}, name="A",
                   email="a@example.com") as repo:
        root = Path(repo.working_tree_dir)
        base = repo.head.commit.hexsha
        os.makedirs(root / ".github" / "workflows", exist_ok=True)
        raw = os.fsencode(root / ".github" / "workflows") + b"/evil\xff\x1b[31m.yml"
        with open(raw, "wb") as fh:
            fh.write(b"on: push\n")
        os.remove(root / "tests" / "test_\xe9.py")
        repo.git.add("--all")
        repo.git.commit("-m", "bad names")
        head = repo.head.commit.hexsha
        (changed,) = files_changed(root, base, head, PROTECTED_PATHS)
        shown = display_path(changed)
        assert shown == ".github/workflows/evil\\xff\x1b[31m.yml"
        ev = evidence(tampering=(f"{shown} (workflow/action files are not the agent's to change)",),
                      deleted_tests=tuple(display_path(p) for p in deleted_files(root, base, head)))
        assert type(ev).model_validate_json(ev.model_dump_json()) == ev  # the record serialises
        new = commit_files(root, {changed: read_file_at(root, base, changed)}, "revert")
        assert files_changed(root, base, new, PROTECTED_PATHS) == []
        with pytest.raises(Exception):  # the control: the raw name, as git gave it, cannot be serialised
            evidence(tampering=(changed,)).model_dump_json()
