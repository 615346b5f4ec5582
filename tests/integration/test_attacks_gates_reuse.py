"""The gates' read-only base (runner.adapters.judge.base) against gates that leave something behind for the next
gate or the next session's gates: a planted conftest.py / sitecustomize.py, a tracked test rewritten with its mtime
reset, a tracked file or folder replaced by a link to outside, a chmod, a hard link written through by the next
agent, a FIFO, a poisoned set-up cache.

Each attack runs in the room as one of session 1's gates, in the tree the gates see; the next gate and session 2's
gate must give the honest verdict, and the base must hold exactly what a fresh checkout holds. Positive control
(check="off", the mutation): the same attack in a room that mounts the base writable at the gates' path instead of
under a throwaway layer flips the verdict.

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
from runner.adapters.judge.base import BaseTree, GatesTree
from runner.adapters.sandbox import agent_clone, room as rooms
from runner.adapters.sandbox import identity as sandbox
from runner.core.plan import SetupConfig
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


def _prepare(area, identity, repo: Path, scratch: Path) -> None:
    """A session's start: the base at the work branch (the agent's tree lies on it), then the agent's area."""
    BaseTree(area, repo).at(git(repo, "rev-parse", "plan-runner/p"))
    agent_clone.prepare(area, identity, repo, "plan-runner/p", None, scratch)


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


def _as_agent(identity, script: str, cwd: Path, area: agent_clone.AgentArea, *, check: bool = True) -> None:
    """`script` run as the agent in `cwd` (in its area), with $OUT a folder of its own in the area."""
    out = area.root / "attack-out"
    out.mkdir(exist_ok=True)
    done = agent_clone.run_as(identity, ["sh", "-c", script], cwd=cwd,
                              env={"PATH": "/usr/bin:/bin", "OUT": str(out), "HOME": str(out)})
    assert done.returncode == 0 or not check, done.stderr


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
            found[str(path.relative_to(root))] = (kind, stat.S_IMODE(st.st_mode), body)
    return found


def _fresh_listing(repo: Path, sha: str, dest: Path) -> dict[str, tuple]:
    index = dest.parent / "fresh.index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "read-tree", sha], cwd=repo, env=env, check=True)
    subprocess.run(["git", "checkout-index", "--all", "--force", f"--prefix={dest}/"], cwd=repo, env=env, check=True)
    return _listing(dest)


def _writable_base(monkeypatch) -> None:
    """The mutation: every room mounts the base writable at the gates' path (no throwaway layer)."""
    command = rooms.Namespaces.command

    def bound(self, argv, env, cwd, view):
        made = command(self, argv, env, cwd, view)
        args = list(made.argv)
        for i, a in enumerate(args[:-2]):
            if a == "--overlay-src" and args[i + 2] == "--tmp-overlay":
                args[i:i + 4] = ["--bind", args[i + 1], args[i + 3]]
        return rooms.Launch(args, made.popen)
    monkeypatch.setattr(rooms.Namespaces, "command", bound)


def _gates(repo: Path, area, identity, scratch: Path, setup: SetupConfig | None = None,
           trusted: str | None = None) -> GatesTree:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(area.gate_home), "PYTHONDONTWRITEBYTECODE": "1"}
    return GatesTree(base=BaseTree(area, repo), area=area, identity=identity, scratch=scratch, env=env, setup=setup,
                     trusted=trusted)


# Each attack with the base read-only ("on") and, as its control, mounted writable ("off"): the control shows the
# attack would land but for the mount. A hard link across two mounts (the tree, the area) cannot be made, writable or
# not, so that attack has no control to run (its "on" case checks the link is refused).
CASES = [(attack, check) for attack in sorted(ATTACKS) for check in ("on", "off")
         if not (attack == "hardlink" and check == "off")]


@pytest.mark.parametrize(("attack", "check"), CASES)
def test_what_session_1s_gates_leave_never_reaches_session_2s_verdict(world, attack, check, monkeypatch):
    repo, one, two, scratch = world
    in_gates, in_agent, gate = ATTACKS[attack]
    if check == "off":
        _writable_base(monkeypatch)
    area = agent_clone.area_for(repo, f"reuse-{attack}-{check}")
    with sandbox.leased("user") as identity:
        try:
            _prepare(area, identity, repo, scratch)
            gates = _gates(repo, area, identity, scratch)
            forged = []
            with gates.base.held():
                tree = gates.tree(one)
                assert not _gate(identity, tree, gate), "the honest verdict of the commit is red"
                _as_agent(identity, in_gates, tree, area, check=check == "off" or attack != "hardlink")  # a gate
                if in_agent is None:
                    forged.append(_gate(identity, tree, gate))  # the next gate of the same session
                    assert check == "off" or not forged[-1], f"{attack}: a gate forged the next gate's verdict"
                gates.close()
            # Session 2: the area prepared again, its agent, the gates on the next commit.
            _prepare(area, identity, repo, scratch)
            if in_agent:
                _as_agent(identity, in_agent, area.work, area)
            gates = _gates(repo, area, identity, scratch)
            with gates.base.held():
                tree = gates.tree(two)
                passed = _gate(identity, tree, gate)
                gates.close()
            if check == "off":  # (an incremental update may write a file back: the next gate was forged then)
                assert passed or any(forged), f"positive control: with the base writable, {attack} forges a verdict"
                return
            assert not passed, f"{attack}: session 1's gates forged session 2's verdict"
            assert _listing(gates.base.tree) == _fresh_listing(repo, two, scratch.parent / "fresh")
        finally:
            agent_clone.discard_area(area, identity)


def test_a_fifo_and_untracked_folders_never_reach_the_base_and_updates_are_incremental(world):
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, "reuse-fifo")
    with sandbox.leased("user") as identity:
        try:
            gates = _gates(repo, area, identity, scratch)
            with gates.base.held():
                tree = gates.tree(one)
                _as_agent(identity, "mkfifo tests/fifo; mkdir -p build/deep; echo x > build/deep/x; "
                                    "mkdir .venv; ln -s /etc .venv/etc", tree, area)
                calc = os.lstat(gates.base.tree / "calc.py").st_ino
                gates.tree(two)
                assert os.lstat(gates.base.tree / "calc.py").st_ino == calc, "an unchanged file was written again"
                assert _listing(gates.base.tree) == _fresh_listing(repo, two, scratch.parent / "fresh")
                gates.tree(one)  # back to the first commit (the base's gates, issue 27): README as it was
                assert (gates.base.tree / "README.md").read_text() == "calc\n"
        finally:
            agent_clone.discard_area(area, identity)


def test_no_room_shows_the_base(world):
    """The base is in the agent's area but covered in every room: neither the agent nor a gate sees or writes it."""
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, "reuse-hidden")
    with sandbox.leased("user") as identity:
        try:
            _prepare(area, identity, repo, scratch)
            gates = _gates(repo, area, identity, scratch)
            with gates.base.held():
                tree = gates.tree(one)
                probe = (f"ls -A {gates.base.root} | wc -l; echo x > {gates.base.tree}/calc.py || true; "
                         f"ls -A {gates.base.root} | wc -l")
                for cwd in (area.work, tree):
                    done = agent_clone.run_as(identity, ["sh", "-c", probe], cwd=cwd, env={"PATH": "/usr/bin:/bin"})
                    assert done.stdout.split() == [b"0", b"0"], done
                assert (gates.base.tree / "calc.py").read_text().startswith("def mul")
                gates.close()
        finally:
            agent_clone.discard_area(area, identity)


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "fresh-copy"])
def test_a_poisoned_cache_reaches_no_later_gate_and_stays_in_place(world, overlay, monkeypatch):
    """The set-up cache restored in the base once: a gate that rewrites a cache file (its mtime put back) or adds
    a sitecustomize.py changes nothing the next gate or session sees, and the cache is not restored again. Without
    an overlay (probe: an old kernel), each process gets a fresh copy of the base: the same holds."""
    repo, one, two, scratch = world
    area = agent_clone.area_for(repo, f"reuse-cache-{overlay}")
    setup = SetupConfig(run=("mkdir -p .venv/lib && echo 'honest = True' > .venv/lib/site.py",), cache=(".venv",),
                        key=())
    poison = (f"""{PY} -c "import os; p = '.venv/lib/site.py'; st = os.stat(p); open(p, 'w').write('honest = 0\\n');"""
              f""" os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))"; echo 'import os' > .venv/lib/sitecustomize.py""")
    seen = "cat .venv/lib/site.py; ls .venv/lib"
    with sandbox.leased("user") as identity:
        if not overlay:
            assert identity.room is not None
            monkeypatch.setattr(identity.room, "overlay", False)
        try:
            said: list[str] = []
            for sha in (one, two):
                gates = _gates(repo, area, identity, scratch, setup, trusted=one)
                gates.on_event = lambda kind, detail: said.append(detail)
                with gates.base.held():
                    tree = gates.tree(sha)
                    assert gates.failures == [] and gates.host == gates.base.tree
                    _as_agent(identity, poison, tree, area)
                    after = agent_clone.run_as(identity, ["sh", "-c", seen], cwd=tree, env={"PATH": "/usr/bin:/bin"})
                    assert after.stdout.split() == [b"honest", b"=", b"True", b"site.py"], after
                    gates.close()
            assert [d.split(" ", 2)[-1] for d in said if d.startswith("cache ")] == ["restored", "in place"], said
        finally:
            agent_clone.discard_area(area, identity)


def test_without_isolation_the_base_is_checked_before_it_is_used_again(world, monkeypatch):
    """Without a room nothing is kept from the code run (its user could write anywhere): the gates run in the base
    itself, and the next `at` reuses it only when git's stat data says nothing changed (ctime included). A test
    rewritten with its mtime put back is written again; the mutation (`_untouched` trusting the tree) keeps it."""
    repo, one, two, scratch = world
    identity = sandbox.Identity()
    for check in ("on", "off"):
        area = agent_clone.area_for(repo, f"reuse-none-{check}")
        if check == "off":
            monkeypatch.setattr(BaseTree, "_untouched", lambda self, roots: True)
        try:
            gates = _gates(repo, area, identity, scratch)
            with gates.base.held():
                tree = gates.tree(one)
                test = tree / "tests" / "test_calc.py"
                st = os.stat(test)
                test.write_text(FORGED)
                os.utime(test, ns=(st.st_atime_ns, st.st_mtime_ns))
                (tree / "conftest.py").write_text(CONFTEST)
                tree = gates.tree(two)
                if check == "off":
                    assert (tree / "tests" / "test_calc.py").read_text() == FORGED, "positive control"
                    continue
                assert (tree / "tests" / "test_calc.py").read_text() == TEST
                assert _listing(gates.base.tree) == _fresh_listing(repo, two, scratch.parent / "fresh")
                calc = os.lstat(tree / "calc.py").st_ino
                assert gates.tree(one) == tree and os.lstat(tree / "calc.py").st_ino == calc  # untouched: kept
        finally:
            agent_clone.discard_area(area)
