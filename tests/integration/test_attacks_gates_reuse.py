"""The gates' checkout kept across sessions of a plan (runner.adapters.sandbox.kept_tree) against gates that
leave something behind for the next session's gates: a planted conftest.py / sitecustomize.py, a tracked test
rewritten with its mtime reset, a tracked file or folder replaced by a link to outside, a chmod, a hard link
written through by the next agent, a FIFO, a descriptor held open by a process of another user.

Each attack runs in the agent's room in session 1's gates' tree; session 2 reuses the tree (the test checks it
was reused, not made fresh: the same folder inode) and its gate must give the honest verdict, and the tree must
hold exactly what a fresh checkout holds. Positive control (check="off"): the same attack with the walk that
proves the tree turned off (kept_tree.prune and held_open as no-ops) flips the verdict.

Runs as whoever runs the suite: the room is every user's. What an attack keeps outside the tree ($OUT) is in
the agent's area (the room shows the agent nothing else), where a later session's agent finds it again."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runner.adapters.judge.gates import run_command_gate
from runner.adapters.sandbox import agent_clone, kept_tree
from runner.adapters.sandbox import identity as sandbox
from runner.core.plan import GateConfig

pytestmark = pytest.mark.integration

PY = sys.executable
PYTEST = f"{PY} -m pytest -q -p no:cacheprovider tests"
TEST = "import calc\n\n\ndef test_mul():\n    assert calc.mul(2, 3) == 6\n"
FORGED = "def test_mul():\n    pass\n"
FORGED = FORGED + "#" * (len(TEST) - len(FORGED) - 1) + "\n"  # the same size as the tracked test
assert len(FORGED) == len(TEST)
CONFTEST = "import calc\ncalc.mul = lambda a, b: a * b\n"

# Each attack: a shell script run in the agent's room in session 1's gates' tree ($OUT: a folder of its own
# outside the tree, in its area), an optional one its next session's agent runs (the tree is out of its reach
# then), and the gate whose honest verdict (red) it tries to turn green.
ATTACKS = {
    "conftest": (f"printf '%s' '{CONFTEST}' > tests/conftest.py; printf '%s' '{CONFTEST}' > sitecustomize.py",
                 None, PYTEST),
    "rewrite-utime": (f"""{PY} -c "import os; st = os.stat('tests/test_calc.py'); """
                      f"""open('tests/test_calc.py', 'w').write({FORGED!r}); """
                      f"""os.utime('tests/test_calc.py', ns=(st.st_atime_ns, st.st_mtime_ns))" """,
                      None, PYTEST),
    "file-link": (f"printf '%s' '{FORGED}' > $OUT/t.py; rm tests/test_calc.py; ln -s $OUT/t.py tests/test_calc.py",
                  None, PYTEST),
    "folder-link": (f"mkdir $OUT/tests; printf '%s' '{FORGED}' > $OUT/tests/test_calc.py; rm -r tests; "
                    "ln -s $OUT/tests tests", None, PYTEST),
    "chmod": ("chmod 755 check.sh", None, "./check.sh"),
    "hardlink": ("ln tests/test_calc.py $OUT/link", f"printf '%s' '{FORGED}' > $OUT/link", PYTEST),
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x.invalid"}).stdout.strip()


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_RUNNER_SANDBOX_ROOT", str(tmp_path / "sandbox"))
    (tmp_path / "sandbox").mkdir()
    tmp_path.chmod(0o755)
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def mul(a, b):\n    return a + b\n")  # the bug the gate finds
    (repo / "tests" / "test_calc.py").write_text(TEST)
    (repo / "check.sh").write_text("#!/bin/sh\nexit 0\n")  # tracked without its x bit: ./check.sh cannot run
    (repo / "README.md").write_text("calc\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    one = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("calc, session 2\n")
    git(repo, "commit", "-q", "-am", "two")
    two = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "plan-runner/p")
    return repo, one, two, tmp_path / "scratch"


def _as_agent(identity, script: str, cwd: Path, area: agent_clone.AgentArea) -> None:
    """`script` run as the agent in `cwd` (in its area), with $OUT a folder of its own in the area."""
    out = area.root / "attack-out"
    out.mkdir(exist_ok=True)
    done = agent_clone.run_as(identity, ["sh", "-c", script], cwd=cwd,
                              env={"PATH": "/usr/bin:/bin", "OUT": str(out), "HOME": str(out)})
    assert done.returncode == 0, done.stderr


def _gate(identity, workdir: Path, run: str) -> bool:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir.parent / "gate-home"), "PYTHONDONTWRITEBYTECODE": "1"}
    return run_command_gate(GateConfig(name="g", run=run, timeout_minutes="60s"), workdir=workdir, env=env,
                            identity=identity).passed


def _listing(root: Path) -> dict[str, tuple]:
    """Every entry below `root`: its type and permission bits, a file's content, a link's target."""
    found = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            st = os.lstat(path)
            kind = stat.S_IFMT(st.st_mode)
            body = path.read_bytes() if stat.S_ISREG(st.st_mode) else \
                os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            found[str(path.relative_to(root))] = (kind, stat.S_IMODE(st.st_mode), st.st_uid, body)
    return found


def _fresh_listing(repo: Path, sha: str, dest: Path, uid: int) -> dict[str, tuple]:
    index = dest.parent / "fresh.index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "read-tree", sha], cwd=repo, env=env, check=True)
    subprocess.run(["git", "checkout-index", "--all", f"--prefix={dest}/"], cwd=repo, env=env, check=True)
    return {k: (v[0], v[1], uid, v[3]) for k, v in _listing(dest).items()}


def _off(monkeypatch) -> None:
    """The positive control: the kept tree reused without the walk that proves it (nothing moved aside)."""
    monkeypatch.setattr(kept_tree, "prune", lambda root_fd, entries, trash_fd, limit: set())
    monkeypatch.setattr(kept_tree, "held_open", lambda dev, inodes: None)


@pytest.mark.parametrize("check", ["on", "off"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_what_session_1s_gates_leave_never_reaches_session_2s_verdict(world, attack, check, monkeypatch):
    repo, one, two, scratch = world
    in_gates, in_agent, gate = ATTACKS[attack]
    if check == "off":
        _off(monkeypatch)
    area = agent_clone.area_for(repo, f"reuse-{attack}-{check}")
    with sandbox.leased("user") as identity:
        try:
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            gates = agent_clone.checkout(area, identity, repo, one, scratch)
            assert not _gate(identity, gates, gate), "the honest verdict of the commit is red"
            _as_agent(identity, in_gates, gates, area)  # session 1's gates
            if in_agent is None:
                assert _gate(identity, gates, gate), f"{attack}: the attack works on the tree it was made in"
            # Session 2: the area prepared again (the kept tree out of the agent's reach), its agent, the checkout.
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            assert not os.path.lexists(area.gates)
            if in_agent:
                _as_agent(identity, in_agent, area.work, area)
            inode = os.lstat(area.root / agent_clone.KEPT / "gates").st_ino
            gates = agent_clone.checkout(area, identity, repo, two, scratch)
            assert os.lstat(gates).st_ino == inode, "the kept tree was not reused (a fresh checkout proves nothing)"
            passed = _gate(identity, gates, gate)
            if check == "off":
                assert passed, f"positive control: without the check, {attack} turns session 2's gate green"
                return
            assert not passed, f"{attack}: session 1's gates forged session 2's verdict"
            assert (gates / "README.md").read_text() == "calc, session 2\n"
            assert _listing(gates) == _fresh_listing(repo, two, scratch.parent / "fresh", identity.uid)
        finally:
            agent_clone.discard_area(area, identity)


def test_a_fifo_and_untracked_folders_are_gone_and_the_tree_is_a_fresh_checkout(world):
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, "reuse-fifo")
    with sandbox.leased("user") as identity:
        try:
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            gates = agent_clone.checkout(area, identity, repo, one, scratch)
            _as_agent(identity, "mkfifo tests/fifo; mkdir -p build/deep; echo x > build/deep/x; "
                                "mkdir .venv; ln -s /etc .venv/etc", gates, area)
            inode = os.lstat(gates).st_ino
            gates = agent_clone.checkout(area, identity, repo, two, scratch)  # within one session, as setup: does
            assert os.lstat(gates).st_ino == inode
            assert _listing(gates) == _fresh_listing(repo, two, scratch.parent / "fresh", identity.uid)
            # back to the first commit (the base's gates, issue 27): README as it was
            gates = agent_clone.checkout(area, identity, repo, one, scratch)
            assert (gates / "README.md").read_text() == "calc\n"
        finally:
            agent_clone.discard_area(area, identity)


def test_a_descriptor_another_user_holds_in_the_tree_means_a_fresh_checkout(world):
    """A process the agent could have passed a descriptor to (of another user: the agent's own are dead) could
    write a tracked file after the walk: the tree is not reused while one is open. Its positive control: the
    same checkout without that process reuses the tree."""
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, "reuse-held")
    with sandbox.leased("user") as identity:
        try:
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            gates = agent_clone.checkout(area, identity, repo, one, scratch)
            holder = subprocess.Popen([PY, "-c", "import sys, time; f = open(sys.argv[1], 'r+'); time.sleep(60)",
                                       str(gates / "tests" / "test_calc.py")])
            try:
                for _ in range(100):
                    if any(os.path.realpath(f"/proc/{holder.pid}/fd/{n}").endswith("test_calc.py")
                           for n in os.listdir(f"/proc/{holder.pid}/fd")):
                        break
                    subprocess.run(["sleep", "0.05"])
                inode = os.lstat(gates).st_ino
                gates = agent_clone.checkout(area, identity, repo, two, scratch)
                assert os.lstat(gates).st_ino != inode, "a tree with a file held open for writing was reused"
            finally:
                holder.kill()
                holder.wait()
            inode = os.lstat(gates).st_ino
            gates = agent_clone.checkout(area, identity, repo, one, scratch)
            assert os.lstat(gates).st_ino == inode  # the positive control: nothing held, the tree is reused
        finally:
            agent_clone.discard_area(area, identity)


def test_the_clone_made_again_before_the_agent_keeps_the_hidden_tree(world):
    """Set-up builds the clone's cache on a checkout of the base and makes the clone again (prepare twice before
    the agent): the tree hidden by the first stays hidden and is reused."""
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, "reuse-reclone")
    with sandbox.leased("user") as identity:
        try:
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            inode = os.lstat(agent_clone.checkout(area, identity, repo, one, scratch)).st_ino
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            assert os.lstat(agent_clone.checkout(area, identity, repo, two, scratch)).st_ino == inode
        finally:
            agent_clone.discard_area(area, identity)


def test_a_session_that_ends_before_its_gates_keeps_the_proven_tree(world):
    """With isolation the tree is proven in a thread from `prepare` on (off the critical path), which takes its
    record away. A session that ends before any checkout (the agent hit a limit) puts the record back as proven,
    so the next session still reuses the tree; without that, every such session would cost a fresh checkout."""
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, "reuse-ended")
    with sandbox.leased("user") as identity:
        try:
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            inode = os.lstat(agent_clone.checkout(area, identity, repo, one, scratch)).st_ino
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)  # session 2: no gates
            agent_clone.discard_trash(area, identity, wait=True)
            # what the next session's process finds (this process's proof is gone with it)
            assert (scratch / kept_tree.RECORD).is_file(), "the session's end did not put the record back"
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)  # session 3
            gates = agent_clone.checkout(area, identity, repo, two, scratch)
            assert os.lstat(gates).st_ino == inode, "the tree proven in session 2 was not reused in session 3"
            assert _listing(gates) == _fresh_listing(repo, two, scratch.parent / "fresh", identity.uid)
        finally:
            agent_clone.discard_area(area, identity)


def test_without_isolation_the_tree_is_proven_only_after_the_agent(world):
    """Without isolation the agent's own user can reach the hidden tree while it runs, so the proof may start only
    once the agent's processes are dead (export_work), never in `prepare`: a tracked file the agent rewrote during
    its run (its mtime put back) is moved aside and written again, and the rest of the tree is reused."""
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, "reuse-none")
    identity = sandbox.Identity()
    assert not identity.isolated
    try:
        agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
        inode = os.lstat(agent_clone.checkout(area, identity, repo, one, scratch)).st_ino
        agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
        hidden = area.root / agent_clone.KEPT / "gates" / "tests" / "test_calc.py"
        st = os.stat(hidden)
        hidden.write_text(FORGED)  # the agent, during its run, as the same user
        os.utime(hidden, ns=(st.st_atime_ns, st.st_mtime_ns))
        gates = agent_clone.checkout(area, identity, repo, two, scratch)
        assert os.lstat(gates).st_ino == inode, "the kept tree was not reused (a fresh checkout proves nothing)"
        assert (gates / "tests" / "test_calc.py").read_text() == TEST
        assert _listing(gates) == _fresh_listing(repo, two, scratch.parent / "fresh", os.geteuid())
    finally:
        agent_clone.discard_area(area)


CACHE = (".venv",)


def _restored_cache(identity, gates: Path, scratch: Path) -> tuple[Path, agent_clone.KeptSetup]:
    """A set-up cache restored into the gates' tree as run_setup restores one, and recorded (KeptSetup)."""
    from runner.adapters.judge import setup, untar

    built = scratch.parent / "built"
    (built / ".venv/lib").mkdir(parents=True)
    (built / ".venv/lib/site.py").write_text("honest = True\n")
    archive = scratch.parent / "cache.tar"
    fd = os.open(built, os.O_RDONLY | os.O_DIRECTORY)
    try:
        untar.write(archive, built, CACHE, source_fd=fd)
    finally:
        os.close(fd)
    assert setup._restore(archive, gates, CACHE)
    keep = agent_clone.KeptSetup(agent_clone.area_for(scratch.parent / "repo", "reuse-cache"), identity, scratch)
    keep.recorded(archive, gates, CACHE)
    return archive, keep


@pytest.mark.parametrize("check", ["on", "off"])
@pytest.mark.parametrize("change", ["none", "rewrite-utime", "add"])
def test_a_kept_cache_in_a_tree_brought_back_is_judged_by_the_proof_alone(world, change, check, monkeypatch):
    """In a gates' tree the checkout brought back from its proof, KeptSetup.intact takes the proof's record for
    its own walk (agent_clone._brought_back): the cache stays only when that record holds exactly the restored
    entries. Session 1's gates rewrite a cache file with its mtime put back: the proof moves it aside and intact
    refuses (the cache is restored again). They add a file to the cache: the proof moves it aside, and what is
    left is exactly the restored cache, kept. Untouched, intact holds. In no case is the cache walked a second
    time. Positive control (check="off", the proof's walk a no-op): the rewritten or added file stays and the
    cache is kept with it, so the proof is the layer that refuses it."""
    repo, one, two, scratch = world
    if check == "off":
        _off(monkeypatch)
    area = agent_clone.area_for(repo, "reuse-cache")
    with sandbox.leased("user") as identity:
        try:
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)
            gates = agent_clone.checkout(area, identity, repo, one, scratch)
            archive, keep = _restored_cache(identity, gates, scratch)
            script = {"none": "true",
                      "rewrite-utime": f"""{PY} -c "import os; p = '.venv/lib/site.py'; st = os.stat(p); """
                                       f"""open(p, 'w').write('honest = 0\\n'); """
                                       f"""os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))" """,
                      "add": "echo 'import os' > .venv/lib/sitecustomize.py"}[change]
            _as_agent(identity, script, gates, area)  # session 1's gates
            agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)  # session 2
            inode = os.lstat(area.root / agent_clone.KEPT / "gates").st_ino
            gates = agent_clone.checkout(area, identity, repo, two, scratch)
            assert os.lstat(gates).st_ino == inode, "the kept tree was not reused (a fresh checkout proves nothing)"

            def no_second_walk(root_fd, rels):
                raise AssertionError("the cache was walked again in a tree its proof just brought back")
            monkeypatch.setattr(kept_tree, "record_under", no_second_walk)
            kept = keep.intact(archive, gates, CACHE)
            site, added = gates / ".venv/lib/site.py", gates / ".venv/lib/sitecustomize.py"
            if check == "off":
                assert kept and (site.read_text() == "honest = 0\n" if change == "rewrite-utime" else True)
                assert added.exists() == (change == "add"), "positive control: without the proof, the change stays"
            elif change == "rewrite-utime":
                assert not kept, "session 1's gates rewrote the cache and session 2 keeps it"
                assert not site.exists()  # moved aside by the proof: restored again by run_setup
            else:
                assert kept, f"{change}: an intact cache in a proven tree is restored again"
                assert site.read_text() == "honest = True\n" and not added.exists()
        finally:
            agent_clone.discard_area(area, identity)
