"""One reading of the tracker: plan-runner's scanner checked against CommonMark.

`planfile_body.scan_body` reads stage headings and checkpoint lines line by line. People read the plan rendered
(GitHub: CommonMark with extensions), where an HTML comment or tag left open, an indented code block, a setext
heading, a paragraph's lazy continuation, a fence the scanner does not recognise (or one it sees that CommonMark
does not), a blockquote or a Unicode line separator can put a line in a different block than the scanner
thinks. Then the two readings disagree: a checkpoint ticked where no reader can see it, or one readers see that
plan-runner never reads.

`disagreements(text)` parses the body with a real CommonMark parser (markdown-it-py, pure Python, no I/O),
applies the scanner's own rules to CommonMark's blocks (a `##` heading whose text starts with "Stage" opens a
stage; any other `#`/`##` heading ends it; a list item whose first paragraph starts with `[ ]`/`[x]` and a
checkpoint id is a checkpoint inside a stage), and returns every structural line on which the two readings
differ, with where CommonMark put it. A base plan with any is a validation error; a head with any is tampering.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from runner.core.planfile_body import Body, _ID, _STAGE, _STAGE_WORD, split_comments

_CM_BOX = re.compile(r"^\[([ xX])\][ \t]+(.*)$", re.DOTALL)
_CM_NEWLINE = re.compile(r"\r\n?|\n")  # markdown-it's own line breaks (it normalises these, nothing else)

_WHERE = {
    "html_block": "inside an HTML block (an HTML comment or tag opened on an earlier line and not closed, or "
                  "a tag line with no blank line after it): rendered as raw HTML, never as a checkbox or heading",
    "code_block": "inside an indented code block (four or more spaces after a blank line): rendered as code",
    "fence": "inside a fenced code block as CommonMark reads the fences: rendered as code",
    "paragraph": "part of a paragraph (a continuation of the line above, or a setext heading's text): "
                 "not a list item or heading of its own",
    "heading": "part of a heading (a setext `---`/`===` underline makes the line above a heading)",
    "blockquote": "inside a blockquote",
    "hr": "a thematic break (`---`)",
    "list_item": "a list item outside every stage as the rendered plan's headings go (a heading plan-runner "
                 "does not see, or sees where readers do not, ends or opens the stage there)",
}


@dataclass(frozen=True)
class Disagreement:
    line: int  # 1-based file line
    what: str  # what each reading sees there
    fix: str


def _key(kind: str, ident: str) -> tuple[str, str]:
    return (kind, ident)


def _scanner_reading(body: Body) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    for item in [*body.items, *body.repeats]:
        out[item.index] = _key(item.kind, item.checkpoint_id if item.kind == "checkpoint" else str(item.number))
    return out


@lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


@lru_cache(maxsize=64)
def _tokens(text: str) -> tuple:
    return tuple(_parser().parse(text))


def _stage_number(content: str) -> str | None:
    title, _ = split_comments(content.strip())
    m = _STAGE.match(title)
    return str(int(m.group(1))) if m else None


def commonmark_reading(text: str) -> tuple[dict[int, tuple[str, str]], tuple]:
    """CommonMark's structural lines of `text` (a plan's body): {CommonMark line index: (kind, id)}, and the tokens."""
    tokens = _tokens(text)
    out: dict[int, tuple[str, str]] = {}
    in_stage = False
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.tag in ("h1", "h2") and tok.map:
            content = tokens[i + 1].content if i + 1 < len(tokens) else ""
            number = _stage_number(content) if tok.tag == "h2" and _STAGE_WORD.match(content.strip()) else None
            in_stage = number is not None
            if number is not None:
                out[tok.map[0]] = _key("stage", number)
        elif tok.type == "list_item_open" and in_stage and i + 2 < len(tokens):
            para, inline = tokens[i + 1], tokens[i + 2]
            if para.type != "paragraph_open" or inline.type != "inline" or not para.map:
                continue
            box = _CM_BOX.match(inline.content)
            ident = _ID.match(box.group(2).split("\n", 1)[0]) if box else None  # its first line, as the scanner
            if ident:
                out[para.map[0]] = _key("checkpoint", ident.group(1))
    return out, tokens


def _block_at(tokens: tuple, line: int) -> str | None:
    """The innermost block CommonMark put CommonMark line `line` in."""
    found = None
    for tok in tokens:
        if tok.map and tok.nesting >= 0 and tok.map[0] <= line < tok.map[1]:
            kind = tok.type.removesuffix("_open")
            if kind in _WHERE:
                found = kind
    return found


def _describe(key: tuple[str, str]) -> str:
    return f"stage {key[1]}" if key[0] == "stage" else f"checkpoint {key[1]}"


def disagreements(lines: list[str], start: int, body: Body) -> list[Disagreement]:
    """Every structural line on which the scanner's `body` (of `lines`, the body starting at index `start`) and
    CommonMark's reading of the same text differ."""
    text = "".join(lines[start:])
    # line starts: the scanner's (str.splitlines: also \v \f \x1c-\x1e \x85 U+2028 U+2029) and CommonMark's
    scanner_at: dict[int, int] = {}
    offset = 0
    for index in range(start, len(lines)):
        scanner_at[offset] = index
        offset += len(lines[index])
    cm_index: dict[int, int] = {}
    cm_lines: list[int] = [0] + [m.end() for m in _CM_NEWLINE.finditer(text)]
    for n, at in enumerate(cm_lines):
        if at in scanner_at:
            cm_index[n] = scanner_at[at]
    cm_line_of = {index: n for n, index in cm_index.items()}
    mine = _scanner_reading(body)
    theirs_cm, tokens = commonmark_reading(text)
    theirs = {cm_index[n]: key for n, key in theirs_cm.items() if n in cm_index}
    out: list[Disagreement] = []
    for index in sorted(set(mine) | set(theirs)):
        a, b = mine.get(index), theirs.get(index)
        if a == b:
            continue
        number = index + 1
        if a is not None and b is None:
            cm_n = cm_line_of.get(index)
            where = (_WHERE.get(_block_at(tokens, cm_n) or "", "not a structural line in the rendered plan")
                     if cm_n is not None else "not a line of its own in the rendered plan (a Unicode line or "
                                           "paragraph separator, a form feed or a vertical tab splits it for "
                                           "plan-runner only)")
            out.append(Disagreement(
                number, f"plan-runner reads {_describe(a)} on line {number}, but a reader of the rendered plan "
                        f"does not see it there: it is {where}",
                "make it plain Markdown that reads the same everywhere: close an HTML comment or tag on the line "
                "it opens (or leave a blank line after an HTML block), do not indent it under code, keep it "
                "out of blockquotes and paragraphs, and use only ordinary line breaks"))
        elif a is None and b is not None:  # (both None: equal, skipped above)
            out.append(Disagreement(
                number, f"a reader of the rendered plan sees {_describe(b)} on line {number}, but plan-runner "
                        "does not read it as one (a fence, heading or line break the two read differently)",
                "write stages as `## Stage N: Title` and checkpoints as `- [ ] N.M Title` on lines of their own, "
                "outside code fences, with fences opened and closed by plain ``` lines"))
        elif a is not None and b is not None:  # always, here
            out.append(Disagreement(
                number, f"line {number} reads as {_describe(a)} to plan-runner and as {_describe(b)} to a reader",
                "write the line plainly so that both read it the same"))
    return out
