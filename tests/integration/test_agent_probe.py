"""A failed assertion shows what the function's return computed in the test's call (issue 47, sixth round).

On red-first the 1.5B read `AssertionError: 1.3333333333333333 != 2` with `return total(values) / (len(values) or 1)`
and flipped `or 1` and `or 0` four times, never seeing that `len(values)` counts the None. The built-in agent's
run_shell now makes the test's call again (literal arguments only, the command's own interpreter, as any command of
the agent's) and shows the parts of the return that ran. Real files, real unittest, a real Workspace
(runner.backends.anthropic.probe).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from runner.backends.anthropic.tools import Workspace
from tests.git_repos import init_repo

REPORT = ('def total(values):\n    return sum(v for v in values if v is not None)\n\n\n'
          'def average(values):\n    return total(values) / (len(values) or 1)\n\n\n'
          'def label(x, loud=False):\n    if loud:\n        return str(x).upper()\n    return str(x) + "?"\n')
TEST = ("import unittest\n\nfrom report import average, label\n\n\nclass T(unittest.TestCase):\n"
        "    def test_average(self):\n        self.assertEqual(average([1, None, 3]), 2)\n")


def _ws(root: Path, test: str = TEST, report: str = REPORT) -> Workspace:
    init_repo(root, {"report.py": report, "tests/__init__.py": "", "tests/test_report.py": test})
    return Workspace(root, {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
                            "HOME": str(root)})


def _red(ws: Workspace, command: str = f"{sys.executable} -m unittest -q tests.test_report") -> str:
    out = ws.run("run_shell", {"command": command})
    assert not out.ok and "What failed" in out.text, out.text
    return out.text


def test_the_parts_of_the_return_that_ran_are_shown_for_the_tests_call(tmp_path: Path) -> None:
    text = _red(_ws(tmp_path))
    assert text.endswith(
        "\n  In the call average([1, None, 3]), line 6 ran `return total(values) / (len(values) or 1)` with "
        "total(values) = 4; len(values) or 1 = 3; values = [1, None, 3]; len(values) = 3: it returned "
        "1.3333333333333333."), text


def test_the_return_shown_is_the_one_that_ran_with_the_tests_keywords(tmp_path: Path) -> None:
    test = TEST.replace("average([1, None, 3]), 2", "label(3, loud=True), '3!'")
    text = _red(_ws(tmp_path / "a", test))
    assert text.endswith("\n  In the call label(3, loud=True), line 11 ran `return str(x).upper()` with "
                         "str(x) = '3'; x = 3: it returned '3'."), text
    plain = _red(_ws(tmp_path / "b", test.replace("label(3, loud=True)", "label(3)")))
    assert "line 12 ran `return str(x) + '?'` with str(x) = '3'; x = 3: it returned '3?'." in plain, plain


def test_no_call_is_made_again_for_what_is_not_a_failed_assertion_on_literals(tmp_path: Path) -> None:
    """A fixture's value (not a literal) and an error raised in the code: the digest as before, nothing made again."""
    marker = tmp_path / "called"
    report = REPORT.replace("def average(values):\n",
                            f"def average(values):\n    open({str(marker)!r}, 'a').write('x')\n")
    computed = TEST.replace("average([1, None, 3])", "average(list(range(3)))")
    text = _red(_ws(tmp_path / "a", computed, report))
    assert "In the call" not in text and marker.read_text() == "x"  # the test's own call only
    raised = TEST.replace("average([1, None, 3])", "average('x')")
    text = _red(_ws(tmp_path / "b", raised, report))
    assert "TypeError" in text and "In the call" not in text and marker.read_text() == "xx"


def test_the_interpreter_is_the_commands_own_else_python3(tmp_path: Path) -> None:
    """The command named a venv's python: the call is made with it (here the test run's, which a marker tells)."""
    report = REPORT.replace("def average(values):\n", "import sys\n\n\ndef average(values):\n").replace(
        "return total(values) / (len(values) or 1)", "return total(values) / (len(values) or 1) + (sys.executable == "
                                                      f"{sys.executable!r})")
    text = _red(_ws(tmp_path / "a", report=report))
    assert f"sys.executable == {sys.executable!r} = True" in text and "it returned 2.333333333333333." in text, text
    # a command that does not start with a python runs the call with the PATH's python3
    other = _red(_ws(tmp_path / "b", report=report), f"cd . && {sys.executable} -m unittest -q tests.test_report")
    first = shutil.which("python3", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    same = first is not None and subprocess.run([first, "-c", "import sys; print(sys.executable)"], capture_output=True,
                                                 text=True).stdout.strip() == sys.executable
    assert f"= {same}" in other and f"it returned {4 / 3 + same}." in other, other


def test_a_commands_output_names_the_work_tree_relative_to_it(tmp_path: Path) -> None:
    """The work tree's absolute path holds the user's id and a hash of the session: the same run as another user
    read one token more in a traceback, and the 1.5B's greedy calls went another way (docs/real-model.md)."""
    ws = _ws(tmp_path / "tree")
    root = str(ws.root)
    out = ws.run("run_shell", {"command": f"echo {root}/report.py {root} {root}x {root}.d; cat {root}/nothing"})
    assert not out.ok and out.text.startswith("exit code 1\nreport.py . ") and f"{root}x {root}.d" in out.text, out.text
    assert "cat: nothing: No such file or directory" in out.text
    text = _red(ws)
    assert '  File "tests/test_report.py", line 8, in test_average' in text and root not in text
