"""The digest of a red run says what a parameter left to its default does in the failing call (issue 47).

On red-first the 1.5B, asked to make `total` skip missing values, wrote `total(values, skip_missing=False)` with
`if skip_missing:` ahead of the old `return sum(values)`; the tests call `total([1, None, 2])` and `average` calls
`total(values)`, so the branch it meant never ran and the TypeError stayed where it was. The digest now says which
call leaves the parameter to its default and which `if` sees that default. Real files, real unittest output
(runner.backends.anthropic.failures).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runner.backends.anthropic.failures import digest
from tests.git_repos import init_repo

FLAGGED = ('def total(values, skip_missing=False):\n    """The sum; None skipped."""\n    if skip_missing:\n'
           '        return sum(v for v in values if v is not None)\n    return sum(values)\n\n\n'
           'def average(values):\n    return total(values) / len(values)\n')
TEST = ("import unittest\n\nfrom report import average, total\n\n\nclass T(unittest.TestCase):\n"
        "    def test_total(self):\n        self.assertEqual(total([1, None, 2]), 3)\n\n"
        "    def test_average(self):\n        self.assertEqual(average([1, None, 3]), 2)\n")


def _red(root: Path, report: str, test: str = TEST) -> str:
    init_repo(root, {"report.py": report, "tests/__init__.py": "", "tests/test_report.py": test})
    out = subprocess.run([sys.executable, "-m", "unittest", "-q", "tests.test_report"], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 1
    return digest(out.stdout + out.stderr, root)


def test_the_tests_call_leaving_the_flag_to_its_default_is_named(tmp_path: Path) -> None:
    text = _red(tmp_path, FLAGGED, TEST.replace("    def test_average(self):\n        self.assertEqual(average([1, None, 3]), 2)\n", ""))
    assert ("  raised in report.py line 5: return sum(values)\n  The code under test, total in report.py, lines 1-5:\n"
            "   1  def total(values, skip_missing=False):\n") in text
    assert text.endswith(
        "\n  `total([1, None, 2])` passes no 'skip_missing', so skip_missing is False there (total's default), and that "
        "is what `if skip_missing` (line 3) of total sees in this call. What the test checks must happen in such a "
        "call: without 'skip_missing', or with `skip_missing=True` as total's default, which takes that branch.")


def test_a_call_in_the_code_between_the_test_and_the_function_is_named_too(tmp_path: Path) -> None:
    text = _red(tmp_path, FLAGGED, TEST.replace("    def test_total(self):\n        self.assertEqual(total([1, None, 2]), 3)\n\n", ""))
    assert "- tests/test_report.py line 8, in test_average: self.assertEqual(average([1, None, 3]), 2)" in text
    assert "`total(values)` passes no 'skip_missing', so skip_missing is False there (total's default)" in text


def test_an_assertion_on_a_function_whose_if_sees_the_default(tmp_path: Path) -> None:
    label = "def label(x, loud=False):\n    if not loud:\n        return str(x)\n    return str(x).upper()\n"
    test = ("import unittest\n\nfrom report import label\n\n\nclass T(unittest.TestCase):\n"
            "    def test_label(self):\n        self.assertEqual(label('a'), 'A')\n")
    text = _red(tmp_path, label, test)
    assert "AssertionError: 'a' != 'A'" in text
    assert "`label('a')` passes no 'loud', so loud is False there (label's default), and that is what `if not " \
           "loud` (line 2) of label sees in this call. What the test checks must happen in such a call: without " \
           "'loud', or with a default that does it." in text  # False takes `if not loud` already: no value named


def test_a_call_that_passes_it_or_a_default_no_if_reads_gets_no_such_line(tmp_path: Path) -> None:
    only_total = TEST.replace("    def test_average(self):\n        self.assertEqual(average([1, None, 3]), 2)\n", "")
    for n, call in enumerate(("total([1, None, 2], False)", "total([1, None, 2], skip_missing=False)")):
        passed = _red(tmp_path / str(n), FLAGGED, only_total.replace("total([1, None, 2])", call))
        assert "TypeError" in passed and "passes no" not in passed
    unread = FLAGGED.replace("    if skip_missing:\n        return sum(v for v in values if v is not None)\n", "")
    plain = _red(tmp_path / "b", unread)
    assert "TypeError" in plain and "passes no" not in plain


def test_the_call_read_is_the_one_that_failed(tmp_path: Path) -> None:
    """The test's line also calls total with the flag, but average's own call of total is the one that raised."""
    test = TEST.replace("average([1, None, 3])", "average([1, None, 3]) + total([1], skip_missing=True)")
    text = _red(tmp_path, FLAGGED, test.replace("    def test_total(self):\n        self.assertEqual(total([1, None, 2]), 3)\n\n", ""))
    assert "`total(values)` passes no 'skip_missing'" in text


def test_a_default_passed_on_by_a_caller_is_followed_to_the_tests_call(tmp_path: Path) -> None:
    """The 1.5B gave `average` a `skip_missing=False` too and passed it on to `total`; the test's
    `average([1, None, 3])` leaves both to their defaults (issue 47, sixth round)."""
    both = FLAGGED.replace("def average(values):\n    return total(values) / len(values)\n",
                           "def average(values, skip_missing=False):\n    return total(values, skip_missing) / len(values)\n")
    text = _red(tmp_path / "a", both, TEST.replace("    def test_total(self):\n        self.assertEqual(total([1, None, 2]), 3)\n\n", ""))
    assert text.endswith(
        "\n  `average([1, None, 3])` passes no 'skip_missing', so skip_missing is False there (average's default), "
        "which average passes on to total, and that is what `if skip_missing` (line 3) of total sees in this call. "
        "What the test checks must happen in such a call: without 'skip_missing', or with `skip_missing=True` as "
        "average's default, which takes that branch.")
    # a value of the caller's own (not a parameter left to its default) is not followed
    own = both.replace("def average(values, skip_missing=False):\n", "def average(values):\n    skip_missing = False\n")
    mine = _red(tmp_path / "b", own, TEST.replace("    def test_total(self):\n        self.assertEqual(total([1, None, 2]), 3)\n\n", ""))
    assert "TypeError" in mine and "passes no" not in mine
