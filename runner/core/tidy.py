"""What the work branch's last commit puts right before a finished plan is merged.

Two leftovers of a run made the printed merge command conflict or carry stale words: the plan file on the
work branch still held the front matter of the commit the run started from (a fix the maintainer made on the
base mid-run, as the docs advise before `reply retry`, then conflicts with it), and the handoff still held
the `HUMAN:` lines a maintainer answered already (a finished plan has none unanswered: rule 1 parks first).
"""

from __future__ import annotations

from runner.core.outcome import human_lines
from runner.core.planfile import restore_protected


def tidy_plan(base_text: str | None, work_text: str | None) -> str | None:
    """The work branch's plan with the base's front matter and structure, its own ticks and notes kept; None
    when nothing changes (no plan on either side, or the base's is what the work branch holds already)."""
    if base_text is None or work_text is None:
        return None
    tidied = restore_protected(base_text, work_text)
    return None if tidied == work_text else tidied


def tidy_handoff(text: str | None) -> str | None:
    """The handoff without its answered `HUMAN:` lines: "" when nothing else is left (the file goes), None
    when it has no such line (nothing changes)."""
    if not text or not human_lines(text):
        return None
    kept = [line for line in text.splitlines(keepends=True) if not human_lines(line)]
    rest = "".join(kept)
    return rest if rest.strip() else ""
