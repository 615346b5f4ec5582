"""The finish's tidy-up of the work branch: pure functions of the two texts."""

from __future__ import annotations

from runner.core.tidy import tidy_handoff, tidy_plan

BASE = """\
---
budget:
  max_sessions: 9
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 3 -->
- [ ] 1.1 Multiplication
- [ ] 1.2 Division
"""

WORK = """\
---
budget:
  max_sessions: 10
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 2 -->
- [x] 1.1 Multiplication
  done with a float test
- [ ] 1.2 Division
"""


def test_the_plan_takes_the_bases_front_matter_and_keeps_ticks_and_notes():
    tidied = tidy_plan(BASE, WORK)
    assert tidied is not None
    assert "max_sessions: 9" in tidied and "<!-- sessions: 3 -->" in tidied
    assert "- [x] 1.1 Multiplication\n  done with a float test\n" in tidied and "- [ ] 1.2 Division" in tidied


def test_nothing_changes_when_the_work_branch_already_follows_the_base():
    assert tidy_plan(BASE, BASE) is None
    assert tidy_plan(None, WORK) is None and tidy_plan(BASE, None) is None


def test_answered_human_lines_go_and_the_rest_stays():
    assert tidy_handoff("Notes: mul done.\n- HUMAN: floats?\n> human: and ints?\nNext: div\n") == \
        "Notes: mul done.\nNext: div\n"
    assert tidy_handoff("HUMAN: should mul accept floats?\n") == ""  # nothing left: the file goes
    assert tidy_handoff("no question here\n") is None and tidy_handoff(None) is None
