"""Issue 22: the plan's tracker has one reading. plan-runner's scanner and a real CommonMark parser (markdown-it-py)
must agree on every stage heading and checkpoint line; where they do not, a base plan is a validation error and
an agent's head is tampering (the session parks), never a hidden tick and never a crash."""

from __future__ import annotations

import pytest

from runner.core.errors import PlanError
from runner.core.planfile import parse_plan, protected_changes, restore_protected, with_tracker
from tests.attack_world import arena  # noqa: F401 - the fixture

BASE = """\
---
agent:
  backend: command
  executable: sh
gates:
  - name: t
    run: "true"
---
# P

## Stage 1: S <!-- sessions: 1 -->
- [ ] 1.1 thing
- [ ] 1.2 other

## Notes
free text
"""

# (name, text replaced, replacement): each makes the two readings differ
AMBIGUOUS = [
    ("html comment", "- [ ] 1.2 other", "<!-- notes\n- [x] 1.2 other\n-->"),
    ("unclosed details", "- [ ] 1.2 other", "<details>\n- [x] 1.2 other\n</details>"),
    ("setext stage", "- [ ] 1.2 other\n", "- [ ] 1.2 other\n\nStage 2: More\n---\n- [ ] 2.1 more\n"),
    ("unicode line separator", "- [ ] 1.2 other", "- [ ] 1.2 other\u2028- [x] 1.3 sneaky"),
    ("form feed", "- [ ] 1.2 other", "- [ ] 1.2 other\x0c- [x] 1.3 sneaky"),
    ("fence CommonMark does not open", "- [ ] 1.1 thing\n", "``` a`b\n- [ ] 1.1 thing\n"),
    ("ordered-list checkbox", "- [ ] 1.2 other", "- [ ] 1.2 other\n1. [x] 1.3 seen"),
    ("indented heading ends the stage for readers", "- [ ] 1.2 other", "   # Aside\n- [x] 1.2 other"),
    ("heading in a blockquote", "## Notes", "> ## Stage 2: Quoted\n- [ ] 2.1 q\n\n## Notes"),
]


@pytest.mark.parametrize(("name", "old", "new"), AMBIGUOUS, ids=[a[0] for a in AMBIGUOUS])
def test_a_tracker_read_two_ways_is_tampering_in_a_head_and_an_error_in_a_base(name, old, new):
    head = BASE.replace(old, new, 1)
    assert head != BASE
    changes = protected_changes(BASE, head, "plans/p.md")
    assert any("the tracker reads two ways" in c for c in changes), (name, changes)
    with pytest.raises(PlanError) as info:
        parse_plan(head, "plans/p.md")
    two = [p for p in info.value.problems if "reads two ways" in p.what]
    assert two and all(p.fix and p.line > 0 for p in two), info.value.problems
    restored = restore_protected(BASE, head)  # the repair never keeps a second reading either
    assert protected_changes(BASE, restored, "plans/p.md") == [], restored


def test_plain_ticks_notes_and_html_that_hides_nothing_read_one_way():
    """Negative control: ordinary edits, a closed comment on a checkpoint line, a <details> block in the notes,
    checkboxes in a fence (both readings see code) are no disagreement."""
    head = (BASE.replace("- [ ] 1.1 thing", "- [x] 1.1 thing <!-- done by session 2 -->")
            + "\n<details>\n<summary>log</summary>\n\n- [ ] 9.9 in notes\n\n</details>\n\n```\n- [x] 1.2 code\n```\n")
    assert protected_changes(BASE, head, "plans/p.md") == []
    plan = parse_plan(head, "plans/p.md")
    assert plan.checkpoint("1.1").state.value == "DONE" and plan.checkpoint("1.2").state.value == "TODO"


def test_a_hidden_tick_is_read_by_the_scanner_so_only_the_check_stops_it():
    """Why the check is needed: the scanner alone takes the hidden `[x]` (the first 1.1) as the state, and the
    structure diff sees nothing wrong with it."""
    head = BASE.replace("- [ ] 1.1 thing", "<!--\n- [x] 1.1 thing\n-->\n- [ ] 1.1 thing", 1)
    assert with_tracker(parse_plan(BASE, "plans/p.md"), head).checkpoint("1.1").state.value == "DONE"
    assert [c for c in protected_changes(BASE, head, "plans/p.md") if "reads two ways" in c]


@pytest.mark.parametrize(("mode", "expected"), [("hidden", "NeedsHuman"), ("plain", "Advanced")])
def test_an_agent_that_ticks_where_no_reader_sees_it_parks_and_is_not_credited(arena, mode,  # noqa: F811
                                                                               expected):
    """Effect-judged through the real CLI: the hidden tick parks the plan for a human (NeedsHuman), the reasons say
    the tracker reads two ways, and nothing is credited. Positive control (`plain`): the same agent ticking
    visibly advances."""
    a = arena("hidden_tick", controls={"tick-mode": mode})
    run = a.session()
    assert run.outcome == expected, run.out
    if mode == "hidden":
        assert "the tracker reads two ways" in " ".join(run.out["reasons"]), run.out["reasons"]
    a.assert_all_well(run)
