"""Work-branch operations and git evidence, on real repositories."""

from __future__ import annotations

from pathlib import Path

import os

import git
import pytest

from runner.adapters.git import work as gitwork
from runner.core.errors import PlanRunnerError, StateConflict
from runner.adapters.git.work import (
    collect_commits,
    commit_files,
    commit_leftovers,
    ensure_work_branch,
    release_tree,
    is_dirty,
    paths_adding,
    protected_paths_changed,
    push_branch,
    read_file_at,
    tree_hash,
)

from tests.git_repos import configure, fast_import_history, init_repo, write

pytestmark = pytest.mark.integration

BOOKKEEPING = {"plans/p.md", "HANDOFF.md"}
AGENT = ("Agent", "agent@example.com")


def make_repo(path: Path) -> git.Repo:
    return init_repo(path, {"README.md": "hello\n", "plans/p.md": "- [ ] 1.1 a\n", ".gitignore": "*.log\n.venv/\n"},
                     name=AGENT[0], email=AGENT[1])


def commit(repo: git.Repo, files: dict[str, str], message: str) -> str:
    write(Path(repo.working_tree_dir), files)
    repo.git.add("--", *files)
    repo.git.commit("-m", message)
    return repo.head.commit.hexsha


@pytest.fixture
def repo(tmp_path):
    with make_repo(tmp_path / "w") as r:
        yield r


def path_of(repo: git.Repo) -> Path:
    return Path(repo.working_tree_dir)


# --- leftovers ---------------------------------------------------------------------------------


def test_clean_tree_makes_no_wip_commit(repo):
    """A clean work tree yields None and no new commit."""
    head = repo.head.commit.hexsha
    assert not is_dirty(path_of(repo))
    assert commit_leftovers(path_of(repo)) is None
    assert repo.head.commit.hexsha == head


def test_wip_commit_keeps_staged_unstaged_and_untracked_but_not_ignored(repo):
    """Staged, unstaged and untracked changes become one WIP commit; ignored files stay out."""
    root = path_of(repo)
    write(root, {"staged.py": "s = 1\n"})
    repo.git.add("staged.py")
    write(root, {"README.md": "changed\n", "new/untracked.txt": "u\n", "debug.log": "ignored\n",
                 ".venv/lib.py": "ignored\n"})
    (root / "plans/p.md").unlink()
    assert is_dirty(root)
    sha = commit_leftovers(root)
    assert sha == repo.head.commit.hexsha
    c = repo.head.commit
    assert c.message.startswith("plan-runner: WIP")
    assert "Plan-Runner-WIP: true" in c.message
    assert set(c.stats.files) == {"staged.py", "README.md", "new/untracked.txt", "plans/p.md"}
    assert not is_dirty(root)
    assert (root / "debug.log").exists()
    assert repo.git.status("--porcelain", "--ignored").count("!!") == 2
    [info] = collect_commits(root, c.parents[0].hexsha, sha, BOOKKEEPING)
    assert info.wip and info.sha == sha


def test_wip_commit_survives_a_failing_pre_commit_hook(repo):
    """A pre-commit hook that always fails cannot stop the leftovers from being saved."""
    hook = Path(repo.git_dir) / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    write(path_of(repo), {"work.py": "x = 1\n"})
    assert commit_leftovers(path_of(repo), message_prefix="custom WIP") is not None
    assert repo.head.commit.message.startswith("custom WIP")


# --- collect_commits ---------------------------------------------------------------------------


def test_collect_commits_marks_bookkeeping_only_commits(repo):
    """Commits touching only the plan or handoff do not count as work; mixed ones do."""
    root = path_of(repo)
    base = repo.head.commit.hexsha
    c1 = commit(repo, {"src/a.py": "a = 1\n"}, "real work")
    c2 = commit(repo, {"plans/p.md": "- [x] 1.1 a\n", "HANDOFF.md": "notes\n"}, "tick the box")
    c3 = commit(repo, {"plans/p.md": "- [ ] 1.1 a\n", "src/b.py": "b = 1\n"}, "mixed")
    repo.git.commit("--allow-empty", "-m", "empty")
    commits = collect_commits(root, base, "HEAD", BOOKKEEPING)
    assert [c.sha for c in commits][:3] == [c1, c2, c3]
    assert [c.counts_as_work for c in commits] == [True, False, True, False]
    assert commits[0].files == ("src/a.py",) and commits[0].summary == "real work"
    assert set(commits[1].files) == {"plans/p.md", "HANDOFF.md"}
    assert commits[0].author == "Agent <agent@example.com>"
    assert not any(c.wip for c in commits)
    assert collect_commits(root, c3, c3, BOOKKEEPING) == ()


def test_collect_commits_follows_first_parent_through_a_merge(repo):
    """A merge on the work branch counts with the files it brings in relative to its first parent."""
    root = path_of(repo)
    base = repo.head.commit.hexsha
    repo.git.checkout("-b", "side")
    side = commit(repo, {"side.py": "s\n"}, "side work")
    repo.git.checkout("main")
    mine = commit(repo, {"main.py": "m\n"}, "main work")
    repo.git.merge("--no-ff", "-m", "merge side", "side")
    commits = collect_commits(root, base, "HEAD", BOOKKEEPING)
    assert [c.sha for c in commits][:1] == [mine]
    assert side not in [c.sha for c in commits]
    merge = commits[-1]
    assert merge.summary == "merge side" and merge.files == ("side.py",) and merge.counts_as_work


def test_plan_runner_reverts_do_not_count_as_work(repo):
    """commit_files records a revert with its trailer; collect_commits does not count it as work."""
    root = path_of(repo)
    base = repo.head.commit.hexsha
    commit(repo, {".github/workflows/ci.yml": "evil\n", "plans/p.md": "- [x] 1.1 a\n"}, "agent")
    sha = commit_files(root, {".github/workflows/ci.yml": None, "plans/p.md": "- [ ] 1.1 a\n"},
                       "plan-runner: revert tampering")
    assert "Plan-Runner: revert" in repo.head.commit.message
    assert read_file_at(root, sha, "plans/p.md") == "- [ ] 1.1 a\n"
    assert read_file_at(root, sha, ".github/workflows/ci.yml") is None
    commits = collect_commits(root, base, sha, BOOKKEEPING)
    assert [c.counts_as_work for c in commits] == [True, False]
    assert commit_files(root, {"plans/p.md": "- [ ] 1.1 a\n"}, "no-op") == sha  # nothing to change


def test_commit_files_commits_only_its_paths(repo):
    """Other uncommitted changes stay uncommitted when plan-runner commits its own correction."""
    root = path_of(repo)
    write(root, {"README.md": "user edit\n"})
    commit_files(root, {"plans/p.md": "reverted\n"}, "plan-runner: revert flip")
    assert set(repo.head.commit.stats.files) == {"plans/p.md"}
    assert (root / "README.md").read_text() == "user edit\n" and is_dirty(root)


def test_commit_files_refuses_paths_outside_the_repository(repo):
    """A path escaping the work tree is a PlanRunnerError, and nothing is written."""
    with pytest.raises(PlanRunnerError):
        commit_files(path_of(repo), {"../outside.txt": "x"}, "m")
    assert not (path_of(repo).parent / "outside.txt").exists()


def test_read_file_at_and_tree_hash(repo):
    """read_file_at gives a file's text at a revision (None when absent); tree_hash is the tree id."""
    root = path_of(repo)
    first = repo.head.commit.hexsha
    second = commit(repo, {"README.md": "two\n"}, "edit")
    assert read_file_at(root, first, "README.md") == "hello\n"
    assert read_file_at(root, second, "README.md") == "two\n"
    assert read_file_at(root, first, "missing.txt") is None
    assert read_file_at(root, first, "plans") is None  # a folder is not a file
    assert tree_hash(root) == repo.head.commit.tree.hexsha
    assert tree_hash(root, first) == repo.commit(first).tree.hexsha
    with pytest.raises(PlanRunnerError):
        read_file_at(root, "no-such-branch", "README.md")


def test_answers_given_without_a_process_agree_with_git(repo):
    """What a session now reads through one long-lived `cat-file --batch` or from the ref files (a file at HEAD
    or at a full sha, a commit verified, a tree, a symlink, the branch checked out, an ancestry) says what git's
    own commands say, including the misses."""
    root = path_of(repo)
    first = repo.head.commit.hexsha
    os.symlink("README.md", root / "link.md")
    os.makedirs(root / "docs")
    os.symlink("../README.md", root / "docs" / "link.md")
    second = commit(repo, {"docs/real.md": "real\n"}, "links")
    repo.git.add("link.md", "docs/link.md")
    repo.git.commit("-m", "add links")
    third = repo.head.commit.hexsha
    assert read_file_at(root, "HEAD", "README.md") == read_file_at(root, third, "README.md") == "hello\n"
    assert read_file_at(root, "refs/heads/" + repo.active_branch.name, "docs/real.md") == "real\n"
    assert read_file_at(root, third, "link.md") == "README.md"  # a symlink's blob is its target
    for path, want in [("link.md", True), ("docs/link.md", True), ("docs/real.md", False), ("README.md", False),
                       ("docs", False), ("missing.md", False), ("nope/link.md", False)]:
        assert gitwork.is_symlink_at(root, third, path) is want, path
        assert repo.git.ls_tree(third, "--", path).startswith("120000 ") is want, path
    assert gitwork.ref_sha(root, third) == third
    assert gitwork.ref_sha(root, "0" * 40) is None
    assert gitwork.ref_sha(root, repo.head.commit.tree.hexsha) is None  # a tree is not a commit
    assert tree_hash(root, second) == repo.commit(second).tree.hexsha
    assert gitwork.is_ancestor(root, first, third) and not gitwork.is_ancestor(root, third, first)
    assert not gitwork.is_ancestor(root, first, "f" * 40)  # a missing object is not remembered as "no"
    branch = repo.active_branch.name
    assert gitwork.current_branch(root) == branch
    repo.git.tag(branch)  # a tag of the same name: `symbolic-ref --short` would say "heads/<branch>"
    assert gitwork.current_branch(root) == branch
    repo.git.checkout("--detach", second)
    assert gitwork.current_branch(root) is None
    repo.git.checkout(branch)
    assert gitwork.current_branch(root) == branch


def _readers(root: Path) -> set[int]:
    """The `git cat-file --batch` processes of this test working in `root`."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[:3] == [b"git", b"cat-file", b"--batch"] and Path(os.readlink(f"/proc/{pid}/cwd")) == root.resolve():
                found.add(int(pid))
        except OSError:
            continue
    return found


def test_what_is_read_through_a_repository_goes_with_it_and_a_path_keeps_nothing(repo):
    """A session reads through its own `Repository`: what it read is remembered there (never by a module, so a
    later session reads from disk), its reader process runs until `close` (a read after it starts another). A
    function given a path reads through a `Repository` of its own whose reader stops when the call returns."""
    root = path_of(repo)
    head = repo.head.commit.hexsha
    assert read_file_at(root, head, "README.md") == "hello\n" and gitwork.ref_sha(root, head) == head
    assert _readers(root) == set()  # the call's own reader stopped with it
    session = gitwork.Repository(root)
    assert os.fspath(session) == str(root)
    assert read_file_at(session, head, "README.md") == "hello\n" and gitwork.ref_sha(session, head) == head
    assert gitwork.is_ancestor(session, head, head)
    assert len(_readers(root)) == 1
    assert session.files_at == {(head, "README.md"): "hello\n"} and session.known_commits == {head}
    assert session.ancestry == {(head, head): True}
    session.close()
    assert _readers(root) == set()
    assert read_file_at(session, head, "plans/p.md") == "- [ ] 1.1 a\n"  # closed: the next read starts a reader
    session.close()
    later = gitwork.Repository(root)
    assert (later.files_at, later.known_commits, later.ancestry, later.diffs) == ({}, set(), {}, {})


def test_paths_adding_finds_added_secrets_only(repo):
    """Added lines only (a secret removed, or already there before, is not this change's doing), in any file,
    however long the line, also where the value straddles the 1 MiB pieces the diff is read in."""
    secret = "sk-live-0123456789"
    base = commit(repo, {"old.txt": f"already {secret}\n", "gone.txt": f"{secret}\n"}, "base")
    edge = "x" * ((1 << 20) - 7) + secret + "\n"  # the value crosses the first piece's end
    head = commit(repo, {"gone.txt": "clean\n", "edge.txt": edge, "with space.txt": f"+++ {secret}\n",
                         "plain.txt": "nothing here\n", "old.txt": f"already {secret}\nmore\n"}, "change")
    found = paths_adding(path_of(repo), base, head, [secret, "not-there-at-all"])
    assert sorted(found) == ["edge.txt", "with space.txt"]
    assert paths_adding(path_of(repo), base, head, []) == []
    assert paths_adding(path_of(repo), head, head, [secret]) == []


def test_protected_paths_changed(repo):
    """Exact paths and "dir/" prefixes that differ between base and head are reported."""
    root = path_of(repo)
    base = repo.head.commit.hexsha
    commit(repo, {".github/workflows/ci.yml": "x\n", "scripts/gate.sh": "exit 0\n", "src/a.py": "a\n"}, "c")
    protected = [".github/workflows/", "scripts/gate.sh", "scripts/other.sh", ".github/workflow"]
    assert protected_paths_changed(root, base, "HEAD", protected) == [".github/workflows/", "scripts/gate.sh"]
    before = repo.head.commit.hexsha
    commit(repo, {"scripts/gate.sh": "exit 1\n"}, "weaken the gate")
    commit(repo, {"scripts/gate.sh": "exit 0\n"}, "restore it")
    assert protected_paths_changed(root, before, "HEAD", protected) == []
    assert protected_paths_changed(root, base, "HEAD", []) == []


# --- work branch and pushes --------------------------------------------------------------------


def clone_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True, initial_branch="main").close()
    with make_repo(tmp_path / "seed") as seed:
        seed.create_remote("origin", str(bare)).push("main:main")
    for name in ("a", "b"):
        configure(git.Repo.clone_from(str(bare), tmp_path / name), *AGENT).close()
    return bare, tmp_path / "a", tmp_path / "b"


def tree_of(clone: Path) -> Path:
    return clone / ".git" / "plan-runner" / "p" / "tree"


def in_judge_tree(clone: Path, files: dict[str, str], message: str) -> str:
    """A commit on the branch checked out in plan-runner's own tree of the plan (which holds no files)."""
    assert not gitwork.has_checkout(tree_of(clone))
    return commit_files(tree_of(clone), files, message)


def remote_head(bare: Path, branch: str) -> str | None:
    with git.Repo(bare) as r:
        try:
            return r.git.rev_parse("--verify", "--quiet", f"refs/heads/{branch}")
        except git.GitCommandError:
            return None


def test_work_branch_created_locally_then_reused(repo):
    """Without a remote the branch is created from base as a ref (the user's checkout stays on main), checked
    out in plan-runner's own work tree only, and reused afterwards."""
    root = path_of(repo)
    base = repo.head.commit.hexsha
    assert ensure_work_branch(root, "plan-runner/p", "main", None, tree=tree_of(root)) == base
    assert repo.active_branch.name == "main"
    with git.Repo(tree_of(root)) as tree:
        assert tree.active_branch.name == "plan-runner/p"
    head = in_judge_tree(root, {"src/a.py": "1\n"}, "work")
    assert not (root / "src/a.py").exists()
    assert os.listdir(tree_of(root)) == [".git"]  # the judge's own tree holds no files: it commits from objects
    release_tree(tree_of(root))
    assert ensure_work_branch(root, "plan-runner/p", "main", None, tree=tree_of(root)) == head
    assert repo.active_branch.name == "main" and repo.head.commit.hexsha == base


def test_work_branch_from_remote_base_and_pushed_with_lease(tmp_path):
    """A fresh clone bases the branch on the remote's base; a stale lease is a StateConflict."""
    bare, a, b = clone_pair(tmp_path)
    base = remote_head(bare, "main")
    assert ensure_work_branch(a, "plan-runner/p", "main", "origin", tree=tree_of(a)) == base
    one = in_judge_tree(a, {"src/a.py": "1\n"}, "a work")
    assert push_branch(a, "plan-runner/p", "origin", None) == one
    assert remote_head(bare, "plan-runner/p") == one
    # Clone b picks up the pushed work branch instead of starting again from main.
    assert ensure_work_branch(b, "plan-runner/p", "main", "origin", tree=tree_of(b)) == one
    two = in_judge_tree(b, {"src/b.py": "2\n"}, "b work")
    push_branch(b, "plan-runner/p", "origin", one)
    assert remote_head(bare, "plan-runner/p") == two
    # Clone a still believes the remote is at `one`: its push loses.
    in_judge_tree(a, {"src/c.py": "3\n"}, "late work")
    with pytest.raises(StateConflict):
        push_branch(a, "plan-runner/p", "origin", one)
    with pytest.raises(StateConflict):
        push_branch(a, "plan-runner/p", "origin", None)  # expected absent, but it exists
    assert remote_head(bare, "plan-runner/p") == two


def test_work_branch_fast_forwards_to_the_remote(tmp_path):
    """A local work branch behind the remote's copy moves forward to it."""
    bare, a, b = clone_pair(tmp_path)
    ensure_work_branch(a, "plan-runner/p", "main", "origin", tree=tree_of(a))
    push_branch(a, "plan-runner/p", "origin", None)
    ensure_work_branch(b, "plan-runner/p", "main", "origin", tree=tree_of(b))
    ahead = in_judge_tree(b, {"x.py": "x\n"}, "b ahead")
    push_branch(b, "plan-runner/p", "origin", remote_head(bare, "main"))
    assert ensure_work_branch(a, "plan-runner/p", "main", "origin", tree=tree_of(a)) == ahead
    with git.Repo(tree_of(a)) as ra:
        assert ra.head.commit.hexsha == ahead and read_file_at(tree_of(a), "HEAD", "x.py") == "x\n"
    assert os.listdir(tree_of(a)) == [".git"]


def test_diverged_work_branch_is_a_clear_error(tmp_path):
    """Local and remote work branches with different commits stop with a fix, losing nothing."""
    bare, a, b = clone_pair(tmp_path)
    for clone, name in ((a, "a.py"), (b, "b.py")):
        ensure_work_branch(clone, "plan-runner/p", "main", "origin", tree=tree_of(clone))
        in_judge_tree(clone, {name: "x\n"}, name)
    push_branch(b, "plan-runner/p", "origin", None)
    with pytest.raises(PlanRunnerError) as info:
        ensure_work_branch(a, "plan-runner/p", "main", "origin", tree=tree_of(a))
    assert "differs" in info.value.what and info.value.fix
    assert read_file_at(a, "plan-runner/p", "a.py") == "x\n"


def test_unknown_base_is_a_clear_error(repo):
    """A base that does not exist is reported with a fix, not a traceback."""
    with pytest.raises(PlanRunnerError) as info:
        ensure_work_branch(path_of(repo), "plan-runner/p", "no-such-base", None)
    assert "no-such-base" in info.value.what


# --- bounded: no history walks -----------------------------------------------------------------


def test_evidence_never_walks_history_beyond_the_session(tmp_path):
    """With 10,000 commits below the session deleted from disk, every evidence function still works."""
    root = tmp_path / "w"
    repo = configure(git.Repo.init(root, initial_branch="main"), *AGENT)
    fast_import_history(repo, 10_000)
    repo.git.checkout("-f", "main")
    # The session starts from a commit whose whole content is fresh (loose objects only).
    write(root, {"counter.txt": "session base\n", "plans/p.md": "- [ ] 1.1\n"})
    repo.git.add("--all")
    repo.git.commit("-m", "base")
    for pack in (Path(repo.git_dir) / "objects" / "pack").iterdir():
        pack.unlink()
    with pytest.raises(git.GitCommandError):
        repo.git.rev_list("--count", "HEAD")  # proof: a history walk now fails
    base = repo.head.commit.hexsha
    assert ensure_work_branch(root, "plan-runner/p", base, None) == base
    commit(repo, {"src/a.py": "a\n"}, "work")
    commit(repo, {"plans/p.md": "- [x] 1.1\n"}, "tick")
    write(root, {"left.txt": "over\n"})
    wip = commit_leftovers(root)
    commits = collect_commits(root, base, "HEAD", BOOKKEEPING)
    assert [(c.counts_as_work, c.wip) for c in commits] == [(True, False), (False, False), (True, True)]
    assert commits[-1].sha == wip
    assert protected_paths_changed(root, base, "HEAD", ["plans/p.md", ".github/"]) == ["plans/p.md"]
    assert read_file_at(root, base, "plans/p.md") == "- [ ] 1.1\n"
    assert tree_hash(root) == repo.head.commit.tree.hexsha
    commit_files(root, {"plans/p.md": "- [ ] 1.1\n"}, "plan-runner: revert rejected flip")
    assert not is_dirty(root)
    repo.close()


def test_push_refused_by_the_remote_is_not_a_conflict(tmp_path):
    """A push the remote declines (hook, protection) is a PlanRunnerError with a fix, not StateConflict."""
    bare, a, _b = clone_pair(tmp_path)
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho protected branch >&2\nexit 1\n")
    hook.chmod(0o755)
    ensure_work_branch(a, "plan-runner/p", "main", "origin")
    with pytest.raises(PlanRunnerError) as info:
        push_branch(a, "plan-runner/p", "origin", None)
    assert not isinstance(info.value, StateConflict) and "permission" in info.value.fix
    assert remote_head(bare, "plan-runner/p") is None


def test_plan_runners_git_keeps_push_credentials_and_runs_no_hooks(tmp_path, monkeypatch):
    """The judge's sanitising `GIT_CONFIG_*` entries come after the process's own (the push token's header),
    so both hold: credentials are kept, hooks and fsmonitor are off."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "http.https://github.invalid/.extraheader")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "AUTHORIZATION: basic dG9rZW4=")
    seen = gitwork.run_git(tmp_path, "config", "--get-regexp", "extraheader|hookspath|fsmonitor").decode()
    assert "AUTHORIZATION: basic dG9rZW4=" in seen
    assert f"core.hookspath {os.devnull}" in seen and "core.fsmonitor false" in seen


def test_move_branch_is_forward_only_compare_and_swap_and_never_under_a_work_tree(repo, tmp_path):
    """The work branch moves as a ref: never backwards or sideways, never from a value it no longer has (a lost
    swap is a StateConflict), never while a work tree of the user's has it checked out."""
    from runner.adapters.git.work import move_branch

    root = path_of(repo)
    base = repo.head.commit.hexsha
    move_branch(root, "plan-runner/p", base, None)
    one = commit(repo, {"src/one.py": "1\n"}, "one")  # on main
    two = commit(repo, {"src/two.py": "2\n"}, "two")
    with pytest.raises(StateConflict):
        move_branch(root, "plan-runner/p", two, one)  # it is at `base`, not `one`
    move_branch(root, "plan-runner/p", one, base)
    with pytest.raises(PlanRunnerError, match="refusing to move"):
        move_branch(root, "plan-runner/p", base, one)
    repo.git.worktree("add", str(tmp_path / "mine"), "plan-runner/p")
    with pytest.raises(PlanRunnerError, match="is checked out in") as info:
        move_branch(root, "plan-runner/p", two, one)
    assert str(tmp_path / "mine") in info.value.what and "switch" in info.value.fix
    assert repo.git.rev_parse("plan-runner/p") == one


def test_a_correction_in_the_judges_tree_changes_only_its_paths_and_writes_no_file(repo):
    """plan-runner's own tree of a plan has no checkout: commit_files commits from objects, so the commit
    differs from HEAD in the given paths only (an index-based commit there would delete every other file) and
    nothing lands on disk."""
    root = path_of(repo)
    commit(repo, {"src/keep.py": "k\n", "docs/a.md": "a\n"}, "project")
    ensure_work_branch(root, "plan-runner/p", "main", None, tree=tree_of(root))
    before = gitwork.ref_sha(tree_of(root), "HEAD")
    new = commit_files(tree_of(root), {"docs/a.md": None, "plans/p.md": "- [ ] 1.1\n"}, "plan-runner: revert")
    changed = gitwork.run_git(root, "diff-tree", "-r", "--name-status", before, new).decode().split()
    assert changed == ["D", "docs/a.md", "M", "plans/p.md"]
    assert read_file_at(root, new, "src/keep.py") == "k\n"
    assert gitwork.ref_sha(root, "refs/heads/plan-runner/p") == new and os.listdir(tree_of(root)) == [".git"]


# --- the list of work trees while another session adds one (CI24: twenty plans at once in one repository) ---------


def _half_registered(repo: Path, name: str) -> Path:
    """What `git worktree add` leaves for a moment: the registration's `commondir` made, not yet written. `git
    worktree list` then fails outright ("failed to read .../commondir")."""
    folder = repo / ".git" / "worktrees" / name
    folder.mkdir(parents=True)
    (folder / "gitdir").write_text(f"{repo.parent / name}/.git\n")
    (folder / "commondir").write_text("")
    return folder


def test_the_work_tree_list_waits_for_a_registration_another_session_is_making(repo, tmp_path):
    """Another session holds plan-runner's work-tree lock while its `worktree add` is half done (longer than the
    reads again would wait): the list waits for the lock and reads the finished state, never the half one."""
    import shutil
    import threading
    import time

    from runner.adapters.git.trees import _worktrees_locked

    root = Path(repo.working_dir)
    holding, done = threading.Event(), threading.Event()

    def other_session() -> None:
        with _worktrees_locked(root):
            folder = _half_registered(root, "tree14")
            holding.set()
            time.sleep(1.5)
            shutil.rmtree(folder)  # (its add failed and undid itself; a finished one reads as well)
        done.set()

    threading.Thread(target=other_session, daemon=True).start()
    assert holding.wait(10)
    with pytest.raises(git.GitCommandError, match="commondir"):  # git's own behaviour, which the lock is for
        gitwork.run_git(root, "worktree", "list", "--porcelain", "-z")
    assert gitwork.worktrees_on(root, "main") == [root] and done.is_set()


def test_a_registration_made_by_someone_else_is_read_again(repo):
    """A `worktree add` plan-runner does not run (the user's, in another terminal) is not under its lock: the
    same failure a moment later is read again, and the list comes out whole."""
    import shutil
    import threading

    root = Path(repo.working_dir)
    folder = _half_registered(root, "theirs")
    threading.Timer(0.15, shutil.rmtree, args=(folder,)).start()
    assert gitwork.worktrees_on(root, "main") == [root]


def test_a_registration_that_stays_half_made_still_fails_clearly(repo):
    """Reads again are bounded: a registration that never completes fails with git's words and the fix, which
    works."""
    root = Path(repo.working_dir)
    _half_registered(root, "stuck")
    with pytest.raises(PlanRunnerError) as raised:
        gitwork.worktrees_on(root, "main")
    assert "failed to read" in raised.value.why and "commondir" in raised.value.why, raised.value.why
    assert f"git -C {root} worktree prune" in raised.value.fix
    gitwork.run_git(root, "worktree", "prune")
    assert gitwork.worktrees_on(root, "main") == [root]
