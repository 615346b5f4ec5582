"""Workflow protection by resolved path (issue 22): `.github/workflows` (or `.github`) committed as a
symbolic link to another folder is a change to every protected path under it, and the revert undoes it."""

from __future__ import annotations

import os
from pathlib import Path

import git
import pytest

from runner.adapters.git.work import commit_files, files_changed, protected_paths_changed, read_file_at
from runner.adapters.judge.collect import PROTECTED_PATHS
from tests.git_repos import init_repo, write

pytestmark = pytest.mark.integration


def _repo(tmp_path: Path, files: dict[str, str]) -> git.Repo:
    return init_repo(tmp_path / "w", {"README.md": "hi\n", **files}, name="Agent", email="agent@example.com")


def _link(repo: git.Repo, link: str, target: str, files: dict[str, str]) -> str:
    root = Path(repo.working_tree_dir)
    write(root, files)
    if (root / link).is_dir() and not (root / link).is_symlink():
        repo.git.rm("-r", "-q", "--", link)
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, root / link)
    repo.git.add("--all")
    repo.git.commit("-m", "link")
    return repo.head.commit.hexsha


@pytest.mark.parametrize("link,target", [(".github/workflows", "../evil"), (".github", "evil")])
@pytest.mark.parametrize("had_workflows", [True, False])
def test_a_symlinked_workflows_folder_is_a_protected_change_and_is_reverted(tmp_path, link, target, had_workflows):
    base_files = {".github/workflows/ci.yml": "on: push\n"} if had_workflows else {}
    with _repo(tmp_path, base_files) as repo:
        root = Path(repo.working_tree_dir)
        base = repo.head.commit.hexsha
        evil = {"evil/evil.yml": "on: push\njobs: {}\n", "evil/workflows/evil.yml": "on: push\n"}
        head = _link(repo, link, target, evil)
        assert ".github/workflows/" in protected_paths_changed(root, base, head, PROTECTED_PATHS)
        changed = files_changed(root, base, head, PROTECTED_PATHS)
        assert link in changed and changed[0] == link
        new = commit_files(root, {p: read_file_at(root, base, p) for p in changed}, "revert")
        assert protected_paths_changed(root, base, new, PROTECTED_PATHS) == []
        assert not (root / link).is_symlink()
        assert read_file_at(root, new, ".github/workflows/ci.yml") == ("on: push\n" if had_workflows else None)


def test_an_unrelated_symlink_is_not_a_protected_change(tmp_path):
    """The control: a symlink elsewhere (even named like a protected folder, deeper) changes nothing protected."""
    with _repo(tmp_path, {}) as repo:
        root = Path(repo.working_tree_dir)
        base = repo.head.commit.hexsha
        head = _link(repo, "docs/.github", "../evil", {"evil/x": "x\n"})
        assert protected_paths_changed(root, base, head, PROTECTED_PATHS) == []
        assert files_changed(root, base, head, PROTECTED_PATHS) == []
