"""A Markdown report (park report, finish report) as a person reads it on a terminal.

The report is written for GitHub (an issue body, a PR body) and for a file: headings,
tables, `<details>` blocks, an HTML comment marker. On a terminal that is noise, so it is
turned into plain text: no HTML, no Markdown markup around words, tables as aligned
columns. Pure text in, text out; `print_report` then prints it (rich only colours headings).
"""

from __future__ import annotations

import re

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_SUMMARY = re.compile(r"<details>\s*<summary>(.*?)</summary>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"</?(details|summary|br|p|sub|sup)\s*/?>", re.IGNORECASE)
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_FENCE = re.compile(r"^(`{3,})\w*\s*$")
# A backslash-escaped ASCII punctuation character (how reports carry untrusted text, inert.md_text): kept
# aside while markup is stripped, then printed as the character it stands for.
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_KEPT = 0xF0000  # a private-use plane: stands for an escaped character while the line is cleaned


def _restore(text: str) -> str:
    return re.sub("[\U000f0000-\U000f007f]", lambda m: chr(ord(m.group()) - _KEPT), text)


def _table(rows: list[str]) -> list[str]:
    rows = [_ESCAPED.sub(lambda m: chr(_KEPT + ord(m.group(1))), r) for r in rows]
    cells = [[_restore(c.strip().replace("`", "")) for c in r.strip().strip("|").split("|")] for r in rows]
    cells = [c for c in cells if not all(re.fullmatch(r":?-{3,}:?", x) for x in c)]  # the |---| line
    if not cells:
        return []
    width = [max(len(r[i]) if i < len(r) else 0 for r in cells) for i in range(max(len(r) for r in cells))]
    return ["  " + "  ".join(c.ljust(width[i]) for i, c in enumerate(r)).rstrip() for r in cells]


def to_terminal(markdown: str) -> str:
    """Plain text of a report: HTML comments and tags gone, `<summary>` kept as a label, tables aligned,
    code fences indented (their content verbatim), headings and bold without markers, escaped characters as
    themselves, no doubled blank lines. Markup is read line by line, outside fences only: text inside a fence
    (untrusted) cannot hide the lines after it."""
    out: list[str] = []
    table: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines():
        if fence is not None:
            if line.strip() == fence:
                fence = None
            else:
                out.append("    " + line)
            continue
        m = _FENCE.match(line.strip())
        if m:
            fence = m.group(1)
            continue
        if line.lstrip().startswith("|"):
            table.append(line)
            continue
        if table:
            out += _table(table)
            table = []
        line = _ESCAPED.sub(lambda m: chr(_KEPT + ord(m.group(1))), line)
        line = _TAG.sub("", _SUMMARY.sub(lambda m: m.group(1).strip() + ":", _COMMENT.sub("", line)))
        line = re.sub(r"^#{1,6}\s+", "", line)
        line = re.sub(r"^>\s?", "  ", line)
        line = _BOLD.sub(r"\1", line).replace("`", "")
        out.append(_restore(line).rstrip())
    if table:
        out += _table(table)
    cleaned: list[str] = []
    for line in out:
        if not line and (not cleaned or not cleaned[-1]):
            continue
        cleaned.append(line)
    return "\n".join(cleaned).strip() + "\n"


def print_report(output, markdown: str) -> None:
    """Print a report on `output` (runner.adapters.render.term.Output) as plain text."""
    if markdown.strip():
        output.say(to_terminal(markdown).rstrip("\n"))
