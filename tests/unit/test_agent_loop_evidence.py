"""A named loop comes with where the work stands (runner.backends.anthropic: `Workspace.gate_now`, the loop).

The 1.5B on red-first wrote a refused `skip_missing` parameter again and again and never ran the gate in that
session (docs/real-model.md, issue 47, fourth round): told it went round in circles, it had no failure to read
again. So the text that names the first loop carries the plan's gate run there and then, the first failing command
shown by its digest (the failing test line, the error, where it was raised, the function under test), or that
they pass. Information only: a failed gate here is no verdict, and plan-runner runs the gates itself.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from runner.backends.anthropic.backend import LOOP_TEXT
from runner.backends.anthropic.tools import Workspace
from tests.agent_helpers import fast_backend, make_request, user_texts
from tests.git_repos import init_repo
from tests.servers.messages import MessagesServer, reply, tool_use

GATE = f"{sys.executable} -m unittest -q"
PLAN = (f"---\ngates:\n  - name: tests\n    run: {GATE}\n---\n# Report\n\n## Stage 1: Sums\n\n"
        "- [ ] 1.1 Make total skip missing values\n")
REPORT = 'def total(values):\n    """The sum; None skipped."""\n    return sum(values)\n'
FILES = {"plans/work.md": PLAN, "report.py": REPORT, "tests/__init__.py": "",
         "tests/test_report.py": "import unittest\n\nfrom report import total\n\n\nclass T(unittest.TestCase):\n"
                                 "    def test_total(self):\n        self.assertEqual(total([1, None, 2]), 3)\n"}


def _workspace(root: Path, files: dict[str, str]) -> Workspace:
    init_repo(root, files)
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
    return Workspace(root, env, plan_path="plans/work.md")


def test_where_the_work_stands_is_the_failing_gate_with_its_digest(tmp_path: Path) -> None:
    text = _workspace(tmp_path, FILES).gate_now()
    assert text.startswith(f"Where the work stands: `{GATE}` fails now (exit code 1).\n\nWhat fails (the tests say")
    assert "tests/test_report.py line 8, in test_total: self.assertEqual(total([1, None, 2]), 3)" in text
    assert "TypeError: unsupported operand" in text and "raised in report.py line 3: return sum(values)" in text
    assert "   1  def total(values):" in text


def test_a_green_gate_says_so_and_no_plan_says_nothing(tmp_path: Path) -> None:
    fixed = {**FILES, "report.py": REPORT.replace("sum(values)", "sum(v for v in values if v is not None)")}
    assert _workspace(tmp_path / "green", fixed).gate_now() == f"Where the work stands: `{GATE}` pass now."
    init_repo(tmp_path / "bare", {"report.py": REPORT})
    assert Workspace(tmp_path / "bare", {"PATH": os.environ["PATH"]}).gate_now() == ""


def test_the_named_loop_carries_it_to_the_model(tmp_path: Path) -> None:
    """Three identical refused writes: the fourth request's last user turn names the loop, then the gate's digest."""
    init_repo(tmp_path / "repo", FILES)
    request = dataclasses.replace(make_request(tmp_path, "http://127.0.0.1:9"), plan_path=tmp_path / "repo" / "plans" / "work.md")
    write = tool_use("write_file", {"path": "report.py", "content": "x = 1\n"})  # never read: refused, unchanged
    with MessagesServer() as srv:
        srv.enqueue(reply(write), reply(write), reply(write), reply("I stop."))
        fast_backend().run(dataclasses.replace(request, env={**request.env, "ANTHROPIC_BASE_URL": srv.url}))
        bodies = [r.json for r in srv.message_requests]
    assert len(bodies) == 4
    named = [t for t in user_texts(bodies[3]) if t.startswith(LOOP_TEXT.split(":")[0])]
    assert len(named) == 1 and f"\n\nWhere the work stands: `{GATE}` fails now (exit code 1)." in named[0]
    assert "raised in report.py line 3: return sum(values)" in named[0]
    assert (tmp_path / "repo" / "report.py").read_text() == REPORT
