"""The small real project the real-model tests run plans on, and the independent check of a verdict.

`calc.py` has a one-line bug (`add` subtracts); `tests/test_calc.py` is a real pytest test of it;
`plans/fix.md` asks to fix it with the built-in `anthropic` backend and a real pytest gate. The
repository has a bare `origin`, so plan-runner pushes its branch there. `clean_clone_gate` clones
that remote afresh, checks out the pushed commit and runs the gate itself: the verdict must agree
with what it shows.
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


# `python` is this test run's interpreter: run_plan and clean_clone_gate put its directory first on PATH.
# No absolute path of the checkout reaches the plan, so the prompt is byte-identical on every machine
# (greedy decoding of the same prompt gives the same run).
GATE = "python -m pytest -q -p no:cacheprovider tests"


def gate_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with this interpreter's directory first on PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env

CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n"

PLAN = """\
---
agent:
  backend: anthropic
  model: {model}
  stall_minutes: {stall}
  time_limit_minutes: {time_limit}
  session_tokens: 400000
{advisor}gates:
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
3. run_shell `python -m pytest -q tests` (it must pass).
4. run_shell `git commit -am fix-add`.
5. mark_done `1.1`.
6. run_shell `git commit -am tick-1.1`, then answer.

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
    (repo / ".gitignore").write_text("__pycache__/\n")
    # `pytest` and `python -m pytest` both import calc from the root (an agent runs either)
    (repo / "conftest.py").write_text("")
    advisor = f"advisor:\n  model: {advisor_model}\n" if advisor_model else ""
    (repo / "plans" / f"{PLAN_ID}.md").write_text(PLAN.format(
        model=model, time_limit=time_limit, gate=GATE, max_sessions=max_sessions, attempts=attempts, advisor=advisor,
        stall=stall))
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


def run_plan(repo: Path, url: str, *, timeout_s: float) -> RunResult:
    """`plan-runner run plans/fix.md` as a child process, the agent pointed at the model server."""
    import time

    env = gate_env({k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "ANTHROPIC_", "GITHUB_"))})
    home = repo.parent / "home"  # no global git config of the machine's user reaches the run
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-local-model",
               PYTHONPATH=str(Path(__file__).resolve().parents[1]),
               GIT_AUTHOR_NAME="Agent", GIT_AUTHOR_EMAIL="agent@example.invalid",
               GIT_COMMITTER_NAME="Agent", GIT_COMMITTER_EMAIL="agent@example.invalid")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runner", "run", f"plans/{PLAN_ID}.md", "--max-wait", "0"],
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
    proc = subprocess.run(GATE, shell=True, cwd=clone, capture_output=True, text=True, timeout=300, env=gate_env())
    probe = subprocess.run([sys.executable, "-c", "import calc; print(calc.add(2, 3) == 5 and calc.add(-1, 1) == 0)"],
                           cwd=clone, capture_output=True, text=True, timeout=60)
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
