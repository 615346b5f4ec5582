"""The built-in agent's tools show a small model where the work is (issue 47), and nothing counts that did not
happen: a red run stays a failed call, a refused write writes nothing, a reminder changes nothing.

* a failed run with Python tracebacks ends with a digest: the test's failing line, the error, and the source of
  the function under test with its line numbers (or, for a missing name, what the module defines);
* `write_file` and `edit_file` refuse a file the plan's `protected:` lists, naming the code the test imports;
* when the model stops with no tool call at all, or with its changes uncommitted, it is told so once.

Real files in a real git repository; the digests read real unittest output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.backends.anthropic.failures import digest
from runner.backends.anthropic.tools import Workspace
from tests.git_repos import init_repo

PLAN = ("---\ngates:\n  - name: tests\n    run: python3 -m unittest -q\nprotected: [tests/]\n---\n# Report\n\n"
        "## Stage 1: Sums <!-- sessions: 2 -->\n\n- [ ] 1.1 Make total skip None\n")
REPORT = ('def total(values):\n    """The sum, None skipped."""\n    return sum(values)\n\n\n'
          'def label(x):\n    return str(x)\n')
TEST = ("import unittest\n\nimport report\nfrom report import total\n\n\nclass T(unittest.TestCase):\n"
        "    def test_total(self):\n        self.assertEqual(total([1, None, 2]), 3)\n\n"
        "    def test_label(self):\n        self.assertEqual(report.label(3), 'three')\n\n"
        "    def test_mean(self):\n        self.assertEqual(report.mean([2]), 2)\n")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    init_repo(tmp_path, {"plans/report.md": PLAN, "report.py": REPORT, "tests/__init__.py": "",
                         "tests/test_report.py": TEST, ".gitignore": "__pycache__/\n"})
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path),
           "GIT_CONFIG_NOSYSTEM": "1"}
    return Workspace(tmp_path, env, plan_path="plans/report.md")


def test_a_red_run_ends_with_the_failing_lines_and_the_code_under_test(ws: Workspace) -> None:
    out = ws.run("run_shell", {"command": f"{sys.executable} -m unittest -q"})
    assert not out.ok  # still a failed call
    # after the output as it is (without it the 1.5B copied the test's import line into the module)
    assert out.text.startswith("exit code 1\n") and "Traceback (most recent call last)" in out.text
    text = out.text.split("What failed, read from the output above", 1)[1]
    # raised in the code: the frame's function, numbered as in the file
    assert "tests/test_report.py line 9, in test_total: self.assertEqual(total([1, None, 2]), 3)" in text
    assert "TypeError: unsupported operand" in text and "raised in report.py line 3: return sum(values)" in text
    assert "total in report.py, lines 1-3:\n   1  def total(values):\n" in text and "   3      return sum(values)" in text
    # an assertion in the test: the function its line calls
    assert "AssertionError: '3' != 'three'" in text and "label in report.py, lines 6-7:" in text
    # a missing name: what the module defines
    assert "report.py has no 'mean' yet; it defines: total (line 1), label (line 6)" in text


def test_a_green_run_and_output_without_a_traceback_get_no_digest(ws: Workspace, tmp_path: Path) -> None:
    assert "What failed" not in ws.run("run_shell", {"command": "true"}).text
    assert "What failed" not in ws.run("run_shell", {"command": "echo nope; exit 3"}).text
    assert digest("Traceback (most recent call last):\n  File \"/usr/lib/python3/x.py\", line 1, in f\nValueError\n",
                  tmp_path) == ""  # no frame of the work tree
    assert digest("\x00garbage", tmp_path / "missing") == ""


def test_a_protected_file_is_refused_naming_the_code_it_tests(ws: Workspace) -> None:
    test = ws.root / "tests" / "test_report.py"
    assert ws.run("read_file", {"path": "tests/test_report.py"}).ok
    for name, args in (("edit_file", {"old_string": "3)", "new_string": "4)"}),
                       ("write_file", {"content": "import unittest\n"})):
        out = ws.run(name, {"path": "tests/test_report.py", **args})
        assert not out.ok, out.text
        assert out.text.startswith("refused: tests/test_report.py is protected by the plan (`tests/`)")
        assert "Change the code it tests instead: report.py." in out.text and "The file was not changed." in out.text
        assert test.read_text() == TEST
    new = ws.run("write_file", {"path": "tests/test_more.py", "content": "x = 1\n"})
    assert not new.ok and not (ws.root / "tests" / "test_more.py").exists()
    # the code is not protected
    assert ws.run("edit_file", {"path": "report.py", "old_string": "sum(values)",
                                "new_string": "sum(v for v in values if v is not None)"}).ok


def test_nothing_is_protected_without_a_plan_that_says_so(tmp_path: Path) -> None:
    init_repo(tmp_path, {"tests/test_x.py": "x = 1\n"})
    bare = Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert bare.run("edit_file", {"path": "tests/test_x.py", "old_string": "x = 1", "new_string": "x = 2"}).ok


def test_stopping_with_nothing_done_or_uncommitted_is_said_once_each(ws: Workspace) -> None:
    first = ws.unfinished(0)
    assert first is not None and first.startswith("You have not called any tool")
    assert ws.unfinished(0) is None  # once
    assert ws.unfinished(3) is None  # nothing uncommitted
    (ws.root / "report.py").write_text(REPORT + "\n")
    pending = ws.unfinished(3)
    assert pending is not None and "not committed (report.py)" in pending and "git add -A && git commit" in pending
    assert ws.unfinished(4) is None
    subprocess.run(["git", "status"], cwd=ws.root, capture_output=True, check=True)  # nothing was committed for it
    assert ws._uncommitted() == ["report.py"]


def test_no_reminder_outside_a_plan(tmp_path: Path) -> None:
    init_repo(tmp_path, {"a.py": "x = 1\n"})
    assert Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}).unfinished(0) is None


def test_an_edit_with_an_empty_old_string_adds_at_the_end(ws: Workspace) -> None:
    """The 1.5B adds a function so; refused, it wrote the whole file again and lost what was there."""
    out = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "def mean(v):\n    return 1\n"})
    assert out.ok, out.text
    assert (ws.root / "report.py").read_text() == REPORT + "\n\ndef mean(v):\n    return 1\n"
    assert out.text == ("old_string was empty, so new_string was added at the end of report.py (from line 10; "
                        "11 lines now)")
    broken = ws.run("edit_file", {"path": "report.py", "old_string": " ", "new_string": "def f(:\n"})
    assert not broken.ok and "added at the end of report.py" in broken.text and "not valid Python now" in broken.text
    assert broken.text.endswith("  14> def f(:")
    assert not ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "\n"}).ok
    # the plan file still takes nothing but a box
    plan = (ws.root / "plans" / "report.md").read_text()
    assert not ws.run("edit_file", {"path": "plans/report.md", "old_string": "", "new_string": "- [ ] 1.2 more\n"}).ok
    assert (ws.root / "plans" / "report.md").read_text() == plan


VERIFY_PLAN = ("---\ngates:\n  - name: tests\n    run: python3 -c pass\n---\n# Report\n\n"
               "## Stage 1: Sums <!-- sessions: 2 -->\n\n- [ ] 1.1 Add mean <!-- verify: python3 -c 'import report; report.mean' -->\n")


def test_a_green_gate_runs_the_checkpoints_own_check_and_shows_its_failure(tmp_path: Path) -> None:
    """The gate passes as given when the checkpoint's own test is its `verify:`: the 1.5B ran the gate only, and
    told which command to run next, it went to mark_done instead (two-checkpoints, issue 47's sixth round)."""
    init_repo(tmp_path, {"plans/report.md": VERIFY_PLAN, "report.py": REPORT, ".gitignore": "__pycache__/\n"})
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, plan_path="plans/report.md")
    gate = ws.run("run_shell", {"command": "python3 -c pass"})
    assert gate.ok and "\nThe gate passes, but the checkpoint's own check `python3 -c 'import report; report.mean'` " \
                       "fails now (exit code 1): the checkpoint is not done.\n\nWhat fails" in gate.text, gate.text
    assert "report.py has no 'mean' yet; it defines: total (line 1), label (line 6)" in gate.text
    assert gate.text.endswith("\nChange the code until `python3 -c 'import report; report.mean'` passes.")
    check = ws.run("run_shell", {"command": "python3 -c 'import report; report.mean'"})
    assert not check.ok and "report.py has no 'mean' yet; it defines: total (line 1), label (line 6)" in check.text
    (tmp_path / "report.py").write_text(REPORT + "\n\ndef mean(v):\n    return 1\n")
    for command in ("python3 -c pass", "python3 -c 'import report; report.mean'"):
        green = ws.run("run_shell", {"command": command})
        assert green.ok and green.text.endswith("The gate passes and your changes are not committed yet (report.py). "
                                                "Your next call is run_shell with the command `git add -A && git "
                                                "commit -m 'work'`."), green.text


def test_mark_done_ticks_only_while_the_checkpoints_own_check_passes(tmp_path: Path) -> None:
    init_repo(tmp_path, {"plans/report.md": VERIFY_PLAN, "report.py": REPORT, ".gitignore": "__pycache__/\n"})
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "a",
                              "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@x"},
                   plan_path="plans/report.md")
    (tmp_path / "report.py").write_text(REPORT + "\n# more\n")
    plan = (tmp_path / "plans" / "report.md").read_text()
    for committed in (False, True):  # the check's failure first: a commit would not make it pass
        if committed:
            assert ws.run("run_shell", {"command": "git add -A && git commit -qm work"}).ok
        out = ws.run("mark_done", {"checkpoint": "1.1"})
        assert not out.ok and out.text.startswith("not ticked: checkpoint 1.1's own check fails"), out.text
        assert "report.py has no 'mean' yet" in out.text
        assert (tmp_path / "plans" / "report.md").read_text() == plan
    (tmp_path / "report.py").write_text(REPORT + "\n\ndef mean(v):\n    return 1\n")
    first = ws.run("mark_done", {"checkpoint": "1.1"})
    assert not first.ok and first.text.startswith("commit your work first"), first.text
    (tmp_path / "report.py").write_text(REPORT + "\n\ndef mean(v):\n    return 1\n")
    assert ws.run("run_shell", {"command": "git add -A && git commit -qm mean"}).ok
    done = ws.run("mark_done", {"checkpoint": "1.1"})
    assert done.ok and "- [x] 1.1 Add mean" in (tmp_path / "plans" / "report.md").read_text(), done.text


def test_a_whole_file_write_that_drops_a_function_says_so(ws: Workspace) -> None:
    """The 1.5B asked to add mean wrote a file with mean alone; the tests of what it dropped failed. What no test
    uses may go, said; what the tests use is refused before anything is written
    (tests/unit/test_agent_write_keeps.py)."""
    assert ws.run("read_file", {"path": "report.py"}).ok
    spare = REPORT + "\n\ndef mean(v):\n    return 1\n\n\ndef spare():\n    return 0\n"
    assert ws.run("write_file", {"path": "report.py", "content": spare}).ok
    out = ws.run("write_file", {"path": "report.py", "content": REPORT + "\n\ndef mean(v):\n    return 1\n"})
    assert out.ok and out.text == (f"wrote {len(REPORT) + 28} bytes to report.py. It no longer defines spare, which "
                                   "the file defined before: write_file replaces the whole file. If they are still "
                                   "needed, put them back (edit_file with an empty old_string adds code at the end).")
    refused = ws.run("write_file", {"path": "report.py", "content": "def mean(v):\n    return 1\n"})
    assert not refused.ok and refused.text.startswith("not written: write_file replaces the whole file")
    renamed = ws.run("edit_file", {"path": "report.py", "old_string": "def total(values):", "new_string": "def average(values):"})
    assert renamed.ok and renamed.text.startswith("edited report.py. It no longer defines total, which the file")


def test_a_parameter_no_test_passes_is_refused_naming_the_tests_call(ws: Workspace) -> None:
    """The 1.5B asked to make total skip None gave it a `skip_missing` parameter no test passes; the gate stayed red
    for two sessions. Asked once, before anything is written, with the test's own call."""
    assert ws.run("read_file", {"path": "report.py"}).ok
    added = REPORT.replace("def total(values):", "def total(values, skip_missing=True):")
    out = ws.run("write_file", {"path": "report.py", "content": added})
    assert not out.ok and out.text == (
        "not written: `total` would take 'skip_missing', which no test passes: the tests call it as before "
        "(tests/test_report.py line 9: `self.assertEqual(total([1, None, 2]), 3)`), so a new parameter cannot change "
        "what they check. Keep `def total(values):` and change a line of its body (edit_file, old_string: that line "
        "as it is now) to do what the task asks. It reads now:\n   1  def total(values):\n"
        '   2      """The sum, None skipped."""\n   3      return sum(values)\nreport.py was not changed.')
    assert (ws.root / "report.py").read_text() == REPORT  # nothing written
    other = ws.run("edit_file", {"path": "report.py", "old_string": "def total(values):",
                                 "new_string": "def total(values, ignore=None):"})
    assert not other.ok and "`total` would take 'ignore', which no test passes" in other.text  # another change
    assert (ws.root / "report.py").read_text() == REPORT


def test_a_parameter_no_test_passes_is_refused_unless_the_plan_names_it(ws: Workspace, tmp_path: Path) -> None:
    """Asked once, the 1.5B made the same call again: with a plan, such a parameter is refused every time, unless the
    plan names it (the task asks for it); without a plan, it is asked once per change."""
    assert ws.run("read_file", {"path": "report.py"}).ok
    added = REPORT.replace("def total(values):", "def total(values, skip_missing=True):")
    assert not ws.run("write_file", {"path": "report.py", "content": added}).ok
    again = ws.run("write_file", {"path": "report.py", "content": added})
    assert not again.ok and (ws.root / "report.py").read_text() == REPORT
    named = REPORT.replace("def total(values):", "def total(values, skip=None):")
    assert ws.run("write_file", {"path": "report.py", "content": named}).ok  # the plan names `skip`: "Make total skip"
    # a parameter a test passes (by position here) is the test's own call: no question
    (ws.root / "tests" / "test_report.py").write_text(TEST.replace("report.label(3)", "report.label(3, 'en')"))
    passed = ws.run("edit_file", {"path": "report.py", "old_string": "def label(x):", "new_string": "def label(x, lang):"})
    assert passed.ok and passed.text == "edited report.py"
    # a function no test calls may take what it likes
    (ws.root / "other.py").write_text("def f(a):\n    return a\n")
    assert ws.run("edit_file", {"path": "other.py", "old_string": "def f(a):", "new_string": "def f(a, b=1):"}).ok
    # without a plan file: asked once per change
    init_repo(tmp_path / "bare", {"report.py": REPORT, "tests/__init__.py": "", "tests/test_report.py": TEST})
    free = Workspace(tmp_path / "bare", ws.env)
    assert free.run("read_file", {"path": "report.py"}).ok
    assert not free.run("write_file", {"path": "report.py", "content": added}).ok
    assert free.run("write_file", {"path": "report.py", "content": added}).ok


def test_a_second_definition_of_a_function_is_refused_naming_what_the_tests_want(ws: Workspace) -> None:
    """Asked for parse_cents, the 1.5B added a second `dollars` at the end of the file: a function the checkpoint
    at hand ("Make total skip None") does not name."""
    twice = "def label(x):\n    return 'three'\n"
    out = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": twice})
    assert not out.ok and out.text == (
        "not written: report.py would define the same function more than once (`label` on lines 6, 10): Python keeps "
        "only the last one. To change `label`, edit the one that is there (line 6) instead of adding another; a new "
        "function needs a new name, the one the task asks for; the tests use `mean` "
        "(tests/test_report.py line 15), which report.py does not define yet. report.py was not changed.")
    assert (ws.root / "report.py").read_text() == REPORT
    again = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": twice})
    assert not again.ok and again.text == out.text  # refused every time: Python would keep only the last one
    assert ws.run("read_file", {"path": "report.py"}).ok
    whole = ws.run("write_file", {"path": "report.py", "content": REPORT + "\n\n" + twice})
    assert not whole.ok and "`label` on lines 6, 10" in whole.text and (ws.root / "report.py").read_text() == REPORT
    # an @overload, or a file that had the duplicate already, is not this finding
    overloads = "from typing import overload\n\n\n@overload\ndef f(x: int) -> int: ...\n@overload\ndef f(x: str) -> str: ...\n"
    assert ws.run("write_file", {"path": "ov.py", "content": "x = 1\n"}).ok
    assert ws.run("write_file", {"path": "ov.py", "content": overloads + "def f(x):\n    return x\n"}).ok
    # a new function is no question at all
    assert ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "def mean(v):\n    return 1\n"}).ok


FIXED = "def total(values):\n    return sum(v for v in values if v is not None)\n"


def test_a_new_definition_of_the_function_the_checkpoint_names_replaces_the_old_one(ws: Workspace) -> None:
    """Asked for parse_cents, the 1.5B added each next try as a second `parse_cents` at the end of the file, and never
    made the one-line edit of the one that was there: Python keeps the last, so the new one is what it means."""
    out = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": FIXED})
    assert out.ok and out.text == (
        "old_string was empty, so new_string was added at the end of report.py (from line 5; 6 lines now) (it "
        "replaced the `total` that was on line 1: Python keeps only the last of two definitions, so the earlier one "
        "was taken out)")
    assert (ws.root / "report.py").read_text() == 'def label(x):\n    return str(x)\n\n\n' + FIXED
    made = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": FIXED})
    assert not made.ok and made.text.startswith("not changed: report.py already has this text at line 5")
    # a whole-file write with both, and an edit that adds the new one beside the old, the same
    for call in ({"path": "b.py", "content": REPORT + "\n\n" + FIXED},
                 {"path": "c.py", "old_string": "def label(x):", "new_string": FIXED + "\n\ndef label(x):"}):
        (ws.root / call["path"]).write_text(REPORT)
        assert ws.run("read_file", {"path": call["path"]}).ok
        done = ws.run("write_file" if "content" in call else "edit_file", call)
        assert done.ok and "(it replaced the `total` that was on line 1" in done.text, done.text
        after = (ws.root / call["path"]).read_text()
        assert after.count("def total") == 1 and FIXED in after and "def label(x):\n    return str(x)\n" in after
    # two new definitions (which one is meant?), and the same text twice, stay refused
    (ws.root / "report.py").write_text(REPORT)
    assert ws.run("read_file", {"path": "report.py"}).ok
    other = FIXED.replace("sum(", "len(")
    both = ws.run("write_file", {"path": "report.py", "content": FIXED + "\n\n" + other + "\n\n" + REPORT[REPORT.index("def label"):]})
    assert not both.ok and "`total` on lines 1, 5" in both.text and (ws.root / "report.py").read_text() == REPORT
    same = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": REPORT[:REPORT.index("\n\n")]})
    assert not same.ok and "`total` on lines 1, 10" in same.text and (ws.root / "report.py").read_text() == REPORT


def test_without_a_checkpoint_naming_it_a_second_definition_stays_refused(tmp_path: Path) -> None:
    """What the change means is the checkpoint's to say: without a plan nothing names `total`."""
    init_repo(tmp_path, {"report.py": REPORT, "tests/__init__.py": "", "tests/test_report.py": TEST})
    free = Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    out = free.run("edit_file", {"path": "report.py", "old_string": "", "new_string": FIXED})
    assert not out.ok and "`total` on lines 1, 10" in out.text and (tmp_path / "report.py").read_text() == REPORT


def test_indented_code_added_at_the_end_of_a_function_is_refused_showing_the_function(ws: Workspace) -> None:
    """The 1.5B added `    return int(text.replace('.', '')) * 100` at the end of the file again and again, meaning
    to change parse_cents's return line: dead code each time, and each time a change no stuck rule sees."""
    for added in ("    x = str(x) + '!'", "    return str(x)\n    return 1\n", "    return str(x)"):
        out = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": added})
        assert not out.ok and out.text == (
            "not written: new_string is indented, so at the end of report.py it would go inside `label`, after its "
            "last line (line 7: `return str(x)`), which runs first. To change a line of `label`, call edit_file with "
            "old_string that line as it is now and new_string the line changed. `label` reads:\n   6  def label(x):\n"
            "   7      return str(x)\nreport.py was not changed."), added
        assert (ws.root / "report.py").read_text() == REPORT
    # a method after a class, and unindented code, are added as asked
    assert ws.run("write_file", {"path": "k.py", "content": "class K:\n    a = 1\n"}).ok
    assert ws.run("edit_file", {"path": "k.py", "old_string": "", "new_string": "    def f(self):\n        return 1\n"}).ok
    assert ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "def mean(v):\n    return 1\n"}).ok


def test_an_indented_return_added_at_the_end_replaces_the_last_functions_return(ws: Workspace) -> None:
    """The 1.5B added `    return int(text.replace('.', '')) * 100` at the end of moneyfmt.py in two rounds, meaning
    parse_cents's `return int(text) * 100`; refused, it wrote the whole file as that one line (issue 47, sixth
    round). A line after a function's final return never runs: the return it brings is the one meant."""
    out = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "        return str(x) + '!'\n"})
    assert out.ok and out.text == (
        "new_string is indented, so it belongs inside `label`, whose last line is a return: a line after it would "
        "never run, so it replaced that return instead. Line 7 of report.py was `return str(x)` and is now "
        "`return str(x) + '!'`.")
    assert (ws.root / "report.py").read_text() == REPORT.replace("return str(x)\n", "return str(x) + '!'\n")
    again = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "        return str(x) + '!'\n"})
    assert not again.ok and again.text.startswith("not changed: report.py already has this text at line 7"), again.text
    # a last function that does not end with a return on a line of its own keeps the refusal
    for body in ("def f(a):\n    print(a)\n", "def f(a): return a\n", "def f(a):\n    a += 1; return a\n"):
        assert ws.run("write_file", {"path": "k.py", "content": body}).ok
        kept = ws.run("edit_file", {"path": "k.py", "old_string": "", "new_string": "    return a * 2"})
        assert not kept.ok and kept.text.startswith("not written: new_string is indented"), (body, kept.text)
        assert (ws.root / "k.py").read_text() == body


def test_a_whole_file_write_that_does_not_parse_keeps_what_the_tests_use(ws: Workspace) -> None:
    """Refused the indented append, the 1.5B wrote moneyfmt.py whole as the one indented `return` line: a text that
    does not parse defines nothing, so it drops every function the tests import."""
    assert ws.run("read_file", {"path": "report.py"}).ok
    out = ws.run("write_file", {"path": "report.py", "content": "    return sum(v for v in values if v is not None)"})
    assert not out.ok and out.text.startswith("not written: write_file replaces the whole file, and this text no "
                                              "longer defines `total`, `label`, which the tests use"), out.text
    assert (ws.root / "report.py").read_text() == REPORT


def test_the_content_state_is_the_files_alone_committed_or_not(ws: Workspace) -> None:
    """What `toggle` reads: the same files give the same state whether committed or not; HEAD does not count."""
    start = ws.content_state()
    assert start.startswith("files:")
    (ws.root / "report.py").write_text(REPORT + "x = 1\n")
    changed = ws.content_state()
    assert changed != start
    assert ws.run("run_shell", {"command": "git commit -qam x"}).ok
    assert ws.content_state() == changed  # committed: the same files
    (ws.root / "report.py").write_text(REPORT)
    assert ws.content_state() == start  # back to the first content, HEAD elsewhere
    (ws.root / "new.txt").write_text("n\n")
    assert ws.content_state() not in (start, changed)
    (ws.root / "new.txt").unlink()
    (ws.root / "report.py").unlink()
    assert ws.content_state() not in (start, changed)


def test_a_module_importing_from_itself_is_refused_naming_what_to_define(ws: Workspace) -> None:
    """Shown "cannot import name 'parse_cents' from 'tools.moneyfmt'", the 1.5B added the test's import line to
    tools/moneyfmt.py itself, then again with more names (issue 47, sixth round)."""
    out = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "from report import total, mean"})
    assert not out.ok and out.text == (
        "not written: report.py would import from itself (line 10: `from report import total, mean`): a module cannot "
        "take a name from itself, so what the tests import from report.py must be defined in it. To add mean, define "
        "it in report.py: edit_file with an empty old_string and new_string the whole function, its `def mean` line "
        "with the parameters the tests pass, and its body (it goes at the end). report.py was not changed.")
    assert (ws.root / "report.py").read_text() == REPORT
    plain = ws.run("edit_file", {"path": "report.py", "old_string": "def total(values):", "new_string": "import report\n\n\ndef total(values):"})
    assert not plain.ok and "would import from itself (line 1: `import report`)" in plain.text and "To add" not in plain.text
    # another module's import is no question; nor is a self-import the file had already
    assert ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "import os"}).ok
    (ws.root / "pkg").mkdir()
    (ws.root / "pkg" / "m.py").write_text("from pkg.m import f  # odd, but it was there\n\n\ndef f():\n    return 1\n")
    assert ws.run("edit_file", {"path": "pkg/m.py", "old_string": "return 1", "new_string": "return 2"}).ok


def test_importing_a_name_from_the_module_itself_keeps_the_definition_it_had(ws: Workspace) -> None:
    """Asked for parse_cents, the 1.5B wrote moneyfmt.py whole as `from tools.moneyfmt import dollars` and a right
    parse_cents: keep dollars, it meant (issue 47, sixth round)."""
    assert ws.run("read_file", {"path": "report.py"}).ok
    content = "from report import label\n\n\ndef total(values):\n    return sum(v for v in values if v is not None)\n"
    out = ws.run("write_file", {"path": "report.py", "content": content})
    kept = "def label(x):\n    return str(x)\n\n\ndef total(values):\n    return sum(v for v in values if v is not None)\n"
    assert out.ok and out.text == (
        f"wrote {len(kept)} bytes to report.py (a module cannot import from itself, so the line importing `label` from "
        "report was replaced by `label` as report.py had it)"), out.text
    assert (ws.root / "report.py").read_text() == kept
    # the same write again gives the same file: said so (the 1.5B wrote it again and again, told "wrote 204 bytes")
    again = ws.run("write_file", {"path": "report.py", "content": "from report import label, total"})
    assert again.ok and again.text.startswith("report.py already has exactly this text (a module cannot import from "
                                              "itself") and again.text.endswith(": nothing changed."), again.text
    assert (ws.root / "report.py").read_text() == kept
    # a name the module never defined is refused, naming how to define it; one it defined, named to keep
    mixed = ws.run("write_file", {"path": "report.py", "content": content.replace("import label", "import label, mean")})
    assert not mixed.ok and mixed.text.endswith(
        "To add mean, define it in report.py: edit_file with an empty old_string and new_string the whole "
        "function, its `def mean` line with the parameters the tests pass, and its body (it goes at the end). label: "
        "report.py defines it already; keep it as it is. report.py was not changed."), mixed.text
    # the checkpoint's own words give the signature when they write it
    plan = (ws.root / "plans" / "report.md").read_text()
    (ws.root / "plans" / "report.md").write_text(plan.replace("Make total skip None", "Add mean(values, empty=0)"))
    named = ws.run("edit_file", {"path": "report.py", "old_string": "", "new_string": "from report import mean"})
    assert not named.ok and "new_string `def mean(values, empty=0):` and its body (it goes at the end)" in named.text
