"""Worlds written the way users write plans, for real small models (docs/real-model.md, "User-written plans").

Each plan states a goal per checkpoint and nothing about tools: a bug fix, a missing function, two checkpoints
in one stage, a bug in two places (a first session tends to fix one and leave the gates red). Each world owns
its gate interpreter: its `setup:` makes a virtualenv with the `python3` on the gates' PATH (no pip, nothing
downloaded), and its gate runs that venv's `python -m unittest` (the standard library: no pytest, nothing of
plan-runner's or the test run's interpreter). So a world runs the same from a plain venv, as an ordinary user,
on any machine with a `python3`; and no absolute path reaches the prompt (greedy decoding of the same prompt
gives the same run).

`check_world` is the independent check: a fresh clone of the pushed branch, the set-up and the gate run by hand,
and per checkpoint a probe of the behaviour it asks for, run with the clone's own venv.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.real_model_world import gate_env, git, ledger, plan_runner_command

SETUP = "python3 -m venv --without-pip .venv"
GATE = ".venv/bin/python -m unittest discover -s tests -t . -q"

FRONT = """\
---
agent:
  backend: anthropic
  model: {model}
  stall_minutes: {stall}
  time_limit_minutes: {time_limit}
  session_tokens: 400000
setup:
  run:
    - {setup}
  cache: [.venv]
gates:
  - name: tests
    run: {gate}
protected: [tests/, checks/]
{budget}---
"""
# `budget.max_sessions` pinned to the stage's `sessions:` bounds a run's time (CI's world, the tables of the earlier
# rounds); a user who writes no `budget:` gets max_sessions 60 and a stage attempt budget of `sessions` x slack 2.0
# (4 for `sessions: 2`), the circuit breaker (the same failing session twice parks) untouched: `budget=None`.
PINNED = "pinned"


@dataclass(frozen=True)
class World:
    name: str
    files: dict[str, str]
    body: str  # the plan after its front matter, as a user writes it
    probes: dict[str, str]  # checkpoint id -> Python printing True when the behaviour it asks for is there
    sessions: int = 2  # `<!-- sessions: N -->` of its stage and max_sessions

    @property
    def checkpoints(self) -> list[str]:
        return list(self.probes)


TEXTUTIL = World(
    "bugfix",
    {
        "textutil.py": 'def shout(text):\n    """The text in capitals, followed by an exclamation mark."""\n'
                       '    return text.lower() + "!"\n\n\n'
                       'def whisper(text):\n    """The text in small letters, trailing off."""\n'
                       '    return text.lower() + "..."\n',
        "tests/__init__.py": "",
        "tests/test_textutil.py": "import unittest\n\nfrom textutil import shout, whisper\n\n\n"
                                  "class TextTest(unittest.TestCase):\n"
                                  "    def test_shout(self):\n        self.assertEqual(shout('hi'), 'HI!')\n\n"
                                  "    def test_whisper(self):\n        self.assertEqual(whisper('HI'), 'hi...')\n",
    },
    "# Text utilities\n\n## Stage 1: Fix shout <!-- sessions: 2 -->\n\n"
    '`shout("hi")` should give `"HI!"` but gives `"hi!"`.\n\n'
    "- [ ] 1.1 Fix shout in textutil.py so that it returns the text in capitals\n",
    {"1.1": "import textutil; print(textutil.shout('hi') == 'HI!' and textutil.whisper('HI') == 'hi...')"},
)

MATHX = World(
    "missing-function",
    {
        "mathx.py": 'def add(a, b):\n    """a plus b."""\n    return a + b\n',
        "tests/__init__.py": "",
        "tests/test_mathx.py": "import unittest\n\nimport mathx\n\n\nclass MathTest(unittest.TestCase):\n"
                               "    def test_add(self):\n        self.assertEqual(mathx.add(2, 3), 5)\n\n"
                               "    def test_mean(self):\n        self.assertEqual(mathx.mean([1, 2, 3, 6]), 3)\n",
    },
    "# Math helpers\n\n## Stage 1: Averages <!-- sessions: 2 -->\n\n"
    "The tests expect a `mean` function that mathx.py does not have yet.\n\n"
    "- [ ] 1.1 Add a function mean(numbers) to mathx.py that returns the average of a list of numbers\n",
    {"1.1": "import mathx; print(mathx.mean([1, 2, 3, 6]) == 3 and mathx.mean([5]) == 5 and mathx.add(2, 3) == 5)"},
)

MONEY = World(
    "two-checkpoints",
    {
        "tools/__init__.py": "",
        "tools/moneyfmt.py": '"""Amounts of money: parsing and formatting."""\n\n\n'
                             'def dollars(cents):\n    """Whole dollars in an amount of cents."""\n'
                             '    return cents // 100\n',
        "tests/__init__.py": "",
        "tests/test_moneyfmt.py": "import unittest\n\nfrom tools.moneyfmt import dollars\n\n\n"
                                  "class DollarsTest(unittest.TestCase):\n"
                                  "    def test_dollars(self):\n        self.assertEqual(dollars(250), 2)\n",
        "checks/__init__.py": "",
        "checks/test_parse.py": "import unittest\n\nfrom tools.moneyfmt import parse_cents\n\n\n"
                                "class ParseTest(unittest.TestCase):\n"
                                "    def test_parse(self):\n        self.assertEqual(parse_cents('1.23'), 123)\n"
                                "        self.assertEqual(parse_cents('10.50'), 1050)\n",
        "checks/test_format.py": "import unittest\n\nfrom tools.moneyfmt import format_cents\n\n\n"
                                 "class FormatTest(unittest.TestCase):\n"
                                 "    def test_format(self):\n        self.assertEqual(format_cents(123), '$1.23')\n"
                                 "        self.assertEqual(format_cents(1050), '$10.50')\n",
    },
    "# Money formatting\n\n## Stage 1: Parse and format amounts <!-- sessions: 2 -->\n\n"
    "Both functions go in tools/moneyfmt.py, beside `dollars`.\n\n"
    '- [ ] 1.1 Add parse_cents(text): "1.23" becomes 123 <!-- verify: .venv/bin/python -m unittest -q checks.test_parse -->\n'
    '- [ ] 1.2 Add format_cents(cents): 123 becomes "$1.23" <!-- verify: .venv/bin/python -m unittest -q checks.test_format -->\n',
    {"1.1": "from tools.moneyfmt import parse_cents, dollars; print(parse_cents('1.23') == 123 and parse_cents('10.50') == 1050 and dollars(250) == 2)",
     "1.2": "from tools.moneyfmt import format_cents, dollars; print(format_cents(123) == '$1.23' and format_cents(1050) == '$10.50' and dollars(250) == 2)"},
)

REPORT = World(
    "red-first",
    {
        "report.py": 'def total(values):\n    """The sum of the values; a missing value (None) is skipped."""\n'
                     '    return sum(values)\n\n\n'
                     'def average(values):\n    """The mean of the values, missing ones (None) skipped; 0 when there are none."""\n'
                     '    return total(values) / len(values)\n',
        "tests/__init__.py": "",
        "tests/test_report.py": "import unittest\n\nfrom report import average, total\n\n\n"
                                "class ReportTest(unittest.TestCase):\n"
                                "    def test_total_skips_missing(self):\n        self.assertEqual(total([1, None, 2]), 3)\n\n"
                                "    def test_average_skips_missing(self):\n        self.assertEqual(average([1, None, 3]), 2)\n\n"
                                "    def test_average_of_nothing(self):\n        self.assertEqual(average([]), 0)\n",
    },
    "# Report\n\n## Stage 1: Missing values <!-- sessions: 2 -->\n\n"
    "The report crashes when a value is missing (None).\n\n"
    "- [ ] 1.1 Make total and average in report.py skip missing values, as their docstrings say\n",
    {"1.1": "import report; print(report.total([1, None, 2]) == 3 and report.average([1, None, 3]) == 2 and report.average([]) == 0)"},
)

WORLDS = {w.name: w for w in (TEXTUTIL, MATHX, MONEY, REPORT)}

# What a correct fix changes, per world: the soundness test applies it and expects every gate, check and probe
# green (and all of them red without it), so a world can be failed only by the model.
SOLUTIONS = {
    "bugfix": {"textutil.py": TEXTUTIL.files["textutil.py"].replace('text.lower() + "!"', 'text.upper() + "!"')},
    "missing-function": {"mathx.py": MATHX.files["mathx.py"] + '\n\ndef mean(numbers):\n    return sum(numbers) / len(numbers)\n'},
    "two-checkpoints": {"tools/moneyfmt.py": MONEY.files["tools/moneyfmt.py"]
                        + "\n\ndef parse_cents(text):\n    return round(float(text) * 100)\n"
                        + '\n\ndef format_cents(cents):\n    return f"${cents // 100}.{cents % 100:02d}"\n'},
    "red-first": {"report.py": REPORT.files["report.py"].replace("sum(values)", "sum(v for v in values if v is not None)")
                  .replace("total(values) / len(values)",
                           "len([v for v in values if v is not None]) and total(values) / len([v for v in values if v is not None])")},
}
PLAN_ID = "work"


def plan_text(world: World, model: str, *, time_limit: str = "20m", stall: str = "5m",
              budget: str | None = PINNED) -> str:
    """The world's plan; `budget=PINNED` pins max_sessions to its stage's sessions, None writes no `budget:` (what a
    user who writes none gets)."""
    pinned = f"budget:\n  max_sessions: {world.sessions}\n" if budget == PINNED else ""
    return FRONT.format(model=model, stall=stall, time_limit=time_limit, setup=SETUP, gate=GATE,
                        budget=pinned) + world.body


def make_world(tmp: Path, world: World, model: str, *, time_limit: str = "20m", stall: str = "5m",
               budget: str | None = PINNED) -> Path:
    """A clone with the world's files and `plans/work.md` on main, pushed to a bare origin."""
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    for name, text in {**world.files, ".gitignore": "__pycache__/\n.venv/\n",
                       f"plans/{PLAN_ID}.md": plan_text(world, model, time_limit=time_limit, stall=stall,
                                                                    budget=budget)}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{world.name}: the project as it is")
    bare = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    return repo


def plain_env(url: str, home: Path) -> dict[str, str]:
    """The environment of `plan-runner run`: this machine's PATH without the test run's own Python (the world
    brings its interpreter), an empty HOME, no git configuration of the machine, the agent pointed at `url`."""
    env = gate_env({k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "ANTHROPIC_", "GITHUB_"))})
    env.update(HOME=str(home), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
               ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-local-model",
               GIT_AUTHOR_NAME="Agent", GIT_AUTHOR_EMAIL="agent@example.invalid",
               GIT_COMMITTER_NAME="Agent", GIT_COMMITTER_EMAIL="agent@example.invalid")
    return env


@dataclass
class WorldRun:
    exit_code: int
    stdout: str
    stderr: str
    ledger: list[dict]
    seconds: float

    @property
    def sessions(self) -> list[dict]:
        return [e for e in self.ledger if e.get("type") == "session"]

    @property
    def credited(self) -> list[str]:
        return sorted({c for s in self.sessions for c in s.get("advanced", ())})


def run_world(repo: Path, url: str, *, timeout_s: float) -> WorldRun:
    home = repo.parent / "home"
    home.mkdir(exist_ok=True)
    started = time.monotonic()
    proc = subprocess.run([*plan_runner_command(), "run", f"plans/{PLAN_ID}.md", "--max-wait", "0"], cwd=repo,
                          capture_output=True, text=True, env=plain_env(url, home), timeout=timeout_s)
    return WorldRun(proc.returncode, proc.stdout, proc.stderr, ledger(repo, PLAN_ID), time.monotonic() - started)


@dataclass
class WorldCheck:
    commit: str | None
    gate_passed: bool = False
    ticked: dict[str, bool] = field(default_factory=dict)
    behaves: dict[str, bool] = field(default_factory=dict)  # the probe of each checkpoint
    verify_passed: dict[str, bool] = field(default_factory=dict)
    work_commits: int = 0
    plan_intact: bool = False
    gate_output: str = ""
    at_credit: dict[str, WorldCheck] = field(default_factory=dict)  # a credited checkpoint, at the crediting commit

    def earned(self, checkpoint: str) -> bool:
        """What a credit of `checkpoint` must mean in the pushed commit: ticked, doing what it asks, gate green."""
        return (self.ticked.get(checkpoint, False) and self.behaves.get(checkpoint, False) and self.gate_passed
                and self.verify_passed.get(checkpoint, True))


_BOX = re.compile(r"(?m)^- \[([ xX])\] (\d+\.\d+) ")
_VERIFY = re.compile(r"<!-- verify: (.+?) -->")


def _bash(cwd: Path, command: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = plain_env("http://127.0.0.1:9", cwd.parent)
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def check_world(tmp: Path, world: World, run: WorldRun | None = None) -> WorldCheck:
    """Clone origin afresh, check out the pushed branch, make its venv and run the gate, the checkpoints' own
    checks and a probe of each checkpoint's behaviour, by hand. With `run`, each credited checkpoint is checked
    the same way at the commit of the session that earned it too (`at_credit`): a later session may break it."""
    clone = tmp / "clean-clone"
    if clone.exists():
        shutil.rmtree(clone)
    git(tmp, "clone", "-q", str(tmp / "origin.git"), str(clone))
    head = git(clone, "rev-parse", "--verify", "-q", f"origin/plan-runner/{PLAN_ID}", check=False)
    if not head:
        return WorldCheck(None)
    earned_at = {cid: s.get("head_sha") for s in (run.sessions if run else ()) for cid in s.get("advanced", ())}
    check = _check_commit(clone, world, head)
    for cid, sha in earned_at.items():
        check.at_credit[cid] = _check_commit(clone, world, sha) if sha and sha != head else check
    return check


def _check_commit(clone: Path, world: World, head: str) -> WorldCheck:
    git(clone, "checkout", "-q", "-f", head)
    git(clone, "clean", "-q", "-fdx", "-e", ".venv")
    assert _bash(clone, SETUP).returncode == 0
    gate = _bash(clone, GATE)
    text = (clone / "plans" / f"{PLAN_ID}.md").read_text()
    original = git(clone, "show", f"origin/main:plans/{PLAN_ID}.md")
    boxes = {cid: mark.lower() == "x" for mark, cid in _BOX.findall(text)}
    check = WorldCheck(head, gate.returncode == 0, gate_output=(gate.stdout + gate.stderr)[-2000:])
    verifies = {m.group(2): _VERIFY.search(line) for line in original.splitlines() if (m := _BOX.match(line + " "))}
    for cid, probe in world.probes.items():
        check.ticked[cid] = boxes.get(cid, False)
        out = _bash(clone, f".venv/bin/python -c {shlex.quote(probe)}", timeout=60)
        check.behaves[cid] = out.stdout.strip() == "True"
        if verifies.get(cid):
            check.verify_passed[cid] = _bash(clone, verifies[cid].group(1)).returncode == 0
    authors = git(clone, "log", "--format=%an", f"origin/main..{head}").splitlines()
    check.work_commits = sum(1 for a in authors if a != "plan-runner")
    check.plan_intact = _protected(_BOX.sub(lambda m: f"- [ ] {m.group(2)} ", text)) == _protected(original)
    return check


def _protected(plan: str) -> tuple[str, list[str]]:
    """What an agent may not change in a plan: its front matter, its headings and its checkpoint lines."""
    front, _, body = plan.strip("\n").partition("\n---\n")
    return front, [line.rstrip() for line in body.splitlines() if line.startswith(("#", "- ["))]


def agrees(run: WorldRun, check: WorldCheck, world: World) -> list[str]:
    """Where the record and the clean clone disagree (empty: every verdict agrees with the evidence)."""
    problems = []
    for cid in world.checkpoints:
        credited = cid in run.credited
        at = check.at_credit.get(cid, check)  # a credit is read at the commit of the session that earned it
        if credited != at.earned(cid):
            problems.append(f"{cid}: credited={credited} but in the clean clone ticked={at.ticked.get(cid)} "
                            f"behaves={at.behaves.get(cid)} gate={at.gate_passed} verify={at.verify_passed.get(cid)}")
    last = run.sessions[-1] if run.sessions else None
    if last is not None:
        recorded = next((g for g in last.get("gates", ()) if g.get("name") == "tests"), None)
        if recorded is not None and recorded.get("passed") is not check.gate_passed:
            problems.append(f"the last session recorded the gate passed={recorded.get('passed')}, the clean clone "
                            f"says {check.gate_passed}")
    if check.commit is not None and not check.plan_intact:
        problems.append("the pushed plan's front matter, headings or checkpoint lines differ from the maintainer's")
    for s in run.sessions:
        if s.get("advanced") and s.get("outcome") != "Advanced":
            problems.append(f"session {s.get('n')} credits {s.get('advanced')} as {s.get('outcome')}")
    return problems


def row(model: str, world: World, run: WorldRun, check: WorldCheck, tokens: int, problems: list[str]) -> dict:
    return {"model": model, "world": world.name, "checkpoints": len(world.checkpoints), "credited": run.credited,
            "sessions": len(run.sessions), "outcomes": [s.get("outcome") for s in run.sessions],
            "tokens": tokens, "seconds": round(run.seconds), "agrees": not problems, "problems": problems,
            "exit": run.exit_code}
