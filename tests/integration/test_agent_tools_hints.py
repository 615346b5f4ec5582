"""The built-in agent's tools tell a model how to recover from a wrong call, and a failed call stays a failure.

Small real models (see docs/real-model.md) guess paths and squash an edit's old_string onto one line;
the error result now shows what is really there. Nothing about what counts as success changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.backends.anthropic.tools import TOOL_SPECS, Workspace


def _ws(root: Path) -> Workspace:
    return Workspace(root, {"PATH": os.environ["PATH"]})


def test_an_edit_that_does_not_match_fails_and_shows_the_file_as_it_is(tmp_path: Path) -> None:
    """old_string not found: a failed call whose result holds the exact current text and points to write_file; the file is untouched."""
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    outcome = _ws(tmp_path).run("edit_file", {"path": "calc.py", "old_string": "def add(a, b): return a - b",
                                              "new_string": "def add(a, b): return a + b"})
    assert not outcome.ok
    assert "was not found" in outcome.text and "write_file" in outcome.text
    assert "def add(a, b):\n    return a - b\n" in outcome.text
    assert (tmp_path / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_the_same_wrong_edit_gives_the_same_result_so_the_repeat_rule_still_fires(tmp_path: Path) -> None:
    """Repeating an unmatched edit yields an identical failure text (the agent loop's 'same call, same error twice' stop relies on it)."""
    (tmp_path / "a.txt").write_text("x = 1\n")
    ws = _ws(tmp_path)
    args = {"path": "a.txt", "old_string": "x=1", "new_string": "x=2"}
    first, second = ws.run("edit_file", args), ws.run("edit_file", args)
    assert not first.ok and not second.ok and first.text == second.text


def test_a_large_file_is_shown_bounded_in_the_edit_hint(tmp_path: Path) -> None:
    """The file shown after a failed edit is cut to a few KB, head and tail."""
    (tmp_path / "big.txt").write_text("line\n" * 10_000)
    outcome = _ws(tmp_path).run("edit_file", {"path": "big.txt", "old_string": "nope", "new_string": "x"})
    assert not outcome.ok and len(outcome.text.encode()) < 6 * 1024 and "bytes omitted" in outcome.text


def test_reading_a_missing_file_fails_and_lists_what_the_directory_holds(tmp_path: Path) -> None:
    """A guessed path is a failed call that names the files of the nearest existing directory (never .git, never outside)."""
    (tmp_path / "calc.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / ".git").mkdir()
    ws = _ws(tmp_path)
    outcome = ws.run("read_file", {"path": "1.1 Fix add(a, b) in calc.py"})
    assert not outcome.ok and outcome.text.startswith("no such file")
    assert "calc.py" in outcome.text and "tests/" in outcome.text and ".git" not in outcome.text
    deeper = ws.run("read_file", {"path": "tests/missing/x.py"})
    assert not deeper.ok and "'tests' holds: (nothing)" in deeper.text
    outside = ws.run("read_file", {"path": "../x"})
    assert not outside.ok and "outside the work tree" in outside.text and "holds" not in outside.text


def test_the_tool_descriptions_say_write_file_replaces_the_whole_file() -> None:
    """write_file is described as the whole-file write; edit_file says its match is exact."""
    specs = {s["name"]: s["description"] for s in TOOL_SPECS}
    assert "whole file" in specs["write_file"] and "complete new text" in specs["write_file"]
    assert "exactly" in specs["edit_file"] and "write_file" in specs["edit_file"]
