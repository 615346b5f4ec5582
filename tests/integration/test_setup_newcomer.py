"""Issue 27's newcomer, end to end through the real CLI: a small Python project of their own with a git-ignored
`.venv` holding pytest. Before: `validate` and the preflight said ok, the gate exited 127 on the fresh checkout,
GatesRed blamed on the agent, attempts burned, and correct work was never credited after the fix.

Now: `validate` warns and the preflight stops naming `setup:`; a gate that cannot start on the base either
parks once as a set-up problem with the fix, blaming nobody and burning nothing; after the maintainer adds the
`setup:` block the docs show and replies `retry`, the plan finishes, crediting session 1's work; `setup:` ran in
the agent's clone too (the agent ran the gate itself). Real git, real processes, real pytest and pip (from a
wheelhouse made once with pip's configured index, committed in the project), the agent in its room (isolation
auto)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.reliability_world import git, ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = dict(GIT_AUTHOR_NAME="Agent", GIT_AUTHOR_EMAIL="agent@example.invalid",
                GIT_COMMITTER_NAME="Agent", GIT_COMMITTER_EMAIL="agent@example.invalid")

PLAN = """\
---
agent:
  backend: command
  executable: {agent}
  stall_minutes: 60s
  time_limit_minutes: 120s
{setup}gates:
  - name: tests
    run: {gate}
budget:
  max_sessions: 6
---
# Calc

## Stage 1: Fix add <!-- sessions: 1 -->
- [ ] 1.1 add returns the sum
"""

# The docs' Python set-up, with pip pointed at the test's wheelhouse (offline).
SETUP = """\
setup:
  run:
    - python3 -m venv .venv
    - .venv/bin/pip install -q --no-index --find-links {wheels} pytest
  cache: [.venv]
  key: [requirements-test.txt]
"""

# The agent: fixes add (once), runs the gate itself when its clone has the venv, and ticks 1.1.
AGENT = """\
#!/bin/sh
if grep -q 'a - b' calc.py; then
  sed -i 's/a - b/a + b/' calc.py && git commit -q -am 'Fix add'
fi
if [ -x .venv/bin/pytest ] && .venv/bin/pytest -q -p no:cacheprovider >/dev/null 2>&1; then
  echo "marker: agent-ran-the-gate"
fi
if [ -z "$(git status --porcelain)" ]; then echo "marker: clone-clean"; fi
sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/calc.md && git commit -q -am 'Tick 1.1' || true
echo done
"""


@pytest.fixture(scope="module")
def world():
    top = Path(tempfile.mkdtemp(prefix="pr-newcomer-"))
    os.chmod(top, 0o755)
    wheels = top / "wheels"
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), "pytest"],
                         capture_output=True, text=True, timeout=300)
    if got.returncode != 0:
        shutil.rmtree(top, ignore_errors=True)
        pytest.skip(f"pip could not fetch pytest for the wheelhouse: {got.stderr[-500:]}")
    for p in [wheels, *wheels.iterdir()]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    yield top
    if not os.environ.get("PLAN_RUNNER_TEST_KEEP"):
        shutil.rmtree(top, ignore_errors=True)


def cli(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    env.update(PYTHONPATH=str(ROOT), **IDENTITY)
    proc = subprocess.run([sys.executable, "-m", "runner", *args], cwd=repo, capture_output=True, text=True,
                          env=env, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _plan(world: Path, gate: str, setup: str = "") -> str:
    return PLAN.format(agent=world / "agent.sh", gate=gate, setup=setup)


def _ledger(repo: Path) -> list[dict]:
    try:
        return ledger(repo)
    except Exception:  # noqa: BLE001 - no state ref yet
        return []


def _calc_repo(world: Path, repo: Path, plan: str) -> Path:
    """The newcomer's small project with its bug, its test, its wheelhouse and `plan`, committed on main."""
    (repo / "plans").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (repo / "conftest.py").write_text("")
    (repo / "requirements-test.txt").write_text("pytest\n")
    (repo / ".gitignore").write_text(".venv/\n__pycache__/\n")
    # the project's own wheelhouse, committed (pip's index stays out of an offline test; the room shows a set-up
    # what its checkout holds and the toolchain, not the test's folders)
    shutil.copytree(world / "wheels", repo / "wheels")
    (repo / "plans" / "calc.md").write_text(plan)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Maintainer")
    git(repo, "config", "user.email", "m@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc with a bug")
    return repo


def test_the_newcomers_python_project_runs_to_a_finish_after_following_the_docs(world, tmp_path):
    (world / "agent.sh").write_text(AGENT)
    os.chmod(world / "agent.sh", 0o755)
    repo = _calc_repo(world, world / "repo", _plan(world, ".venv/bin/pytest -q -p no:cacheprovider"))
    # the newcomer's own, git-ignored venv with pytest: the gate works in their tree
    subprocess.run(["python3", "-m", "venv", str(repo / ".venv")], check=True)
    subprocess.run([str(repo / ".venv/bin/pip"), "install", "-q", "--no-index", "--find-links", str(world / "wheels"),
                    "pytest"], check=True)

    # 1. validate warns, naming setup:; the preflight stops, naming setup:, and records nothing
    checked = cli(repo, "validate", "plans/calc.md")
    assert checked.returncode == 0 and "not tracked by git" in checked.stdout and "setup:" in checked.stdout
    stopped = cli(repo, "session", "plans/calc.md")
    assert stopped.returncode != 0 and "fresh checkout" in stopped.stderr + stopped.stdout
    assert "setup:" in stopped.stderr + stopped.stdout and _ledger(repo) == []

    # 2. a gate the preflight cannot read (`cd . && ...`) exits 127 on the checkout: parked once as a set-up
    #    problem, blaming nobody, burning nothing; the agent's correct work stays on the work branch
    (repo / "plans" / "calc.md").write_text(_plan(world, "cd . && .venv/bin/pytest -q -p no:cacheprovider"))
    git(repo, "commit", "-q", "-am", "gate in a form the preflight cannot read")
    parked = cli(repo, "run", "plans/calc.md")
    assert parked.returncode == 3, parked.stdout + parked.stderr
    sessions = [e for e in _ledger(repo) if e.get("type") == "session"]
    assert len(sessions) == 1, json.dumps(sessions, indent=1)[:3000]
    (one,) = sessions
    assert (one["outcome"], one["blame"], one["rule"]) == ("NeedsHuman", "none", 1)
    reasons = " ".join(one["reasons"])
    assert "set-up problem" in reasons and "cannot start on a fresh checkout of the base" in reasons
    assert "python3 -m venv .venv" in reasons and "retry" in reasons  # the fix is in the report
    assert "Fix add" in git(repo, "log", "--format=%s", "plan-runner/calc")
    assert cli(repo, "run", "plans/calc.md").returncode == 3  # parked once: nothing runs until a human answers
    assert len([e for e in _ledger(repo) if e.get("type") == "session"]) == 1

    # 3. the maintainer follows the docs: a setup: block, the gate by its path in the venv, on main; then retry
    git(repo, "checkout", "-q", "main")
    (repo / "plans" / "calc.md").write_text(_plan(world, ".venv/bin/pytest -q -p no:cacheprovider",
                                                  SETUP.format(wheels="wheels")))
    git(repo, "commit", "-q", "-am", "setup: as the docs show")
    assert cli(repo, "validate", "plans/calc.md").returncode == 0
    assert cli(repo, "reply", "plans/calc.md", "retry").returncode == 0
    done = cli(repo, "run", "plans/calc.md")
    assert done.returncode == 0, done.stdout + done.stderr
    sessions = [e for e in _ledger(repo) if e.get("type") == "session"]
    assert [s["outcome"] for s in sessions] == ["NeedsHuman", "Advanced"]
    assert any("earlier session(s)" in r for r in sessions[1]["reasons"])  # session 1's fix is what is credited
    # What the agent said of its clone, in its session's log (its room, and the area with it, are gone once the plan
    # is finished): setup: ran in the agent's clone, so it could run the gate; and what set-up made is not taken
    # for the agent's leftovers.
    said = cli(repo, "logs", "plans/calc.md", str(sessions[1]["n"])).stdout
    assert "marker: agent-ran-the-gate" in said and "marker: clone-clean" in said, said[-3000:]
    assert "WIP" not in git(repo, "log", "--format=%s", "plan-runner/calc")


def test_the_first_session_sets_up_the_gates_from_the_preflights_cache(world, tmp_path):
    """The preflight builds the set-up cache at the path the gates run in (the plan's own area, which no session
    holds yet), so the first session restores it: `setup:` runs once for the gates, not once for the preflight
    and again for the session (a venv names its own path, so a cache built elsewhere could not be used)."""
    (world / "agent.sh").write_text(AGENT)
    os.chmod(world / "agent.sh", 0o755)
    repo = _calc_repo(world, tmp_path / "repo", _plan(world, ".venv/bin/pytest -q -p no:cacheprovider",
                                                     SETUP.format(wheels="wheels")))
    proc = cli(repo, "session", "plans/calc.md")
    assert proc.returncode == 0, proc.stderr
    said = proc.stderr
    assert said.count("building the cache") == 1, said
    assert " restored" in said or " in place" in said, said
    (session,) = [e for e in _ledger(repo) if e.get("type") == "session"]
    assert session["outcome"] == "Advanced", session["reasons"]
