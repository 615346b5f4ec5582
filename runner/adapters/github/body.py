"""Fit a report into GitHub's body limit (65,536 characters for issues, comments and pull requests).

Pure: markdown in, markdown out. What a maintainer needs to answer is kept: the
opening (why the plan parked: the question), the evidence table, the failing
gates' last lines and the commands to answer with. Sections that only help
(the agent's handoff, its hints, the commit list, the checkpoint list) are
left out first, then the gate tails are shortened from the top (the end of a
log is where the error is); each cut says so and where the full report is.
"""

from __future__ import annotations

import re

GITHUB_MAX_BODY = 65_536
LIMIT = 64_000  # below GitHub's limit, with room for the marker and a note
# Headings of the report (runner/templates/report.md.j2) that may go, first to last.
DROPPABLE = ("What the agent said", "The agent's handoff", "Commits", "Checkpoints")
_HEADING = re.compile(r"^#{2,4} ")
_FENCE = re.compile(r"^(`{3,}|~{3,})")


def _sections(text: str) -> list[list[str]]:
    """Lines grouped by markdown heading (a heading inside a fenced block does not start a section)."""
    sections: list[list[str]] = [[]]
    fence = ""
    for line in text.split("\n"):
        mark = _FENCE.match(line)
        if fence:
            if mark and line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = ""
        elif mark:
            fence = mark.group(1)
        elif _HEADING.match(line):
            sections.append([])
        sections[-1].append(line)
    return [s for s in sections if s]


def _join(sections: list[list[str]]) -> str:
    return "\n".join("\n".join(s) for s in sections)


def _note(link: str) -> str:
    where = f" The full report: {link}" if link else " The full report is in the job summary of this run."
    return f"_(left out: the report is longer than GitHub's {GITHUB_MAX_BODY:,}-character limit.{where})_"


def _shorten_fences(section: list[str], budget: int) -> list[str]:
    """Cut the longest fenced blocks from the top until the section is `budget` characters or less."""
    lines = list(section)
    while len("\n".join(lines)) > budget:
        blocks, start, fence = [], None, ""
        for i, line in enumerate(lines):
            mark = _FENCE.match(line)
            if start is None and mark:
                start, fence = i, mark.group(1)
            elif start is not None and line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                blocks.append((start, i))
                start = None
        inner = [(e - s - 1, s, e) for s, e in blocks if e - s - 1 > 3]
        if not inner:
            return lines
        size, s, e = max(inner)
        excess = len("\n".join(lines)) - budget
        body = lines[s + 1:e]
        cut, chars = 0, 0
        while cut < len(body) - 2 and chars < excess + 80:
            chars += len(body[cut]) + 1
            cut += 1
        cut = max(cut, 1)
        kept = body[cut:]
        note = f"... ({cut} earlier line(s) cut to fit GitHub's limit)"
        if kept and kept[0].startswith("... (") and "earlier line(s) cut" in kept[0]:
            kept = kept[1:]
        lines = lines[:s + 1] + [note] + kept + lines[e:]
        if len(kept) <= 2:
            break
    return lines


def cap_body(text: str, limit: int = LIMIT, link: str = "") -> str:
    """`text` unchanged when it fits in `limit` characters; otherwise shortened as the module says."""
    if len(text) <= limit:
        return text
    sections = _sections(text)
    for title in DROPPABLE:
        for i, section in enumerate(sections):
            if section and _HEADING.match(section[0]) and section[0].lstrip("# ").startswith(title):
                sections[i] = [section[0], "", _note(link), ""]
        if len(_join(sections)) <= limit:
            return _join(sections)
    excess = len(_join(sections)) - limit
    for i in sorted(range(len(sections)), key=lambda k: -len("\n".join(sections[k]))):
        size = len("\n".join(sections[i]))
        sections[i] = _shorten_fences(sections[i], max(200, size - excess))
        excess = len(_join(sections)) - limit
        if excess <= 0:
            return _join(sections)
    # Nothing left to cut by structure: keep the start and the end (how to answer), cut the middle.
    joined = _join(sections)
    note = "\n\n" + _note(link) + "\n\n"
    tail = len(sections[-1]) and "\n".join(sections[-1])
    tail = tail[-min(len(tail), limit // 4):] if tail else ""
    head = joined[: max(0, limit - len(tail) - len(note))]
    return head + note + tail
