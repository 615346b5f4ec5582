"""The built-in agent's file tools guard the plan file, say where an ambiguous edit matches, and tick
a checkpoint with `mark_done`: a dead end becomes a clear error at once (docs/real-model.md).

The post-session tamper check stays the rule (the shell can still write the file); these tools only
refuse early and say what may change. Real files, the real plan parser.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.backends.anthropic.tools import TOOL_NAMES, Workspace
from runner.core.planfile import parse_plan, protected_changes

PLAN = """\
---
agent:
  backend: anthropic
gates:
  - name: tests
    run: python -m pytest -q tests
---
# Fix calc

## Stage 1: Fix add <!-- sessions: 2 -->

Notes: `- [ ] 1.1` is how a box looks.

- [ ] 1.1 Make add in calc.py return a + b
- [ ] 1.2 Document add <!-- verify: test -f README.md -->
"""


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "fix.md").write_text(PLAN)
    return Workspace(tmp_path, {"PATH": os.environ["PATH"]}, plan_path="plans/fix.md")


def _plan(ws: Workspace) -> str:
    return (ws.root / "plans" / "fix.md").read_text()


def test_an_edit_of_the_box_is_allowed_and_is_no_tampering(ws: Workspace) -> None:
    """edit_file may change a checkpoint's box; the result parses with 1.1 done and nothing protected changed."""
    out = ws.run("edit_file", {"path": "plans/fix.md", "old_string": "- [ ] 1.1 Make add",
                               "new_string": "- [x] 1.1 Make add"})
    assert out.ok, out.text
    assert parse_plan(_plan(ws), "plans/fix.md").checkpoint("1.1").state.value == "DONE"
    assert protected_changes(PLAN, _plan(ws), "plans/fix.md") == []


@pytest.mark.parametrize("tool,args,why", [
    ("write_file", {"path": "plans/fix.md", "content": "- [x] 1.1 Make add in calc.py return a + b\n"},
     "lines instead of"),
    ("edit_file", {"path": "plans/fix.md", "old_string": "backend: anthropic", "new_string": "backend: script"},
     "line 3 is not a checkpoint's line"),
    ("edit_file", {"path": "plans/fix.md", "old_string": "return a + b", "new_string": "return a + b [x]"},
     "only the box may change"),
    ("edit_file", {"path": "plans/fix.md", "old_string": "Fix add <!--", "new_string": "Fix all <!--"},
     "is not a checkpoint's line"),
    ("edit_file", {"path": "plans/fix.md", "old_string": "<!-- verify: test -f README.md -->",
                   "new_string": "<!-- verify: true -->"}, "only the box may change"),
])
def test_a_change_to_anything_but_a_box_is_refused_and_says_what_may_change(ws: Workspace, tool, args, why) -> None:
    """Overwriting the plan, or changing its front matter, a heading, a title or a verify: a failed call that
    says only a box may change and lists the checkpoint lines; the file is untouched."""
    out = ws.run(tool, args)
    assert not out.ok and out.text.startswith("refused: plans/fix.md is the plan's tracker"), out.text
    assert why in out.text and "`- [ ]` to `- [x]`" in out.text and "mark_done" in out.text
    assert "line 14: - [ ] 1.1 Make add in calc.py return a + b" in out.text
    assert _plan(ws) == PLAN


def test_the_guard_follows_symlinks_and_other_files_are_free(ws: Workspace) -> None:
    """A symlink to the plan is the plan; any other file is written as before; a BLOCKED marker is allowed."""
    (ws.root / "alias.md").symlink_to(ws.root / "plans" / "fix.md")
    assert not ws.run("write_file", {"path": "alias.md", "content": "x\n"}).ok and _plan(ws) == PLAN
    assert ws.run("write_file", {"path": "notes.md", "content": "x\n"}).ok
    blocked = ws.run("edit_file", {"path": "plans/fix.md", "old_string": "1.2 Document add",
                                   "new_string": "1.2 Document add BLOCKED: which README?"})
    assert blocked.ok, blocked.text
    assert parse_plan(_plan(ws), "plans/fix.md").checkpoint("1.2").blocked_reason == "which README?"
    no_plan = Workspace(ws.root, {"PATH": os.environ["PATH"]})  # a workspace without a plan guards nothing
    assert no_plan.run("read_file", {"path": "plans/fix.md"}).ok
    assert no_plan.run("write_file", {"path": "plans/fix.md", "content": PLAN + "more\n"}).ok


def test_an_ambiguous_old_string_names_the_lines_where_it_occurs(ws: Workspace) -> None:
    """old_string twice in the file: a failed call naming both lines; nothing written."""
    out = ws.run("edit_file", {"path": "plans/fix.md", "old_string": "- [ ] 1.1", "new_string": "- [x] 1.1"})
    assert not out.ok and "occurs 2 times" in out.text and "lines 12 and 14" in out.text, out.text
    assert _plan(ws) == PLAN
    (ws.root / "a.txt").write_text("x\nx\ny\nx\n")
    three = ws.run("edit_file", {"path": "a.txt", "old_string": "x", "new_string": "z"})
    assert not three.ok and "lines 1, 2 and 4" in three.text


@pytest.mark.parametrize("given", ["1.1", " 1.1 ", "1.1 Make add in calc.py return a + b",
                                   "- [ ] 1.1 Make add in calc.py return a + b", "`- [ ] 1.1 Make add`",
                                   "Make add in calc.py return a + b"])
def test_mark_done_ticks_a_checkpoint_given_by_id_or_by_its_line(ws: Workspace, given: str) -> None:
    """mark_done takes the id, the id and title, the whole line or the title alone; only the box changes."""
    out = ws.run("mark_done", {"checkpoint": given})
    assert out.ok and "ticked checkpoint 1.1" in out.text and "git commit -am tick-1.1" in out.text, out.text
    assert _plan(ws) == PLAN.replace("- [ ] 1.1 Make", "- [x] 1.1 Make")
    again = ws.run("mark_done", {"checkpoint": "1.1"})
    assert again.ok and "already ticked" in again.text


@pytest.mark.parametrize("given,why", [("9.9", "no checkpoint '9.9'"), ("1.1 Delete the tests", "is 'Make add"),
                                       ("", "non-empty"), ("calc.py", "no checkpoint")])
def test_mark_done_of_an_unknown_checkpoint_fails_and_lists_the_real_ones(ws: Workspace, given: str, why: str) -> None:
    """An unknown id, a wrong title or nothing: a failed call that lists the checkpoint lines; the file is untouched."""
    out = ws.run("mark_done", {"checkpoint": given})
    assert not out.ok and why in out.text, out.text
    if given:
        assert "line 15: - [ ] 1.2 Document add" in out.text
    assert _plan(ws) == PLAN


def test_mark_done_without_a_plan_file_fails(tmp_path: Path) -> None:
    """No plan in the session: mark_done is a failed call, and it is one of the tools."""
    out = Workspace(tmp_path, {"PATH": os.environ["PATH"]}).run("mark_done", {"checkpoint": "1.1"})
    assert not out.ok and "no plan file" in out.text and "mark_done" in TOOL_NAMES
