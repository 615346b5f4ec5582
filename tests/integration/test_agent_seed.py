"""The agent's clone seeded from the judge's seed store (runner.adapters.sandbox.agent_clone): only the work
branch crosses into the store, the agent reads it and cannot write it, the clone borrows instead of copying,
and old parts and areas are removed off the critical path (discard_trash, remove_agent_areas)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from runner.adapters.sandbox import agent_clone
from runner.adapters.sandbox.identity import Identity, judge_dir, leased


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x.invalid"}).stdout.strip()


@pytest.fixture
def judge(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_RUNNER_SANDBOX_ROOT", str(tmp_path / "sandbox"))
    (tmp_path / "sandbox").mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "branch", "plan-runner/p")
    # A private ref of the judge (the state of a plan): its objects must never reach the store.
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input="the ledger\n", text=True,
                          capture_output=True, check=True).stdout.strip()
    tree = subprocess.run(["git", "mktree"], cwd=repo, input=f"100644 blob {blob}\tledger\n", text=True,
                          capture_output=True, check=True).stdout.strip()
    state = git(repo, "commit-tree", tree, "-m", "state")
    git(repo, "update-ref", "refs/plan-runner/state/p", state)
    return repo, blob


def test_the_store_holds_the_work_branch_only_and_nobody_else_can_write_it(judge):
    repo, private_blob = judge
    store = agent_clone.seed_store(repo, "plan-runner/p")
    assert git(store, "rev-parse", "refs/heads/plan-runner/p") == git(repo, "rev-parse", "plan-runner/p")
    assert git(store, "for-each-ref", "--format=%(refname)") == "refs/heads/plan-runner/p"
    missing = subprocess.run(["git", "cat-file", "-e", private_blob], cwd=store, capture_output=True)
    assert missing.returncode != 0, "an object of the judge's private state reached the agent's store"
    for dirpath, dirnames, filenames in os.walk(store):
        for name in [*dirnames, *filenames]:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert not mode & 0o022, f"{dirpath}/{name} is writable by others"
            assert mode & 0o004, f"{dirpath}/{name} is not readable by the agent's user"
    assert os.stat(judge_dir("seeds")).st_mode & 0o777 == 0o711  # the store's random name is not listable


def test_the_store_is_brought_up_to_date_incrementally_and_its_name_is_kept(judge):
    repo, _ = judge
    first = agent_clone.seed_store(repo, "plan-runner/p")
    git(repo, "checkout", "-q", "plan-runner/p")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "next")
    again = agent_clone.seed_store(repo, "plan-runner/p")
    assert again == first
    assert git(again, "rev-parse", "refs/heads/plan-runner/p") == git(repo, "rev-parse", "HEAD")


def test_the_clone_borrows_objects_and_the_previous_session_goes_to_the_trash(judge, tmp_path):
    repo, _ = judge
    area = agent_clone.area_for(repo, "p")
    me = Identity()
    agent_clone.prepare(area, me, repo, "plan-runner/p", None, tmp_path / "scratch")
    alternates = (area.work / ".git/objects/info/alternates").read_text().split()
    assert alternates == [str(Path(git(repo, "rev-parse", "--absolute-git-dir")) / "objects")]  # none: its own
    assert git(area.work, "rev-parse", "HEAD") == git(repo, "rev-parse", "plan-runner/p")
    assert (area.work / "a.txt").read_text() == "a\n"
    assert not list((area.work / ".git/objects/pack").iterdir()), "the history was copied, not borrowed"
    (area.work / "left.txt").write_text("left by the agent")
    agent_clone.prepare(area, me, repo, "plan-runner/p", None, tmp_path / "scratch")
    assert not (area.work / "left.txt").exists()
    trash = area.root / agent_clone.TRASH
    assert os.listdir(trash) and os.stat(trash).st_mode & 0o777 == 0o700
    agent_clone.discard_trash(area, me, wait=True)
    assert os.listdir(trash) == []


def test_remove_agent_areas_takes_only_what_is_old_enough(judge):
    repo, _ = judge
    old, new = (agent_clone.area_for(repo, p) for p in ("old", "new"))
    for area in (old, new):
        os.makedirs(area.work)
        (area.work / "f").write_text("x")
    past = time.time() - 7200
    os.utime(old.root, (past, past))
    removed = agent_clone.remove_agent_areas(3600)
    assert old.root in removed and not old.root.exists()
    assert new.root.exists()
    assert not [n for n in os.listdir(judge_dir("agents")) if n.startswith(".removing-")]


def test_an_area_a_session_holds_is_never_removed_however_old(judge, tmp_path):
    repo, _ = judge
    area = agent_clone.area_for(repo, "busy")
    me = Identity()
    agent_clone.prepare(area, me, repo, "plan-runner/p", None, tmp_path / "scratch")  # holds the area
    past = time.time() - 7200
    os.utime(area.root, (past, past))
    assert area.root not in agent_clone.remove_agent_areas(3600) and area.work.is_dir()
    agent_clone.discard_trash(area, me, wait=True)  # the session's end releases it
    os.utime(area.root, (past, past))
    assert area.root in agent_clone.remove_agent_areas(3600) and not area.root.exists()



def test_a_first_fill_brings_a_bounded_history_and_the_agents_clone_is_shallow_at_the_same_commits(judge, tmp_path,
                                                                                                  monkeypatch):
    """On a GitHub-hosted runner every job fills the store first: SEED_DEPTH commits, not the whole history
    (~8 s at 100,000 commits); later fetches stay incremental and never deepen it. The agent's clone gets the
    store's `shallow` file, so its git reads the history it has (without it, `git log` dies on a missing
    parent). Setting SEED_DEPTH out of reach (a full fill) fails the first assertion."""
    repo, _ = judge
    monkeypatch.setattr(agent_clone, "SEED_DEPTH", 3)
    git(repo, "checkout", "-q", "plan-runner/p")
    for i in range(6):
        (repo / "a.txt").write_text(f"{i}\n")
        git(repo, "commit", "-q", "-am", f"c{i}")
    store = agent_clone.seed_store(repo, "plan-runner/p")
    assert git(store, "rev-list", "--count", "plan-runner/p") == "3"
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "next")
    assert agent_clone.seed_store(repo, "plan-runner/p") == store
    assert git(store, "rev-list", "--count", "plan-runner/p") == "4"
    area = agent_clone.area_for(repo, "p")  # (the room runs as the judge's uid: no folder opened to others)
    with leased("user") as agent:
        agent_clone.prepare(area, agent, repo, "plan-runner/p", None, tmp_path / "scratch")
        log = subprocess.run(["git", "-C", str(area.work), "log", "--format=%s"], capture_output=True, text=True,
                             user=agent.uid, group=agent.gid, env={"PATH": os.environ["PATH"], "HOME": str(area.home)})
        assert log.returncode == 0, log.stderr
        assert log.stdout.split() == ["next", "c5", "c4", "c3"]
        agent_clone.prepare(area, agent, repo, "plan-runner/p", None, tmp_path / "scratch")  # kept, updated
        log = subprocess.run(["git", "-C", str(area.work), "log", "--format=%s"], capture_output=True, text=True,
                             user=agent.uid, group=agent.gid, env={"PATH": os.environ["PATH"], "HOME": str(area.home)})
        assert log.returncode == 0 and log.stdout.split() == ["next", "c5", "c4", "c3"], log.stderr
        agent_clone.discard_area(area, agent)


def _agent(identity, area, script: str) -> None:
    """The agent's own doing in its clone, as its identity."""
    done = agent_clone.run_as(identity, ["sh", "-c", script], cwd=area.work,
                              env={**agent_clone.agent_git_env(area), "GIT_AUTHOR_NAME": "a",
                                   "GIT_AUTHOR_EMAIL": "a@x.invalid", "GIT_COMMITTER_NAME": "a",
                                   "GIT_COMMITTER_EMAIL": "a@x.invalid"})
    assert done.returncode == 0, done.stderr


def _tracked_listing(root: Path) -> dict[str, bytes]:
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (folder == str(root) and d == ".git")]
        for name in files:
            path = Path(folder) / name
            out[str(path.relative_to(root))] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return out


@pytest.fixture(params=["none", "user"])
def who(request):
    if request.param == "none":
        yield Identity()
        return
    from runner.adapters.sandbox import identity as sandbox
    with sandbox.leased("user") as identity:  # a room, as plan-runner's own uid
        yield identity


def test_the_kept_clone_lands_on_exactly_the_judged_sha_with_nothing_of_the_last_session(judge, tmp_path, who):
    """The clone is updated in place (same folder: Claude Code resumes by its path), by the agent's git, to the
    judged sha: the agent's commits, leftovers, ignored files, config, hooks, excludes, replace refs and other
    branches gone, its files as a fresh clone's."""
    repo, _ = judge
    area = agent_clone.area_for(repo, f"kept-{who.uid}")
    scratch = tmp_path / "scratch"
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    inode = os.lstat(area.work).st_ino
    _agent(who, area, "echo mine > mine.txt; echo '*.log' > .gitignore; git add -A; git commit -qm agent; "
                      "echo left > left.txt; mkdir -p build/x; echo 1 > build/x/y.log; echo 2 > z.log; "
                      "git config core.fsmonitor 'echo pwned > pwned'; echo x > .git/info/exclude; "
                      "printf '#!/bin/sh\\necho hook > hooked\\n' > .git/hooks/post-checkout; "
                      "chmod +x .git/hooks/post-checkout; git branch other; git tag t1; "
                      "git replace -f HEAD~1 HEAD")
    # the judge's work branch moved on meanwhile (the agent's commit judged and more)
    (repo / "b.txt").write_text("b\n")
    git(repo, "checkout", "-q", "plan-runner/p")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "judged")
    git(repo, "checkout", "-q", "main")
    sha = git(repo, "rev-parse", "plan-runner/p")
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    assert os.lstat(area.work).st_ino == inode, "the clone was made again, not kept"
    assert git(area.work, "-c", "safe.directory=*", "rev-parse", "HEAD") == sha
    assert git(area.work, "-c", "safe.directory=*", "symbolic-ref", "HEAD") == "refs/heads/plan-runner/p"
    assert git(area.work, "-c", "safe.directory=*", "for-each-ref", "--format=%(refname)").split() == [
        "refs/heads/plan-runner/p", "refs/remotes/plan-runner/plan-runner/p"]
    assert _tracked_listing(area.work) == {"a.txt": b"a\n", "b.txt": b"b\n"}
    assert not (area.work / "pwned").exists() and not (area.work / "hooked").exists()
    assert "fsmonitor" not in (area.work / ".git/config").read_text()
    assert not [h for h in os.listdir(area.work / ".git/hooks") if not h.endswith(".sample")]
    assert git(area.work, "-c", "safe.directory=*", "status", "--porcelain", "--ignored", "--untracked-files=all") == ""
    agent_clone.discard_trash(area, who, wait=True)
    agent_clone.discard_area(area)


def test_a_clone_with_hidden_index_entries_or_of_another_owner_is_made_again(judge, tmp_path, who):
    """skip-worktree and assume-unchanged entries keep a checkout from rewriting those files: such a clone is
    not kept (positive control: the same clone without them is)."""
    repo, _ = judge
    area = agent_clone.area_for(repo, f"hidden-{who.uid}")
    scratch = tmp_path / "scratch"
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    inode = os.lstat(area.work).st_ino
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    assert os.lstat(area.work).st_ino == inode  # the positive control: kept
    _agent(who, area, "git update-index --skip-worktree a.txt; echo forged > a.txt")
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    assert os.lstat(area.work).st_ino != inode, "a clone whose index hides a file was kept"
    assert (area.work / "a.txt").read_text() == "a\n"
    agent_clone.discard_area(area)


def test_the_clone_is_kept_in_every_later_session_each_with_a_lease_of_its_own(judge, tmp_path):
    """A session job opens a room anew, and the room's release removes its TMP and HOME: the next update still finds
    the clone and keeps it. (With pooled users, every other later session made the clone again and restored its
    set-up cache: +1.1-1.7 s on the real project.)"""
    from runner.adapters.sandbox import identity as sandbox
    repo, _ = judge
    area = agent_clone.area_for(repo, "leases")
    scratch = tmp_path / "scratch"
    seen: list[tuple[int | None, int]] = []
    for n in range(4):
        with sandbox.leased("auto") as who:
            agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
            seen.append((who.uid, os.lstat(area.work).st_ino))
            _agent(who, area, f"echo {n} > n.txt; git add -A; git commit -qm n{n}")
            _export(area, who, repo, scratch)
            agent_clone.discard_trash(area, who, wait=True)
    assert len({inode for _uid, inode in seen}) == 1, f"the clone was made again: {seen}"
    agent_clone.discard_area(area)


def _updates(monkeypatch) -> list[str]:
    """How each update of a kept clone brought it to the judged sha (the script's word): moved (the branch only),
    merged (`read-tree -m -u`: what differs) or checked-out (the forced checkout: a pass over every file)."""
    seen: list[str] = []
    real = agent_clone.run_as

    def spy(identity, argv, **kw):
        done = real(identity, argv, **kw)
        if argv[:4] == ["sh", "-c", agent_clone._UPDATE_SCRIPT, "update"] and done.returncode == 0:
            seen.append(done.stdout.decode().split()[-2])
        return done
    monkeypatch.setattr(agent_clone, "run_as", spy)
    return seen


def _export(area, who, repo: Path, scratch: Path) -> str:
    """The agent's work exported and taken in by the judge (its work branch fast-forwarded, as import_work does)."""
    base = git(repo, "rev-parse", "plan-runner/p")
    imported = agent_clone.export_work(area, who, repo, "plan-runner/p", base, "p", scratch)
    assert imported.problem is None
    if imported.head and imported.head != base:
        git(repo, "update-ref", "refs/heads/plan-runner/p", imported.head)
    return git(repo, "rev-parse", "plan-runner/p")


def test_a_clone_its_export_left_clean_and_hid_is_updated_without_a_pass_over_its_files(judge, tmp_path, who,
                                                                                           monkeypatch):
    """After an export the clone is out of the identity's reach (its gates run meanwhile) with what its index was
    noted; the next update trusts that index: the branch moved when the judged sha is the clone's head, the two-way
    `read-tree -m -u` when it is another (the verdict went back), and the forced checkout when the index changed
    after the export. Each lands on exactly the judged sha, with nothing of the last session."""
    repo, _ = judge
    updates = _updates(monkeypatch)
    area = agent_clone.area_for(repo, f"trusted-{who.uid}")
    scratch = tmp_path / "scratch"
    base = git(repo, "rev-parse", "plan-runner/p")
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    inode = os.lstat(area.work).st_ino
    _agent(who, area, "echo mine > mine.txt; echo '*.log' > .gitignore; git add -A; git commit -qm agent; "
                      "echo left > left.txt; echo 2 > z.log")
    head = _export(area, who, repo, scratch)
    assert not os.path.lexists(area.work) and (area.root / agent_clone.KEPT / "work").is_dir()
    if who.isolated:  # its gates, which run now as the same identity, cannot reach it
        gate = agent_clone.run_as(who, ["sh", "-c", 'ls "$1/.kept/work" || touch "$1/.kept/work/x"', "gate",
                                        str(area.root)], cwd=Path("/"), env={"PATH": "/usr/bin:/bin"})
        assert gate.returncode != 0 and not (area.root / agent_clone.KEPT / "work" / "x").exists()

    def landed(sha: str, files: dict[str, bytes]) -> None:
        assert os.lstat(area.work).st_ino == inode, "the clone was made again, not kept"
        assert git(area.work, "-c", "safe.directory=*", "rev-parse", "HEAD") == sha
        assert git(area.work, "-c", "safe.directory=*", "symbolic-ref", "HEAD") == "refs/heads/plan-runner/p"
        assert _tracked_listing(area.work) == files
        assert git(area.work, "-c", "safe.directory=*", "status", "--porcelain", "--ignored",
                   "--untracked-files=all") == ""

    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    work = {"a.txt": b"a\n", "mine.txt": b"mine\n", ".gitignore": b"*.log\n", "left.txt": b"left\n"}
    assert updates == ["moved"]
    landed(head, work)

    _export(area, who, repo, scratch)  # nothing new; the verdict then sends the branch back to the base
    git(repo, "update-ref", "refs/heads/plan-runner/p", base)
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    assert updates == ["moved", "merged"]
    landed(base, {"a.txt": b"a\n"})

    _export(area, who, repo, scratch)
    hidden = area.root / agent_clone.KEPT / "work"
    os.utime(hidden / ".git" / "index")  # the index is no longer the file the export left: nothing is trusted
    (hidden / "a.txt").write_text("changed while hidden\n")
    agent_clone.prepare(area, who, repo, "plan-runner/p", None, scratch)
    assert updates == ["moved", "merged", "checked-out"]
    landed(base, {"a.txt": b"a\n"})
    agent_clone.discard_trash(area, who, wait=True)
    agent_clone.discard_area(area)
