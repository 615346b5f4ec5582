"""The secret scan reads everything that is pushed (issue 22): added lines, file names, commit messages,
author and committer names and emails, not only the added lines."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from runner.adapters.git.work import commits_carrying, paths_adding
from tests.git_repos import init_repo, write

pytestmark = pytest.mark.integration
SECRET = "sk-ant-api03-0123456789abcdef"


@pytest.fixture
def repo(tmp_path):
    with init_repo(tmp_path / "w", {"README.md": "hello\n"}, name="Agent", email="agent@example.com") as r:
        yield r


def _commit(repo: git.Repo, files: dict[str, str], message: str = "work", **env: str) -> str:
    write(Path(repo.working_tree_dir), files)
    repo.git.add("--", *files)
    repo.git.commit("-m", message, env=env or None)
    return repo.head.commit.hexsha


def _leaks(repo: git.Repo, base: str, head: str) -> list[str]:
    root = Path(repo.working_tree_dir)
    return paths_adding(root, base, head, [SECRET]) + commits_carrying(root, base, head, [SECRET])


@pytest.mark.parametrize("vector", ["file name", "empty file name", "message", "author name", "author email",
                                    "committer name", "committer email"])
def test_a_secret_in_anything_pushed_is_found(repo, vector):
    base = repo.head.commit.hexsha
    files = {f"notes-{SECRET}.txt": "clean\n"} if vector == "file name" else (
        {f"{SECRET}/empty": ""} if vector == "empty file name" else {"a.txt": "clean\n"})
    env = {"author name": {"GIT_AUTHOR_NAME": SECRET}, "author email": {"GIT_AUTHOR_EMAIL": f"{SECRET}@x.example"},
           "committer name": {"GIT_COMMITTER_NAME": SECRET},
           "committer email": {"GIT_COMMITTER_EMAIL": f"{SECRET}@x.example"}}.get(vector, {})
    head = _commit(repo, files, f"add notes\n\nkey: {SECRET}" if vector == "message" else "add notes", **env)
    assert _leaks(repo, base, head)


def test_clean_commits_leak_nothing(repo):
    """The control: the same commits without the value are not flagged."""
    base = repo.head.commit.hexsha
    head = _commit(repo, {"notes.txt": "clean\n", "dir/empty": ""}, "add notes\n\nno key here")
    assert _leaks(repo, base, head) == []
