"""`plan-runner demo`: a complete, offline, realistic plan in a temporary repository.

A small real project (tests that really run with unittest), a three-stage
plan, and scripted agent sessions played by real child processes, driven
through the real loop: Advanced, GatesRed then a fix, a rate limit waited
out, a token-budget rollover with a handoff, a lying "done", plain progress,
a stall resumed, a crash fixed, and finally the finished plan.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from runner.core.errors import PlanRunnerError

PLAN = """\
---
agent:
  backend: script
  script: {script}
  stall_minutes: 2s
  time_limit_minutes: 1m
  session_tokens: 10000
gates:
  - name: tests
    run: {python} -m unittest discover -s tests -q
    timeout_minutes: 1m
  - name: style
    run: "! grep -rn 'print(' textstats"
    required: false
budget:
  slack: 2.0
  max_sessions: 20
---
# textstats: word and character statistics

A tiny library that grows a feature per stage. The agent is scripted, the
verdicts are real: every gate really runs, every commit is really in git.

## Stage 1: Word counts <!-- sessions: 2 -->
- [ ] 1.1 `word_count(text)` counts words
- [ ] 1.2 Tests for `word_count`

## Stage 2: Characters <!-- sessions: 3 -->
- [ ] 2.1 `char_freq(text)` with tests
- [ ] 2.2 Document the library in the README

## Stage 3: Command line <!-- sessions: 1 -->
- [ ] 3.1 `python -m textstats FILE` prints the statistics
"""

SCRIPT = r"""
sessions:
  - id: words
    steps:
      - say: "Adding word_count."
      - write: {path: textstats/core.py, content: "def word_count(text):\n    return len(text.split())\n"}
      - tokens: 1800
      - commit: "Add word_count"
      - check: "1.1"
      - commit: "Tick 1.1"
  - id: tests-wrong
    steps:
      - write: {path: tests/test_core.py, content: "import unittest\nfrom textstats.core import word_count\n\n\nclass WordCount(unittest.TestCase):\n    def test_counts(self):\n        self.assertEqual(word_count('a b  c'), 4)\n"}
      - tokens: 1500
      - commit: "Test word_count"
      - check: "1.2"
      - commit: "Tick 1.2"
      - say: "All tests pass. Checkpoint 1.2 is done."
  - id: tests-fixed
    steps:
      - write: {path: tests/test_core.py, content: "import unittest\nfrom textstats.core import word_count\n\n\nclass WordCount(unittest.TestCase):\n    def test_counts(self):\n        self.assertEqual(word_count('a b  c'), 3)\n\n    def test_empty(self):\n        self.assertEqual(word_count(''), 0)\n"}
      - tokens: 1200
      - commit: "Fix the word_count expectation"
      - check: "1.2"
      - commit: "Tick 1.2"
  - id: limited
    steps:
      - rate_limit: {reset_in: 3, message: "429 rate_limit_error: Number of request tokens has exceeded your per-minute rate limit"}
  - id: big
    steps:
      - write: {path: textstats/chars.py, content: "from collections import Counter\n\n\ndef char_freq(text):\n    return dict(Counter(c for c in text if not c.isspace()))\n"}
      - commit: "Add char_freq"
      - tokens: 8500
      - wait_nudge: 2
      - handoff: "char_freq is written and committed. Next: tests for char_freq, then tick 2.1."
      - tokens: 2500
      - say: "still going"
  - id: after-handoff
    steps:
      - write: {path: tests/test_chars.py, content: "import unittest\nfrom textstats.chars import char_freq\n\n\nclass CharFreq(unittest.TestCase):\n    def test_freq(self):\n        self.assertEqual(char_freq('aab b'), {'a': 2, 'b': 2})\n"}
      - tokens: 2000
      - commit: "Test char_freq"
      - check: "2.1"
      - commit: "Tick 2.1"
  - id: liar
    steps:
      - tokens: 300
      - say: "Done! The README is complete and everything works."
  - id: some-docs
    steps:
      - write: {path: README.md, content: "# textstats\n\n`word_count(text)` counts words.\n"}
      - tokens: 900
      - commit: "Start the README"
  - id: stuck
    steps:
      - say: "Thinking about the README..."
      - silent: 30
  - id: resumed
    steps:
      - append: {path: README.md, content: "`char_freq(text)` counts characters.\n"}
      - tokens: 700
      - commit: "Document char_freq"
      - check: "2.2"
      - commit: "Tick 2.2"
  - id: crash
    steps:
      - tokens: 100
      - exit: {code: 1, error: "tool runner crashed: connection reset by peer"}
  - id: cli
    steps:
      - write: {path: textstats/__main__.py, content: "import sys\n\nfrom textstats.chars import char_freq\nfrom textstats.core import word_count\n\ntext = open(sys.argv[1]).read()\nsys.stdout.write(f'{word_count(text)} words, {len(char_freq(text))} distinct characters\\n')\n"}
      - tokens: 1100
      - commit: "Add the command line"
      - check: "3.1"
      - commit: "Tick 3.1"
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def create_demo_repo(root: Path) -> tuple[Path, Path]:
    """A repository with the project, the plan and the agent script; returns (repo, plan path)."""
    repo = root / "textstats"
    if repo.exists():
        raise PlanRunnerError(
            what=f"{repo} exists already",
            why="the demo creates a fresh repository there and will not touch an existing one",
            fix=f"pass another --dir, delete {repo}, or leave --dir out to use a new temporary directory")
    (repo / "textstats").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "plans").mkdir()
    (repo / "textstats" / "__init__.py").write_text('"""Word and character statistics."""\n')
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_smoke.py").write_text(
        "import unittest\n\nimport textstats\n\n\nclass Smoke(unittest.TestCase):\n"
        "    def test_import(self):\n        self.assertTrue(textstats.__doc__)\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    script = root / "agent-script.yaml"
    script.write_text(SCRIPT)
    plan = repo / "plans" / "textstats.md"
    plan.write_text(PLAN.format(script=script, python=sys.executable))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "Demo Maintainer")
    _git(repo, "config", "user.email", "maintainer@example.invalid")
    _git(repo, "config", "commit.gpgsign", "false")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "textstats: empty library and a plan")
    return repo, plan


def run_demo(directory: Path | None = None) -> int:
    from runner.drivers.cli.progress import Progress, print_result, print_sessions_table
    from runner.adapters.render.term import err, out
    from runner.drivers.cli.local import EXIT_FINISHED, local_ports, local_workspace, run_loop

    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="plan-runner-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    repo, plan = create_demo_repo(root)
    err.say(f"plan-runner demo: a real repository at {repo}\n"
            "The agent is scripted; gates, git and every verdict are real.\n", "bold")
    ws = local_workspace(plan)  # isolated in kernel namespaces, like any plan
    ports = local_ports(ws)
    progress = Progress()
    ws.on_event = progress.event
    from runner.drivers.session.lock import plan_lock

    try:
        with plan_lock(ws):  # `plan-runner clean` leaves a running demo's folder alone
            code, result = run_loop(ws, ports, on_result=print_result, on_wait=progress.wait)
    finally:
        progress.stop()
    entries, _ = ports.store.read(result.plan.id)
    print_sessions_table(entries, "demo: every session and its verdict")
    err.say(f"\n{result.message}\nreport: {result.url}\nrepository: {repo} "
            f"(work branch {result.plan.work_branch}, state ref refs/plan-runner/state/{result.plan.id})")
    if code != EXIT_FINISHED:
        out.say(result.report or "")
    return code
