"""The built-in agent's write_file keeps what the tests use (runner.backends.anthropic.tools, `_guard_dropped`).

Asked to add `parse_cents` beside `dollars`, the 1.5B wrote tools/moneyfmt.py with `parse_cents` alone, again and
again (docs/real-model.md, issue 47, fourth round): write_file replaces the whole file, the gate went red on the
import of `dollars`, it wrote `dollars` back alone, and the two files took turns until the context was full. A
whole-file write that no longer defines a function the tests import is refused before anything is written, naming
the test's line; one that drops what no test uses is written (and says so); edit_file is not guarded (a rename says
so). The write is a real file in a real git repository; the tests are read from the work tree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runner.backends.anthropic.tools import Workspace
from tests.git_repos import init_repo

MONEY = '"""Amounts."""\n\n\ndef dollars(cents):\n    return cents // 100\n'
PARSE = "def parse_cents(text):\n    return int(text) * 100\n"
TESTS = {"tests/__init__.py": "",
         "tests/test_moneyfmt.py": "import unittest\n\nfrom tools.moneyfmt import dollars\n\n\n"
                                   "class T(unittest.TestCase):\n    def test_dollars(self):\n"
                                   "        self.assertEqual(dollars(250), 2)\n",
         "checks/__init__.py": "",
         "checks/test_parse.py": "import unittest\n\nimport tools.moneyfmt as m\n\n\nclass T(unittest.TestCase):\n"
                                 "    def test_parse(self):\n        self.assertEqual(m.parse_cents('1.23'), 123)\n"}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    init_repo(tmp_path, {"tools/__init__.py": "", "tools/moneyfmt.py": MONEY, **TESTS})
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path),
           "GIT_CONFIG_NOSYSTEM": "1"}
    workspace = Workspace(tmp_path, env)
    assert workspace.run("read_file", {"path": "tools/moneyfmt.py"}).ok
    return workspace


def test_a_write_that_drops_a_function_the_tests_import_is_refused(ws: Workspace) -> None:
    out = ws.run("write_file", {"path": "tools/moneyfmt.py", "content": PARSE})
    assert not out.ok
    assert out.text == ("not written: write_file replaces the whole file, and this text no longer defines `dollars`, "
                        "which the tests use (`dollars`: tests/test_moneyfmt.py line 3). Keep what the file has: to "
                        "add a function, call edit_file with an empty old_string and the new function as new_string "
                        "(it goes at the end); to change a line, edit_file with that line as old_string. "
                        "tools/moneyfmt.py was not changed.")
    assert (ws.root / "tools" / "moneyfmt.py").read_text() == MONEY


def test_a_write_that_keeps_it_or_drops_only_what_no_test_uses_is_written(ws: Workspace) -> None:
    both = MONEY + "\n\n" + PARSE
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": both + "\n\ndef spare():\n    return 0\n"}).ok
    dropped = ws.run("write_file", {"path": "tools/moneyfmt.py", "content": both})
    assert dropped.ok and "It no longer defines spare" in dropped.text
    assert (ws.root / "tools" / "moneyfmt.py").read_text() == both
    # used through `import tools.moneyfmt as m; m.parse_cents(...)` too
    gone = ws.run("write_file", {"path": "tools/moneyfmt.py", "content": MONEY})
    assert not gone.ok and "`parse_cents`: checks/test_parse.py line 8" in gone.text


def test_edit_file_may_rename_and_says_so(ws: Workspace) -> None:
    out = ws.run("edit_file", {"path": "tools/moneyfmt.py", "old_string": "def dollars(cents):",
                               "new_string": "def parse_cents(text):"})
    assert out.ok and out.text.startswith("edited tools/moneyfmt.py. It no longer defines dollars")
