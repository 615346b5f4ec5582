"""The agent's tree and repository (runner.adapters.sandbox.agent_clone): only the work branch crosses into the
judge's seed store, the agent reads it and cannot write it, its `.git` borrows instead of copying, its tree is the
judge's base under an upper layer of its own that each session starts empty (the base never written), and old parts
and areas are removed off the critical path (discard_trash, remove_agent_areas)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from runner.adapters.judge.base import BaseTree
from runner.adapters.sandbox import agent_clone
from runner.adapters.sandbox.identity import Identity, judge_dir, leased


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x.invalid"}).stdout.strip()


def prepare(area, who, repo: Path, scratch: Path, branch: str = "plan-runner/p") -> None:
    """A session's start: the base brought to the judged sha (as the session does first), then the agent's area."""
    BaseTree(area, repo).at(git(repo, "rev-parse", branch))
    agent_clone.prepare(area, who, repo, branch, None, scratch)


def in_tree(who, area, script: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    """`script` run as the agent in its tree (in a room: the tree shown as its phases see it)."""
    if who.room is not None:
        who.room.mount_tree(agent_clone.tree_of(area, who))
    return agent_clone.run_as(who, ["sh", "-c", script], cwd=area.work,
                              env={**agent_clone.agent_git_env(area), "GIT_AUTHOR_NAME": "a",
                                   "GIT_AUTHOR_EMAIL": "a@x.invalid", "GIT_COMMITTER_NAME": "a",
                                   "GIT_COMMITTER_EMAIL": "a@x.invalid", **env})


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


def test_the_repository_borrows_objects_and_the_previous_session_goes_to_the_trash(judge, tmp_path):
    repo, _ = judge
    area = agent_clone.area_for(repo, "p")
    me = Identity()
    prepare(area, me, repo, tmp_path / "scratch")
    alternates = (area.work / ".git/objects/info/alternates").read_text().split()
    assert alternates == [str(Path(git(repo, "rev-parse", "--absolute-git-dir")) / "objects")]  # none: its own
    assert git(area.work, "rev-parse", "HEAD") == git(repo, "rev-parse", "plan-runner/p")
    assert (area.work / "a.txt").read_text() == "a\n"
    assert not list((area.work / ".git/objects/pack").iterdir()), "the history was copied, not borrowed"
    (area.work / "left.txt").write_text("left by the agent")
    prepare(area, me, repo, tmp_path / "scratch")
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
    prepare(area, me, repo, tmp_path / "scratch")  # holds the area
    past = time.time() - 7200
    os.utime(area.root, (past, past))
    assert area.root not in agent_clone.remove_agent_areas(3600) and area.work.is_dir()
    agent_clone.discard_trash(area, me, wait=True)  # the session's end releases it
    os.utime(area.root, (past, past))
    assert area.root in agent_clone.remove_agent_areas(3600) and not area.root.exists()



def test_a_first_fill_brings_a_bounded_history_and_the_agents_clone_is_shallow_at_the_same_commits(judge, tmp_path,
                                                                                                  monkeypatch):
    """On a GitHub-hosted runner every job fills the store first: SEED_DEPTH commits, not the whole history
    (~8 s at 100,000 commits); later fetches stay incremental and never deepen it. The agent's repository gets the
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
        for _ in range(2):  # a first session, a later one
            prepare(area, agent, repo, tmp_path / "scratch")
            log = in_tree(agent, area, "git log --format=%s")
            assert log.returncode == 0, log.stderr
            assert log.stdout.decode().split() == ["next", "c5", "c4", "c3"]
        agent_clone.discard_area(area, agent)


def _agent(identity, area, script: str) -> None:
    """The agent's own doing in its tree, as its identity."""
    done = in_tree(identity, area, script)
    assert done.returncode == 0, done.stderr


def _listing(who, area) -> dict[str, str]:
    """The agent's tree as it sees it (`.git` aside): path -> content (a link: its target)."""
    done = in_tree(who, area, 'find . -path ./.git -prune -o \\( -type f -o -type l \\) -print | sort | '
                              'while IFS= read -r f; do if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; '
                              'else echo "$f: $(cat "$f")"; fi; done')
    assert done.returncode == 0, done.stderr
    return dict(line.split(": ", 1) if ": " in line else (line, "") for line in done.stdout.decode().splitlines())


def _base_listing(area) -> dict[str, bytes]:
    out = {}
    for folder, _dirs, files in os.walk(area.base_tree):
        for name in files:
            path = Path(folder) / name
            out[str(path.relative_to(area.base_tree))] = (os.readlink(path).encode() if path.is_symlink()
                                                          else path.read_bytes())
    return out


@pytest.fixture(params=["none", "user", "copy"])
def who(request):
    """No isolation; a room (as plan-runner's own uid); a room whose kernel has no overlay (Linux < 5.11: the
    agent's upper layer is a copy of the base and the set-up layer)."""
    if request.param == "none":
        yield Identity()
        return
    from runner.adapters.sandbox import identity as sandbox
    with sandbox.leased("user") as identity:
        assert identity.room is not None
        identity.room.overlay = request.param == "user"
        yield identity


def test_each_session_sees_exactly_the_judged_sha_with_nothing_of_the_last_session(judge, tmp_path, who):
    """The agent's tree at the same path each session (Claude Code resumes by its path), at exactly the judged sha:
    the agent's commits, leftovers, ignored files, config, hooks, excludes, replace refs and other branches gone,
    and none of its writes ever reached the base."""
    repo, _ = judge
    area = agent_clone.area_for(repo, f"kept-{who.uid}")
    scratch = tmp_path / "scratch"
    prepare(area, who, repo, scratch)
    base_before = _base_listing(area)
    _agent(who, area, "echo mine > mine.txt; echo changed > a.txt; echo '*.log' > .gitignore; git add -A; "
                      "git commit -qm agent; echo left > left.txt; mkdir -p build/x; echo 1 > build/x/y.log; "
                      "echo 2 > z.log; git config core.fsmonitor 'echo pwned > pwned'; echo x > .git/info/exclude; "
                      "printf '#!/bin/sh\\necho hook > hooked\\n' > .git/hooks/post-checkout; "
                      "chmod +x .git/hooks/post-checkout; git branch other; git tag t1; "
                      "git replace -f HEAD~1 HEAD")
    assert _base_listing(area) == base_before, "the agent wrote the base"
    # the judge's work branch moved on meanwhile (the agent's commit not taken, another judged)
    (repo / "b.txt").write_text("b\n")
    git(repo, "checkout", "-q", "plan-runner/p")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "judged")
    git(repo, "checkout", "-q", "main")
    sha = git(repo, "rev-parse", "plan-runner/p")
    prepare(area, who, repo, scratch)
    said = in_tree(who, area, "git rev-parse HEAD; git symbolic-ref HEAD; git for-each-ref --format='%(refname)'; "
                              "git status --porcelain --ignored --untracked-files=all; ls .git/hooks | grep -v sample; "
                              "git config --get core.fsmonitor; ls pwned hooked 2>/dev/null")
    assert said.stdout.decode().split() == [sha, "refs/heads/plan-runner/p", "refs/heads/plan-runner/p",
                                            "refs/remotes/plan-runner/plan-runner/p"], said.stderr
    assert _listing(who, area) == {"./a.txt": "a", "./b.txt": "b"}
    agent_clone.discard_trash(area, who, wait=True)
    agent_clone.discard_area(area)


def test_the_agents_first_git_status_reads_no_file(judge, tmp_path, who, monkeypatch):
    """The agent's index is the base's (as root, its owner rewritten as the room shows the files; a copy of the base,
    where there is no overlay, refreshed once): its stat data vouch for every file, so git compares no content.
    `git diff-files` lists a file whose stat data differ, without reading it (positive control: one touched). Over
    an overlay nothing is refreshed at all (the seed script's last word)."""
    repo, _ = judge
    refreshed: list[str] = []
    real = agent_clone.run_as

    def spy(identity, argv, **kw):
        if argv[:4] == ["sh", "-c", agent_clone._SEED_SCRIPT, "seed"]:
            refreshed.append(argv[-1])
        return real(identity, argv, **kw)
    monkeypatch.setattr(agent_clone, "run_as", spy)
    git(repo, "checkout", "-q", "plan-runner/p")
    for i in range(50):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "files")
    git(repo, "checkout", "-q", "main")
    area = agent_clone.area_for(repo, f"index-{who.uid}")
    prepare(area, who, repo, tmp_path / "scratch")
    done = in_tree(who, area, "git diff-files --name-only; touch -m -d '2001-01-01' f7.txt; git diff-files --name-only")
    assert done.returncode == 0 and done.stdout.decode().split() == ["f7.txt"], done.stderr
    assert refreshed == ["0" if who.room is not None and who.room.overlay else "1"]
    agent_clone.discard_area(area)


def test_what_the_agent_left_in_its_upper_layer_is_removed_with_no_link_followed(judge, tmp_path):
    """Links to the judge's folders, whiteouts of the base's files, fifos: the next session's start moves the upper
    aside and its removal follows nothing (the targets stay whole); the base never lost a file."""
    from runner.adapters.sandbox import identity as sandbox
    repo, _ = judge
    outside = tmp_path / "judges"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    area = agent_clone.area_for(repo, "upper")
    scratch = tmp_path / "scratch"
    with sandbox.leased("user") as who:
        prepare(area, who, repo, scratch)
        _agent(who, area, f"ln -s {outside} judges; ln -s {outside}/keep.txt k; rm a.txt; mkfifo pipe; "
                          "mkdir -p d/e; chmod 0 d")
        if who.room.overlay:
            assert os.stat(area.upper / "a.txt", follow_symlinks=False).st_rdev == 0  # a whiteout
        prepare(area, who, repo, scratch)
        agent_clone.discard_trash(area, who, wait=True)
        assert (outside / "keep.txt").read_text() == "mine\n" and (area.base_tree / "a.txt").is_file()
        assert _listing(who, area) == {"./a.txt": "a"}
    agent_clone.discard_area(area)


def test_every_later_session_each_with_a_lease_of_its_own_sees_its_tree_at_the_same_path(judge, tmp_path):
    """A session job opens a room anew: each gets the tree at the same path, its commits exported from it."""
    from runner.adapters.sandbox import identity as sandbox
    repo, _ = judge
    area = agent_clone.area_for(repo, "leases")
    scratch = tmp_path / "scratch"
    for n in range(3):
        with sandbox.leased("auto") as who:
            prepare(area, who, repo, scratch)
            _agent(who, area, f"test \"$(pwd)\" = {area.work}; echo {n} > n.txt; git add -A; git commit -qm n{n}")
            head = _export(area, who, repo, scratch)
            assert git(repo, "log", "-1", "--format=%s", head) == f"n{n}"
            agent_clone.discard_trash(area, who, wait=True)
    agent_clone.discard_area(area)


def _export(area, who, repo: Path, scratch: Path) -> str:
    """The agent's work exported and taken in by the judge (its work branch fast-forwarded, as import_work does)."""
    base = git(repo, "rev-parse", "plan-runner/p")
    imported = agent_clone.export_work(area, who, repo, "plan-runner/p", base, "p", scratch)
    assert imported.problem is None
    if imported.head and imported.head != base:
        git(repo, "update-ref", "refs/heads/plan-runner/p", imported.head)
    return git(repo, "rev-parse", "plan-runner/p")


def test_the_export_sees_the_tree_the_gates_do_not(judge, tmp_path, who):
    """The export runs where the agent's tree is shown (its leftovers become the WIP commit); a gate's process that
    follows it sees `work/` empty and cannot reach the upper layer."""
    repo, _ = judge
    area = agent_clone.area_for(repo, f"export-{who.uid}")
    scratch = tmp_path / "scratch"
    prepare(area, who, repo, scratch)
    _agent(who, area, "echo left > left.txt")
    head = _export(area, who, repo, scratch)
    assert git(repo, "show", f"{head}:left.txt") == "left"
    if who.isolated:
        gate = agent_clone.run_as(who, ["sh", "-c", 'ls -A "$1/work" "$1/.layers"; touch "$1/.layers/up/x"', "gate",
                                        str(area.root)], cwd=Path("/"), env={"PATH": "/usr/bin:/bin"})
        assert gate.stdout.split() == [f"{area.root}/.layers:".encode(), f"{area.root}/work:".encode()]
        assert not (area.upper / "x").exists() and (area.upper / "left.txt").is_file()
    agent_clone.discard_area(area)


def test_the_set_up_layer_shows_the_agents_cache_and_never_the_gates(judge, tmp_path, who):
    """The set-up cache the agent sees is the one built at its tree's path (a venv names its path), restored by the
    judge into the set-up layer; the gates' cache the base holds (made at `gates/`) never shows, not even the files
    only it has; what set-up made is no leftover of the agent's. Where nothing can be cached (another key), the
    agent's tree shows no cache at all before its own set-up runs in it."""
    from runner.adapters.judge import setup as setup_mod
    from runner.core.plan import SetupConfig

    repo, _ = judge
    area = agent_clone.area_for(repo, f"setup-{who.uid}")
    scratch = tmp_path / "scratch"
    sha = git(repo, "rev-parse", "plan-runner/p")
    BaseTree(area, repo).at(sha)
    (area.base_tree / ".venv").mkdir()  # the gates' cache, as the judge restores it into the base
    (area.base_tree / ".venv" / "where").write_text("gates\n")
    (area.base_tree / ".venv" / "only-gates").write_text("x\n")
    config = SetupConfig(run=('mkdir -p .venv && pwd > .venv/where',), cache=(".venv",))
    env = {"PATH": os.environ["PATH"], "HOME": str(area.home)}
    said: list[str] = []
    layered, failed = setup_mod.agent_layer(config, sha=sha, repo=repo, area=area, identity=who, env=env,
                                            cache_dir=scratch / "setup-cache", trusted_sha=sha,
                                            on_event=lambda kind, detail: said.append(detail))
    assert layered and failed is None and said[-1].endswith("restored"), said
    prepare(area, who, repo, scratch)
    assert setup_mod.run_in_tree(config, sha=sha, repo=repo, area=area, identity=who, env=env, layered=True) is None
    assert _listing(who, area) == {"./a.txt": "a", "./.venv/where": str(area.work)}
    assert in_tree(who, area, "git status --porcelain --untracked-files=all").stdout == b""
    setup_mod.agent_layer(config, sha=sha, repo=repo, area=area, identity=who, env=env,
                          cache_dir=scratch / "setup-cache", trusted_sha=sha,
                          on_event=lambda kind, detail: said.append(detail))
    assert said[-1].endswith("in place"), said
    # another key: nothing cached, the gates' cache still hidden, the commands run in the agent's tree
    uncached = SetupConfig(run=('test ! -e .venv && mkdir -p .venv && echo fresh > .venv/where',), cache=(".venv",),
                           key=("a.txt",))
    layered, failed = setup_mod.agent_layer(uncached, sha=sha, repo=repo, area=area, identity=who, env=env,
                                            cache_dir=scratch / "setup-cache", trusted_sha=None)
    assert not layered and failed is None
    prepare(area, who, repo, scratch)
    assert setup_mod.run_in_tree(uncached, sha=sha, repo=repo, area=area, identity=who, env=env,
                                 layered=False) is None
    assert _listing(who, area) == {"./a.txt": "a", "./.venv/where": "fresh"}
    assert in_tree(who, area, "git status --porcelain --untracked-files=all").stdout == b""
    agent_clone.discard_trash(area, who, wait=True)
    agent_clone.discard_area(area)
