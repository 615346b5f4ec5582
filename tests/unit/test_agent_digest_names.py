"""The digest of a red run says what a NameError raised in a function means there (issue 47, fifth round).

On red-first the 1.5B wrote `if skip_missing:` into an `average(values)` that the tests call with the values alone;
shown `NameError: name 'skip_missing' is not defined` with the function, it wrote the same text four times. The
digest now says the name is none of the function's parameters nor defined in its module. Real files, real unittest
output (runner.backends.anthropic.failures).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runner.backends.anthropic.failures import digest
from tests.git_repos import init_repo

REPORT = ('def total(values):\n    return sum(v for v in values if v is not None)\n\n\n'
          'def average(values):\n    if skip_missing:\n        return total(values) / len(values)\n    return 0\n')
TEST = ("import unittest\n\nfrom report import average\n\n\nclass T(unittest.TestCase):\n"
        "    def test_average(self):\n        self.assertEqual(average([1, None, 3]), 2)\n")


def _red(root: Path, report: str) -> str:
    init_repo(root, {"report.py": report, "tests/__init__.py": "", "tests/test_report.py": TEST})
    out = subprocess.run([sys.executable, "-m", "unittest", "-q", "tests.test_report"], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 1
    return digest(out.stdout + out.stderr, root)


def test_a_name_the_function_does_not_have_is_said_so(tmp_path: Path) -> None:
    text = _red(tmp_path, REPORT)
    assert "NameError: name 'skip_missing' is not defined" in text
    assert ("  raised in report.py line 6: if skip_missing:\n"
            "  'skip_missing' is not a parameter of average (it takes values), nor a name report.py defines: the "
            "function has no 'skip_missing' to use. Write that line without it, or give skip_missing a value in "
            "average before it.\n  The code under test, average in report.py") in text


def test_other_errors_get_no_such_line(tmp_path: Path) -> None:
    text = _red(tmp_path, REPORT.replace("    if skip_missing:\n", "    if values:\n"))
    assert "AssertionError" in text and "is not a parameter" not in text
