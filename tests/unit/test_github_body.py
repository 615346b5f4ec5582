"""Reports are fitted into GitHub's 65,536-character body limit keeping what a maintainer answers from."""

from __future__ import annotations

from runner.adapters.github.body import GITHUB_MAX_BODY, LIMIT, cap_body


def report(gate_lines: int, handoff_lines: int, commits: int) -> str:
    tail = "\n".join(f"FAILED test_{i} - AssertionError: expected {i}" for i in range(gate_lines))
    handoff = "\n".join(f"I tried approach {i} and it did not work" for i in range(handoff_lines))
    return (
        "## plan-runner parked calc: the same gate failed three times\n\n"
        "> should the parser accept empty input?\n\n"
        "### Last session (delivery on 1.2)\n\n**Outcome: GatesRed**\n\n"
        "| evidence | value |\n|---|---|\n| work commits | 2 |\n| tokens | 12,000 |\n\n"
        "#### Gates (re-run by plan-runner)\n\n| gate | required | result |\n|---|---|---|\n| tests | yes | red |\n\n"
        f"<details><summary>tests: last lines</summary>\n\n```text\n{tail}\nLAST LINE OF THE GATE\n```\n\n</details>\n\n"
        "#### Commits\n\n" + "".join(f"- `abc{i:04d}` change {i}\n" for i in range(commits)) + "\n"
        f"#### The agent's handoff (its words, not evidence)\n\n```text\n{handoff}\n```\n\n"
        "#### What the agent said about itself (hints; none decided anything)\n\n- said: done\n\n"
        "### Checkpoints\n\n- Stage 1: Parser\n  - ⬜ 1.2 empty input\n\n"
        "### How to answer\n\n- `/plan-runner resume [instructions]`\n")


def test_a_report_that_fits_is_unchanged() -> None:
    """Below the limit nothing is touched."""
    text = report(10, 10, 3)
    assert cap_body(text) == text


def test_the_handoff_and_lists_go_first_and_the_question_table_tail_and_commands_stay() -> None:
    """A long handoff and commit list are left out with a note; question, evidence, gate tail, commands stay."""
    text = report(50, 3000, 2000)
    assert len(text) > GITHUB_MAX_BODY
    capped = cap_body(text, link="https://github.com/o/r/actions/runs/7")
    assert len(capped) <= LIMIT
    for kept in ("> should the parser accept empty input?", "| work commits | 2 |", "| tests | yes | red |",
                 "LAST LINE OF THE GATE", "FAILED test_0 ", "/plan-runner resume"):
        assert kept in capped, kept
    assert "I tried approach 5 " not in capped and "`abc0001`" in capped  # dropped only as far as needed
    assert "left out" in capped and "https://github.com/o/r/actions/runs/7" in capped


def test_a_huge_gate_tail_is_cut_from_the_top_keeping_its_end() -> None:
    """When the failing gate's output alone is too long its first lines go, its last lines and a note stay."""
    capped = cap_body(report(4000, 3, 3))
    assert len(capped) <= LIMIT
    assert "LAST LINE OF THE GATE" in capped and "FAILED test_3999 " in capped and "FAILED test_0 " not in capped
    assert "earlier line(s) cut to fit GitHub's limit" in capped
    assert "| work commits | 2 |" in capped and "/plan-runner resume" in capped
