"""The body of a plan file: stage headings, checkpoint lines and the free text between them.

`scan_body` classifies each line once; the parser, the tracker diff, the tamper check
and the line rewriters all work from that one scan, so they agree on what a
checkpoint is. Lines inside fenced code blocks are never structure.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from runner.core.errors import Problem
from runner.core.evidence import CheckpointState
from runner.core.plan import Checkpoint, Stage

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_H1 = re.compile(r"^#[ \t]+(.*?)[ \t#]*$")
_H2 = re.compile(r"^##[ \t]+(.*?)[ \t]*$")
_OTHER_HEADING = re.compile(r"^#{1,2}(?:[ \t]|$)")
_STAGE_WORD = re.compile(r"^stage\b", re.IGNORECASE)
_STAGE = re.compile(r"^stage[ \t]+(\d{1,6})(?![\d.])[ \t]*(?:[:.)\u2013\u2014-][ \t]*)?(.*)$", re.IGNORECASE)
_CHECKBOX = re.compile(r"^( {0,3}[-*+][ \t]+\[)([ xX])(\][ \t]+)(.*)$")
_CHECKBOX_EMPTY = re.compile(r"^ {0,3}[-*+][ \t]+\[[ xX]\][ \t]*$")
_ID = re.compile(r"^(\d{1,6}(?:\.\d{1,6}){1,4})(?=\s|$)(.*)$")
_COMMENT_KEY = re.compile(r"^\s*([A-Za-z][\w-]*)\s*:\s*(.*?)\s*$", re.DOTALL)
_BLOCKED = re.compile(r"(?:^|\s)BLOCKED:")

STAGE_KEYS = ("sessions",)
CHECKPOINT_KEYS = ("verify",)


@dataclass
class Item:
    """One structural line: a stage heading (`kind == "stage"`) or a checkpoint (`"checkpoint"`)."""

    kind: str
    index: int  # index into the file's lines
    line: int  # 1-based file line
    number: int = 0  # stage number (for a checkpoint: the number of its stage)
    title: str = ""
    sessions: int = 1
    checkpoint_id: str = ""
    state: CheckpointState = CheckpointState.TODO
    verify: str | None = None
    blocked_reason: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.checkpoint_id if self.kind == "checkpoint" else str(self.number))


@dataclass
class Body:
    title: str = ""
    title_line: int = 0
    items: list[Item] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    repeats: list[Item] = field(default_factory=list)  # checkpoint lines whose id came earlier: not items, not text

    def stages(self) -> tuple[Stage, ...]:
        stages: list[Stage] = []
        for item in self.items:
            if item.kind == "stage":
                stages.append(Stage(number=item.number, title=item.title, sessions=item.sessions, line=item.line))
            elif stages:
                cp = Checkpoint(id=item.checkpoint_id, title=item.title, state=item.state, verify=item.verify,
                                line=item.line, blocked_reason=item.blocked_reason)
                stages[-1] = stages[-1].model_copy(update={"checkpoints": stages[-1].checkpoints + (cp,)})
        return tuple(stages)


def split_comments(text: str) -> tuple[str, list[str]]:
    """Peel trailing `<!-- ... -->` comments off a line: (text before them, comment bodies in order)."""
    comments: list[str] = []
    rest = text.rstrip()
    while rest.endswith("-->"):
        start = rest.rfind("<!--", 0, len(rest) - 3)
        if start < 0:
            break
        comments.insert(0, rest[start + 4 : -3])
        rest = rest[:start].rstrip()
    return rest, comments


def split_blocked(text: str) -> tuple[str, str | None]:
    """(title, reason) where reason is None unless the text carries a `BLOCKED:` marker."""
    m = _BLOCKED.search(text)
    if not m:
        return text.strip(), None
    title = text[: m.start()].rstrip(" \t-\u2013\u2014:;,(")
    reason = text[m.end() :].strip()
    return title.strip(), reason


def scan_body(lines: list[str], start: int, path: str) -> Body:
    body = Body()
    fence: str | None = None
    in_stage = False
    stage: Item | None = None
    stage_has_checkpoint = False
    seen_stage: dict[int, int] = {}
    seen_checkpoint: dict[str, int] = {}

    def problem(line: int, what: str, fix: str) -> None:
        body.problems.append(Problem(path, line, what, fix))

    def close_stage() -> None:
        if stage is not None and not stage_has_checkpoint:
            problem(stage.line, f"stage {stage.number} has no checkpoints",
                    f"add checkpoint lines under it, e.g. `- [ ] {stage.number}.1 What done looks like`")

    for index in range(start, len(lines)):
        text = lines[index].rstrip("\r\n")
        number = index + 1
        fence_match = _FENCE.match(text)
        if fence is not None:
            if fence_match and fence_match.group(1)[0] == fence[0] and len(fence_match.group(1)) >= len(fence):
                fence = None
            continue
        if fence_match:
            fence = fence_match.group(1)
            continue
        if text.startswith("#") and _OTHER_HEADING.match(text):
            h1 = _H1.match(text) if not text.startswith("##") else None
            if h1 and not body.title:
                body.title, body.title_line = h1.group(1), number
            h2 = _H2.match(text)
            if h2 and _STAGE_WORD.match(h2.group(1)):
                close_stage()
                stage = _scan_stage(h2.group(1), index, number, problem)
                stage_has_checkpoint = False
                in_stage = stage is not None
                if stage is not None:
                    if stage.number in seen_stage:
                        problem(number, f"stage {stage.number} appears twice (first on line {seen_stage[stage.number]})",
                                "number the stages 1, 2, 3... in order")
                    seen_stage.setdefault(stage.number, number)
                    body.items.append(stage)
            else:  # any other `#`/`##` heading ends the stage: what follows is free text (notes, handoff)
                close_stage()
                stage, in_stage = None, False
            continue
        box = _CHECKBOX.match(text)
        if box is None:
            if in_stage and _CHECKBOX_EMPTY.match(text):
                problem(number, "a checkbox without an id or title",
                        f"write `- [ ] {stage.number}.N What done looks like`" if stage else "write a checkpoint id and title")
            continue
        id_match = _ID.match(box.group(4))
        if not in_stage:
            if id_match and not body.items and not seen_stage:
                problem(number, f"checkpoint {id_match.group(1)} comes before any stage heading",
                        "put it under a heading such as `## Stage 1: Title`")
            continue  # checkboxes in notes and handoff sections are free text
        assert stage is not None
        if not id_match:
            problem(number, "a checkpoint without an id",
                    f"start it with a stable id: `- [ ] {stage.number}.N {box.group(4).strip()[:40]}`")
            continue
        item = _scan_checkpoint(id_match.group(1), id_match.group(2), box.group(2), index, number, stage.number, problem)
        stage_has_checkpoint = True
        if item.checkpoint_id in seen_checkpoint:
            problem(number, f"checkpoint id {item.checkpoint_id} appears twice (first on line {seen_checkpoint[item.checkpoint_id]})",
                    "give each checkpoint its own id; ids are how progress is tracked across sessions")
            body.repeats.append(item)
            continue
        seen_checkpoint[item.checkpoint_id] = number
        body.items.append(item)
    close_stage()  # an unclosed fence hides the rest of the file, as in any Markdown renderer
    if not seen_stage:
        problem(start + 1 if start < len(lines) else max(1, len(lines)), "the plan has no stages",
                "add at least one `## Stage 1: Title` heading followed by checkpoints `- [ ] 1.1 Title`")
    return body


def _comment_problems(comments: list[str], allowed: tuple[str, ...], other: tuple[str, ...], where: str,
                      number: int, problem) -> dict[str, str]:
    values: dict[str, str] = {}
    for comment in comments:
        m = _COMMENT_KEY.match(comment)
        if not m:
            continue  # a plain comment is a note
        key = m.group(1).lower()
        if key in allowed:
            values[key] = m.group(2)
        elif key in other:
            problem(number, f"`{key}:` does not apply to a {where}",
                    "`sessions:` goes on a stage heading, `verify:` at the end of a checkpoint line")
        elif guess := difflib.get_close_matches(key, allowed, n=1, cutoff=0.7):
            problem(number, f"unknown annotation `{key}:` on a {where}", f"did you mean `<!-- {guess[0]}: ... -->`?")
    return values


def _scan_stage(heading: str, index: int, number: int, problem) -> Item | None:
    text, comments = split_comments(heading)
    m = _STAGE.match(text)
    if not m:
        problem(number, f"stage heading `## {heading[:50]}` has no stage number",
                "write it as `## Stage 1: Title <!-- sessions: 2 -->`")
        return None
    values = _comment_problems(comments, STAGE_KEYS, CHECKPOINT_KEYS, "stage heading", number, problem)
    sessions = 1
    if "sessions" in values:
        raw = values["sessions"]
        if re.fullmatch(r"\d{1,4}", raw) and int(raw) >= 1:
            sessions = int(raw)
        else:
            problem(number, f"`sessions: {raw[:30]}` is not a positive whole number",
                    "write the expected number of agent sessions, e.g. `<!-- sessions: 2 -->`")
    return Item("stage", index, number, number=int(m.group(1)), title=m.group(2).strip(), sessions=sessions)


def _scan_checkpoint(cid: str, rest: str, box: str, index: int, number: int, stage_number: int, problem) -> Item:
    text, comments = split_comments(rest)
    values = _comment_problems(comments, CHECKPOINT_KEYS, STAGE_KEYS, "checkpoint", number, problem)
    verify = values.get("verify")
    if verify is not None and not verify.strip():
        problem(number, f"checkpoint {cid} has an empty `verify:` command",
                "write a command, e.g. `<!-- verify: pytest -q tests/test_x.py -->`, or remove the comment")
        verify = None
    if cid.split(".")[0] != str(stage_number):
        problem(number, f"checkpoint {cid} is under stage {stage_number}",
                f"number it `{stage_number}.N`, or move it under stage {cid.split('.')[0]}")
    title, reason = split_blocked(text)
    if reason is not None:
        state = CheckpointState.BLOCKED
        title = title or reason
    else:
        state = CheckpointState.DONE if box in "xX" else CheckpointState.TODO
    return Item("checkpoint", index, number, number=stage_number, title=title, checkpoint_id=cid, state=state,
                verify=verify, blocked_reason=reason)


def split_notes(lines: list[str], headings: bool = True) -> tuple[list[str], list[str]]:
    """Split free text where it would end a stage (a `#`/`##` heading) or hide what follows (an unclosed fence).

    Returns (the part that can stay under its checkpoint, the rest).
    """
    fence: str | None = None
    fence_at = 0
    for n, raw in enumerate(lines):
        text = raw.rstrip("\r\n")
        m = _FENCE.match(text)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
        elif m:
            fence, fence_at = m.group(1), n
        elif headings and text.startswith("#") and _OTHER_HEADING.match(text):
            return lines[:n], lines[n:]
    if fence is not None:
        return lines[:fence_at], lines[fence_at:]
    return lines, []


def rewrite_state(line: str, state: CheckpointState, reason: str | None = None) -> str:
    """A checkpoint line with its state set; everything else on the line is kept."""
    ending = line[len(line.rstrip("\r\n")) :]
    box = _CHECKBOX.match(line.rstrip("\r\n"))
    id_match = _ID.match(box.group(4)) if box else None
    if box is None or id_match is None:
        raise ValueError(f"not a checkpoint line: {line!r}")
    rest = id_match.group(2)
    text, _ = split_comments(rest)
    suffix = rest[len(text) :] if rest.startswith(text) else ""
    title, old_reason = split_blocked(text)
    if state is CheckpointState.BLOCKED:
        new_reason = reason or old_reason or "blocked (set by plan-runner)"
        text = f"{title} BLOCKED: {new_reason}" if title else f"BLOCKED: {new_reason}"
        mark = " "
    else:
        text = title or (old_reason or "")
        mark = "x" if state is CheckpointState.DONE else " "
    head = f"{box.group(1)}{mark}{box.group(3)}{id_match.group(1)}"
    return f"{head} {text}{suffix}{ending}" if text else f"{head}{suffix}{ending}"
