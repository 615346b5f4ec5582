"""The small real project the real-model tests run plans on, and the independent check of a verdict.

`calc.py` has a one-line bug (`add` subtracts); `tests/test_calc.py` is a real unittest test of it;
`plans/fix.md` asks to fix it with the built-in `anthropic` backend and a real gate. The world brings its
own interpreter: its `setup:` makes a virtualenv with the `python3` on the gates' PATH (no pip, nothing
downloaded) and the gate runs that venv's `python -m unittest` (the standard library), so nothing of this
test run's Python, of plan-runner's venv or of /root is needed: it runs the same from a plain venv, as an
ordinary user. The repository has a bare `origin`, so plan-runner pushes its branch there.
`clean_clone_gate` clones that remote afresh, checks out the pushed commit, makes the venv and runs the
gate itself: the verdict must agree with what it shows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from runner.adapters.store.state import ledger_text

PLAN_ID = "fix"
BRANCH = f"plan-runner/{PLAN_ID}"


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """git with no global or system configuration: what other tests plant in ~/.gitconfig cannot reach these runs."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "Maintainer", "GIT_AUTHOR_EMAIL": "m@example.invalid",
           "GIT_COMMITTER_NAME": "Maintainer", "GIT_COMMITTER_EMAIL": "m@example.invalid"}
    proc = subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True, env=env)
    return proc.stdout.strip()


def ledger(repo: Path, plan_id: str = PLAN_ID) -> list[dict]:
    text = ledger_text(repo, f"refs/plan-runner/state/{plan_id}")  # one state ref per plan
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# The world's own interpreter: no absolute path of the checkout or of this interpreter reaches the plan, so the
# prompt is byte-identical on every machine (greedy decoding of the same prompt gives the same run).
SETUP = "python3 -m venv --without-pip .venv"
GATE = ".venv/bin/python -m unittest discover -s tests -t . -q"


def gate_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without this interpreter's directory on PATH, nor a venv's
    or Python's variables: what the world runs, it brings."""
    env = dict(os.environ if base is None else base)
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != here)
    for name in [k for k in env if k == "VIRTUAL_ENV" or k.startswith("PYTHON")]:
        del env[name]
    return env

CALC = "def add(a, b):\n    return a - b\n"
TEST = ("import unittest\n\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n        self.assertEqual(add(-1, 1), 0)\n")

PLAN = """\
---
agent:
  backend: anthropic
  model: {model}
  stall_minutes: {stall}
  time_limit_minutes: {time_limit}
  session_tokens: 400000
{advisor}setup:
  run:
    - {setup}
  cache: [.venv]
gates:
  - name: tests
    run: {gate}
budget:
  max_sessions: {max_sessions}
---
# Fix calc

## Stage 1: Fix add <!-- sessions: {attempts} -->

The function `add(a, b)` in the file `calc.py` returns a - b; `tests/test_calc.py` expects a + b.
Do these steps, one tool call each, and nothing else:
1. read_file `calc.py`.
2. write_file `calc.py` with `add` returning a + b.
3. run_shell `{gate}` (it must pass).
4. run_shell `git commit -am fix-add`.
5. mark_done `1.1` (it commits the tick), then answer.

- [ ] 1.1 Make add in calc.py return a + b
"""


def make_project(tmp: Path, *, model: str, time_limit: str = "10m", max_sessions: int = 1, attempts: int = 1,
                 advisor_model: str | None = None, stall: str = "3m") -> Path:
    """A clone with the buggy calc, its pytest test and `plans/fix.md` on main, pushed to a bare origin."""
    repo = tmp / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "plans").mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TEST)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / ".gitignore").write_text("__pycache__/\n.venv/\n")
    advisor = f"advisor:\n  model: {advisor_model}\n" if advisor_model else ""
    (repo / "plans" / f"{PLAN_ID}.md").write_text(PLAN.format(
        model=model, time_limit=time_limit, gate=GATE, setup=SETUP, max_sessions=max_sessions, attempts=attempts,
        advisor=advisor, stall=stall))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc with a bug in add")
    bare = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    return repo


@dataclass
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    ledger: list[dict]
    seconds: float

    @property
    def sessions(self) -> list[dict]:
        return [e for e in self.ledger if e.get("type") == "session"]


def plan_runner_command() -> list[str]:
    """The `plan-runner` entry point of the venv this test runs in (as a user runs it), else `python -m runner`."""
    found = Path(sys.executable).parent / "plan-runner"
    return [str(found)] if found.exists() else [sys.executable, "-m", "runner"]


def run_plan(repo: Path, url: str, *, timeout_s: float) -> RunResult:
    """`plan-runner run plans/fix.md` as a child process, the agent pointed at the model server."""
    import time

    env = gate_env({k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "ANTHROPIC_", "GITHUB_"))})
    home = repo.parent / "home"  # no global git config of the machine's user reaches the run
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-local-model",
               GIT_AUTHOR_NAME="Agent", GIT_AUTHOR_EMAIL="agent@example.invalid",
               GIT_COMMITTER_NAME="Agent", GIT_COMMITTER_EMAIL="agent@example.invalid")
    started = time.monotonic()
    proc = subprocess.run([*plan_runner_command(), "run", f"plans/{PLAN_ID}.md", "--max-wait", "0"],
                          cwd=repo, capture_output=True, text=True, env=env, timeout=timeout_s)
    return RunResult(proc.returncode, proc.stdout, proc.stderr, ledger(repo, PLAN_ID), time.monotonic() - started)


_TICKED = re.compile(r"(?m)^- \[[xX]\] 1\.1 ")


def _sections(plan_text: str) -> tuple[str, str]:
    """(front matter, everything from the first stage heading on); the text between is free text."""
    _, front, body = plan_text.split("---\n", 2) if plan_text.startswith("---\n") else ("", "", plan_text)
    at = body.find("\n## ")
    return front, body[at + 1:] if at >= 0 else ""


def _protected(plan_text: str) -> tuple[str, list[str]]:
    """What an agent may not change in a plan: the front matter, the stage headings, the checkpoint lines."""
    front, stages = _sections(plan_text)
    return front, [line for line in stages.splitlines() if line.startswith("## ") or re.match(r"- \[.\] \d", line)]


@dataclass
class CleanCheck:
    commit: str | None  # the pushed head of the plan's branch, None if nothing was pushed
    gate_passed: bool
    calc_fixed: bool  # calc.add really adds, in the pushed commit
    ticked: bool  # 1.1 is ticked in the pushed plan file
    work_commits: int  # commits on the branch that are not on main and not plan-runner's own
    gate_output: str
    plan_intact: bool = False  # the pushed plan's front matter, stage and checkpoint lines are the original's (box aside)


def clean_clone_gate(tmp: Path) -> CleanCheck:
    """Clone origin afresh, check out the pushed branch and run the gate there, by hand."""
    clone = tmp / "clean-clone"
    git(tmp, "clone", "-q", str(tmp / "origin.git"), str(clone))
    head = git(clone, "rev-parse", "--verify", "-q", f"origin/{BRANCH}", check=False)
    if not head:
        return CleanCheck(None, False, False, False, 0, "")
    git(clone, "checkout", "-q", head)
    subprocess.run(SETUP, shell=True, cwd=clone, check=True, capture_output=True, timeout=300, env=gate_env())
    proc = subprocess.run(GATE, shell=True, cwd=clone, capture_output=True, text=True, timeout=300, env=gate_env())
    probe = subprocess.run([".venv/bin/python", "-c", "import calc; print(calc.add(2, 3) == 5 and calc.add(-1, 1) == 0)"],
                           cwd=clone, capture_output=True, text=True, timeout=60, env=gate_env())
    plan_text = (clone / "plans" / f"{PLAN_ID}.md").read_text()
    authors = git(clone, "log", "--format=%an", f"origin/main..{head}").splitlines()
    original = git(clone, "show", f"origin/main:plans/{PLAN_ID}.md")
    intact = _protected(_TICKED.sub("- [ ] 1.1 ", plan_text)) == _protected(original)
    return CleanCheck(head, proc.returncode == 0, probe.stdout.strip() == "True", _TICKED.search(_sections(plan_text)[1]) is not None,
                      sum(1 for a in authors if a != "plan-runner"), proc.stdout[-2000:] + proc.stderr[-1000:], intact)


def describe(result: RunResult) -> str:
    """What the ledger says, short, for assertion messages."""
    rows = [{k: s.get(k) for k in ("n", "outcome", "blame", "rule", "reasons", "work_commits", "tokens")}
            for s in result.sessions]
    return json.dumps({"exit": result.exit_code, "sessions": rows}, indent=1) + "\n" + result.stderr[-3000:]
