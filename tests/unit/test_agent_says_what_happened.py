"""The built-in agent's tools say what happened, no more (issue 47, fourth round; docs/real-model.md).

On two-checkpoints the 1.5B wrote a `parse_cents` that computed `cents = ...` and ended there, ran the check five
times ("AssertionError: None != 123"), replaced the line with itself (told "edited") and wrote the file again with
the same text (told "wrote 219 bytes"). Now: the digest of a red run says when the function under test returns no
value; an edit whose old_string and new_string are the same is refused as changing nothing; a write of the text the
file already has says nothing changed (and still names a syntax error). Real files, real unittest output.
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

MONEY = 'def dollars(cents):\n    return cents // 100\n\n\ndef parse_cents(text):\n    """Cents."""\n    cents = int(text.replace(".", ""))\n'
CHECK = ("import unittest\n\nfrom tools.moneyfmt import parse_cents\n\n\nclass T(unittest.TestCase):\n"
         "    def test_parse(self):\n        self.assertEqual(parse_cents('1.23'), 123)\n")


def _tree(root: Path, money: str) -> Path:
    init_repo(root, {"tools/__init__.py": "", "tools/moneyfmt.py": money, "checks/__init__.py": "",
                     "checks/test_parse.py": CHECK})
    return root


def _red(root: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "unittest", "-q", "checks.test_parse"], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 1
    return digest(out.stdout + out.stderr, root)


def test_a_function_under_test_that_returns_nothing_is_named(tmp_path: Path) -> None:
    text = _red(_tree(tmp_path, MONEY))
    assert "AssertionError: None != 123" in text
    assert text.endswith("   7      cents = int(text.replace(\".\", \"\"))\n"
                         "  parse_cents has no `return` with a value, so a call of it gives None.")


@pytest.mark.parametrize("body", ["    return int(text)\n", "    raise NotImplementedError\n",
                                  "    for c in text:\n        yield c\n"])
def test_one_that_returns_raises_or_yields_is_not(tmp_path: Path, body: str) -> None:
    money = MONEY.replace('    cents = int(text.replace(".", ""))\n', body)
    text = _red(_tree(tmp_path, money))
    assert "The code under test, parse_cents" in text and "has no `return`" not in text


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(_tree(tmp_path, MONEY), {"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert workspace.run("read_file", {"path": "tools/moneyfmt.py"}).ok
    return workspace


def test_an_edit_of_a_line_into_itself_is_refused(ws: Workspace) -> None:
    line = '    cents = int(text.replace(".", ""))'
    out = ws.run("edit_file", {"path": "tools/moneyfmt.py", "old_string": line, "new_string": line})
    assert not out.ok and out.text.startswith("old_string and new_string are the same, so tools/moneyfmt.py would "
                                              "not change; it was not changed.")


def test_a_write_of_the_text_the_file_has_says_nothing_changed(ws: Workspace) -> None:
    out = ws.run("write_file", {"path": "tools/moneyfmt.py", "content": MONEY})
    assert out.ok and out.text == "tools/moneyfmt.py already has exactly this text: nothing changed."
    changed = ws.run("write_file", {"path": "tools/moneyfmt.py", "content": MONEY + "\n\nX = 1\n"})
    assert changed.ok and changed.text.startswith("wrote ")


def test_a_git_add_without_a_commit_says_the_commit_is_still_to_make(ws: Workspace) -> None:
    """Told to commit, the 1.5B ran `git add -A` alone and went back to mark_done (refused) four times."""
    (ws.root / "tools/moneyfmt.py").write_text(MONEY + "\n\nX = 1\n")
    out = ws.run("run_shell", {"command": "git add -A"})
    assert out.ok and out.text.endswith("\nStaged, not committed (tools/moneyfmt.py): only a commit counts. Your next "
                                        "call is run_shell with the command `git commit -m 'work'`.")
    committed = ws.run("run_shell", {"command": "git add -A && git commit -qm work"})
    assert committed.ok and "Staged" not in committed.text
    again = ws.run("run_shell", {"command": "git add -A"})  # nothing staged: nothing said
    assert again.ok and "Staged" not in again.text


def test_int_given_a_text_with_a_point_names_the_point(tmp_path: Path) -> None:
    """The 1.5B's parse_cents ran int() on '1.23' and flipped `* 100` and `// 100` after it, again and again."""
    text = _red(_tree(tmp_path, MONEY.replace('    cents = int(text.replace(".", ""))\n', "    return int(text) * 100\n")))
    assert "ValueError: invalid literal for int() with base 10: '1.23'" in text
    assert ("  raised in tools/moneyfmt.py line 7: return int(text) * 100\n"
            "  int() reads a whole number written in digits alone: '1.23' has '.' in it.\n") in text


@pytest.mark.parametrize(("body", "named"), [("    return int(text.replace('.', '') + '.')\n", "'123.' has '.'"),
                                             ("    return int(' -' + text.replace('.', ',') + ' ')\n", "' -1,23 ' has ','")])
def test_only_the_characters_int_does_not_read_are_named(tmp_path: Path, body: str, named: str) -> None:
    """A sign and spaces around the number are int()'s own; the rest is named."""
    text = _red(_tree(tmp_path, MONEY.replace('    cents = int(text.replace(".", ""))\n', body)))
    assert f"  int() reads a whole number written in digits alone: {named} in it.\n" in text


def test_two_numbers_a_power_of_ten_apart_are_named(tmp_path: Path) -> None:
    """The 1.5B's parse_cents gave 12300 for 123 (`* 100` too many); it added `+ 100`, then another, reading
    "12300 != 123" four times (issue 47, sixth round)."""
    body = "    return int(text.replace('.', '')) * 100\n"
    text = _red(_tree(tmp_path, MONEY.replace('    cents = int(text.replace(".", ""))\n', body)))
    assert "  AssertionError: 12300 != 123\n  12300 is 123 * 100: one side is 100 times the other.\n" in text


@pytest.mark.parametrize(("body", "note"), [("    return int(text.replace('.', '')) * 2\n", False),
                                            ("    return int(text.replace('.', '')) // 10\n", False),
                                            ("    return float(text)\n", True),
                                            ("    return 0\n", False)])
def test_only_a_power_of_ten_is_named(tmp_path: Path, body: str, note: bool) -> None:
    """246, 12 and 0 against 123 are no scale; 1.23 is (123 is 1.23 * 100)."""
    text = _red(_tree(tmp_path, MONEY.replace('    cents = int(text.replace(".", ""))\n', body)))
    assert "AssertionError: " in text and ("times the other" in text) is note, text
