"""Checkpoint titles are part of the tracker's structure from the base commit: an agent that edits one
(a real 1.5B model appended ` [x]` to a title) is reported as tampering and the title is restored."""

from __future__ import annotations

from runner.core.planfile import parse_plan, protected_changes, restore_protected

BASE = """\
---
agent:
  backend: script
---
# Plan

## Stage 1: Fix <!-- sessions: 1 -->
- [ ] 1.1 Make add in calc.py return a + b
- [ ] 1.2 BLOCKED: needs a decision on names
- [ ] 1.3 Document add <!-- verify: test -f README.md -->
"""


def test_a_title_the_agent_changed_is_reported_and_restored_keeping_the_tick() -> None:
    """` [x]` appended to a ticked checkpoint's title: one protected change naming it; the restore keeps the tick and the base title."""
    head = BASE.replace("- [ ] 1.1 Make add in calc.py return a + b", "- [x] 1.1 Make add in calc.py return a + b [x]")
    changes = protected_changes(BASE, head, "plans/p.md")
    assert changes == ["plans/p.md:8: checkpoint 1.1 was renamed from 'Make add in calc.py return a + b' "
                       "to 'Make add in calc.py return a + b [x]'"]
    restored = restore_protected(BASE, head)
    assert restored == BASE.replace("- [ ] 1.1", "- [x] 1.1")
    assert protected_changes(BASE, restored, "plans/p.md") == []


def test_a_rewritten_title_is_restored_on_a_blocked_or_verified_checkpoint_too() -> None:
    """A changed title next to a verify: comment is restored; the verify stays the base's."""
    head = BASE.replace("1.3 Document add <!--", "1.3 Skip the docs <!--")
    assert any("checkpoint 1.3 was renamed" in c for c in protected_changes(BASE, head, "plans/p.md"))
    assert restore_protected(BASE, head) == BASE


def test_state_changes_are_not_title_changes() -> None:
    """Ticking, blocking with a reason, unblocking, or respacing the title changes no title."""
    for head in (BASE.replace("- [ ] 1.1", "- [x] 1.1"),
                 BASE.replace("return a + b", "return a + b BLOCKED: which module?"),
                 BASE.replace("- [ ] 1.2 BLOCKED: needs a decision on names", "- [x] 1.2 needs a decision on names"),
                 BASE.replace("BLOCKED: needs a decision on names", "BLOCKED: another reason"),
                 BASE.replace("Make add in", "Make  add in")):
        assert protected_changes(BASE, head, "plans/p.md") == [], head
        parse_plan(head, "plans/p.md")
