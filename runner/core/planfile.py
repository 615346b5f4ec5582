"""Plan files: Markdown with YAML front matter, parsed into `runner.core.plan` models.

The format is documented in docs/plan-format.md. Parsing reports every problem
of a file at once (`PlanError`), each located to a line with a fix. The tracker
helpers keep configuration and structure from the base commit and take only
checkpoint states from the agent's version of the file.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import yaml

from runner.core.errors import PlanError, PlanRunnerError, Problem
from runner.core.evidence import CheckpointState, Flip
from runner.core.plan import Plan, PlanConfig, Stage
from runner.core.planfile_commonmark import disagreements
from runner.core.planfile_body import Body, Item, rewrite_state, scan_body, split_notes
from runner.core.planfile_front import FORMAT_DOC, FrontMatter, load_yaml, split_front_matter, validate_config

__all__ = [
    "diff_tracker",
    "parse_plan",
    "parse_tracker",
    "plan_id_from_path",
    "plan_json_schema",
    "protected_changes",
    "restore_protected",
    "set_checkpoint_state",
    "with_tracker",
]

_PLAN_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


def plan_id_from_path(path: str) -> str:
    """The file stem, lower-cased, every character outside `[a-z0-9._-]` replaced by `-`."""
    name = PurePosixPath(path.replace("\\", "/")).name
    stem = name[:-3] if name.lower().endswith(".md") else name
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", stem.lower())
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"\.{2,}", ".", cleaned)).strip(".-_")
    return cleaned[:100]


def _id_problem(plan_id: str) -> str | None:
    if not _PLAN_ID.match(plan_id) or ".." in plan_id:
        return "must be 1-100 characters from `a-z 0-9 . _ -`, start with a letter or digit, and not contain `..`"
    return None


def parse_plan(text: str, path: str, plan_id: str | None = None) -> Plan:
    """Parse a whole plan file; raise `PlanError` listing every problem found."""
    lines = text.splitlines(keepends=True)
    fm, body_start, problems = split_front_matter(lines, path)
    config: PlanConfig | None = None
    if fm is not None:
        data, line_map, yaml_problems = load_yaml(fm, path)
        problems += yaml_problems
        if not yaml_problems:
            config, config_problems = validate_config(data, line_map, path, fm.first_line)
            problems += config_problems
    body = scan_body(lines, body_start, path) if body_start < len(lines) or fm is not None else Body()
    problems += body.problems
    if body_start < len(lines):  # one reading: what plan-runner tracks is what a reader of the rendered plan sees
        problems += [Problem(path, d.line, f"the tracker reads two ways: {d.what}", d.fix)
                     for d in disagreements(lines, body_start, body)]
    if plan_id is None:
        plan_id = plan_id_from_path(path)
        if _id_problem(plan_id):
            problems.append(Problem(path, 1, f"cannot derive a plan id from the file name {PurePosixPath(path).name!r}",
                                    "rename the file to letters, digits, `.`, `_` and `-`, e.g. `plans/add-auth.md`"))
    elif why := _id_problem(plan_id):
        problems.append(Problem(path, 1, f"plan id {plan_id[:60]!r} {why}", "use an id like `add-auth`"))
    if problems:
        raise PlanError(sorted(problems, key=lambda p: p.line))
    assert config is not None
    return Plan(path=path, id=plan_id, config=config, title=body.title, stages=body.stages())


def _lenient_body(text: str, path: str = "") -> tuple[list[str], FrontMatter | None, int, Body]:
    """Scan any version of a plan without judging it: the agent may have broken it."""
    lines = text.splitlines(keepends=True)
    fm, start, _ = split_front_matter(lines, path)
    if fm is None and lines and lines[0].lstrip("\ufeff").rstrip() == "---":
        start = len(lines)  # unterminated front matter: no body
    return lines, fm, start, scan_body(lines, start, path)


def parse_tracker(text: str, path: str) -> tuple[Stage, ...]:
    """The stages and checkpoints of a plan file, ignoring its front matter; `PlanError` if malformed."""
    lines = text.splitlines(keepends=True)
    fm, start, problems = split_front_matter(lines, path)
    if fm is None and lines and lines[0].lstrip("\ufeff").rstrip() == "---":
        raise PlanError(problems)
    body = scan_body(lines, start if fm is not None else 0, path)
    if body.problems:
        raise PlanError(body.problems)
    return body.stages()


def with_tracker(plan: Plan, head_text: str) -> Plan:
    """`plan` (from the base commit) with checkpoint states taken from `head_text`.

    Everything except state and blocked reason stays as in the base. A checkpoint the
    head lost or mangled keeps its base state; `protected_changes` reports the damage.
    """
    _, _, _, body = _lenient_body(head_text, plan.path)
    head: dict[str, Item] = {}
    for item in body.items:
        if item.kind == "checkpoint":
            head.setdefault(item.checkpoint_id, item)
    stages = []
    for stage in plan.stages:
        checkpoints = tuple(
            c.model_copy(update={"state": head[c.id].state, "blocked_reason": head[c.id].blocked_reason}) if c.id in head else c
            for c in stage.checkpoints
        )
        stages.append(stage.model_copy(update={"checkpoints": checkpoints}))
    return plan.model_copy(update={"stages": tuple(stages)})


def diff_tracker(before: Plan, after: Plan) -> tuple[Flip, ...]:
    """Checkpoints whose state differs, in plan order (a missing checkpoint has state None)."""
    old = {c.id: c.state for c in before.checkpoints}
    new = {c.id: c.state for c in after.checkpoints}
    order = list(old) + [cid for cid in new if cid not in old]
    return tuple(Flip(checkpoint_id=cid, before=old.get(cid), after=new.get(cid)) for cid in order if old.get(cid) != new.get(cid))


def set_checkpoint_state(text: str, checkpoint_id: str, state: CheckpointState, reason: str | None = None) -> str:
    """`text` with one checkpoint's box / `BLOCKED:` marker rewritten; nothing else changes."""
    lines, _, _, body = _lenient_body(text)
    item = next((i for i in body.items if i.kind == "checkpoint" and i.checkpoint_id == checkpoint_id), None)
    if item is None:
        raise PlanRunnerError(
            what=f"checkpoint {checkpoint_id} is not in the plan",
            why="the plan file no longer has a checkpoint line with that id",
            fix="restore the plan's structure from the base commit first (restore_protected)",
        )
    lines[item.index] = rewrite_state(lines[item.index], state, reason)
    return "".join(lines)


# --- tampering -------------------------------------------------------------------------------


def _front_data(fm: FrontMatter | None) -> object:
    if fm is None:
        return None
    try:
        return yaml.safe_load(fm.yaml_text)
    except (yaml.YAMLError, RecursionError):
        return _UNREADABLE


_UNREADABLE = object()


def protected_changes(base_text: str, head_text: str, path: str) -> list[str]:
    """What `head_text` changed that an agent may not change, one readable line each."""
    changes: list[str] = []
    _, base_fm, _, base = _lenient_body(base_text, path)
    head_lines, head_fm, head_start, head = _lenient_body(head_text, path)
    if (base_fm.prefix if base_fm else None) != (head_fm.prefix if head_fm else None):
        before, after = _front_data(base_fm), _front_data(head_fm)
        if head_fm is None:
            changes.append(f"{path}: the front matter was removed or broken")
        elif after is _UNREADABLE:
            changes.append(f"{path}:1: the front matter was changed and no longer parses as YAML")
        elif isinstance(before, dict) and isinstance(after, dict) and before != after:
            keys = sorted(str(k) for k in set(before) | set(after) if before.get(k) != after.get(k))
            changes.append(f"{path}:1: front matter changed: {', '.join(f'`{k}`' for k in keys)}")
        elif before != after:
            changes.append(f"{path}:1: front matter changed")
        else:
            changes.append(f"{path}:1: front matter text changed (comments or formatting)")
    changes += _structure_changes(base, head, path)
    changes += [f"{path}:{d.line}: the tracker reads two ways: {d.what}"
                for d in disagreements(head_lines, head_start, head)]
    return changes


def _structure_changes(base: Body, head: Body, path: str) -> list[str]:
    changes: list[str] = []
    base_stages = {i.number: i for i in base.items if i.kind == "stage"}
    head_stages: dict[int, Item] = {}
    for i in head.items:
        if i.kind == "stage":
            head_stages.setdefault(i.number, i)
    for n, old in base_stages.items():
        new = head_stages.get(n)
        if new is None:
            changes.append(f"{path}: stage {n} ({old.title!r}) was removed")
            continue
        if new.title != old.title:
            changes.append(f"{path}:{new.line}: stage {n} was renamed from {old.title!r} to {new.title!r}")
        if new.sessions != old.sessions:
            changes.append(f"{path}:{new.line}: stage {n} `sessions` changed from {old.sessions} to {new.sessions}")
    changes += [f"{path}:{i.line}: stage {n} ({i.title!r}) was added" for n, i in head_stages.items() if n not in base_stages]
    if [n for n in base_stages if n in head_stages] != [n for n in head_stages if n in base_stages]:
        changes.append(f"{path}: the stages were reordered")

    base_cps = {i.checkpoint_id: i for i in base.items if i.kind == "checkpoint"}
    head_cps: dict[str, Item] = {}
    for i in head.items:
        if i.kind == "checkpoint":
            head_cps.setdefault(i.checkpoint_id, i)
    removed = {cid: i for cid, i in base_cps.items() if cid not in head_cps}
    added = {cid: i for cid, i in head_cps.items() if cid not in base_cps}
    for cid, new in list(added.items()):
        twin = next((old for old in removed.values() if _same_title(old, new)), None)
        if twin is not None:
            changes.append(f"{path}:{new.line}: checkpoint {twin.checkpoint_id} was renumbered to {cid}")
            del removed[twin.checkpoint_id], added[cid]
    changes += [f"{path}: checkpoint {cid} ({i.title!r}) was removed" for cid, i in removed.items()]
    changes += [f"{path}:{i.line}: checkpoint {cid} ({i.title!r}) was added" for cid, i in added.items()]
    for cid, old in base_cps.items():
        new = head_cps.get(cid)
        if new is None:
            continue
        if new.verify != old.verify:
            changes.append(f"{path}:{new.line}: checkpoint {cid} `verify:` changed from {old.verify!r} to {new.verify!r}")
        if new.number != old.number:
            changes.append(f"{path}:{new.line}: checkpoint {cid} moved from stage {old.number} to stage {new.number}")
        if not _same_name(old, new):
            changes.append(f"{path}:{new.line}: checkpoint {cid} was renamed from {old.title!r} to {new.title!r}")
    common = [cid for cid in base_cps if cid in head_cps]
    if common != [cid for cid in head_cps if cid in base_cps]:
        changes.append(f"{path}: the checkpoints were reordered")
    return changes


def _bare_title(item: Item) -> str:
    """A checkpoint's title without its state: a `BLOCKED:` reason alone is no title (whitespace runs count as one)."""
    title = "" if item.blocked_reason is not None and item.title == item.blocked_reason else item.title
    return " ".join(title.split())


def _same_name(old: Item, new: Item) -> bool:
    """The same title, state aside: a checkpoint whose only text was its BLOCKED reason may keep that text as its title."""
    a, b = _bare_title(old), _bare_title(new)
    return a == b or (not a and b == " ".join((old.blocked_reason or "").split())) or (
        not b and a == " ".join((new.blocked_reason or "").split()))


def _same_title(old: Item, new: Item) -> bool:
    return bool(old.title) and old.title.strip().lower() == new.title.strip().lower()


def restore_protected(base_text: str, head_text: str) -> str:
    """`head_text` with the base's front matter and structure put back.

    Stage headings and checkpoint lines come from the base (in base order); each
    checkpoint keeps the head's state, and the free text under every heading or
    checkpoint line the head still has is the head's. Lines the agent added for
    stages or checkpoints that are not in the base are dropped, their notes kept.
    """
    base_lines, base_fm, base_start, base = _lenient_body(base_text)
    head_lines, _, head_start, head = _lenient_body(head_text)

    def segments(lines: list[str], start: int, items: list[Item]) -> tuple[list[str], dict, list[tuple[str, str]]]:
        """(preamble, notes per item key, keys in order); notes of duplicates go to the previous item."""
        bounds = [i.index for i in items] + [len(lines)]
        first = bounds[0]
        notes: dict[tuple[str, str], list[str]] = {}
        carry_to: list[str] = lines[start:first]
        preamble = carry_to
        for n, item in enumerate(items):
            text = lines[item.index + 1 : bounds[n + 1]]
            if item.key in notes:  # a duplicate id: drop its line, keep its notes
                carry_to.extend(text)
            else:
                notes[item.key] = carry_to = list(text)
        return preamble, notes, [i.key for i in items]

    # a repeated checkpoint line is a line the agent added: it bounds notes like an item and is dropped, never
    # kept as free text (under a base checkpoint it would read as that id's first line)
    head_pre, head_notes, _ = segments(head_lines, head_start, sorted(head.items + head.repeats, key=lambda i: i.index))
    _, base_notes, _ = segments(base_lines, base_start, base.items)
    head_items: dict[tuple[str, str], Item] = {}
    for item in head.items:
        head_items.setdefault(item.key, item)
    base_keys = {i.key for i in base.items}
    # notes under lines the agent added belong to the nearest earlier line that survives
    orphan: dict[tuple[str, str] | None, list[str]] = {}
    last: tuple[str, str] | None = None
    for item in head.items:
        if item.key in base_keys:
            last = item.key
        elif head_items[item.key] is item:
            orphan.setdefault(last, []).extend(head_notes.get(item.key, []))

    # Free text that would end a stage or open an unclosed fence moves to the end, so it
    # cannot cut the base's checkpoints off from their stage.
    moved: list[str] = []

    def place(notes: list[str], last: bool, headings: bool = True) -> list[str]:
        if last:
            return notes
        keep, rest = split_notes(notes, headings)
        moved.extend(rest)
        return keep

    out = list(base_lines[:base_start]) if base_fm is not None else []
    out += place(head_pre + orphan.get(None, []), not base.items, headings=False)
    for n, item in enumerate(base.items):
        is_last = n == len(base.items) - 1
        line = base_lines[item.index]
        mine = head_items.get(item.key)
        if mine is not None:
            if item.kind == "checkpoint":
                line = rewrite_state(line, mine.state, mine.blocked_reason)
            out += [line] + place(head_notes.get(item.key, []) + orphan.get(item.key, []), is_last)
        else:
            out += [line] + place(base_notes.get(item.key, []), is_last)
    out += moved
    out = [line if line.endswith(("\n", "\r")) or n == len(out) - 1 else line + "\n" for n, line in enumerate(out)]
    restored = "".join(out)
    if protected_changes(base_text, restored, "plan") == []:
        return restored
    # The agent's free text still reads as structure somewhere: the base with the head's states, its notes left
    # out (they stay in the agent's commit). The promise is the base's structure, whatever the head holds.
    states = {key: item for key, item in head_items.items() if item.kind == "checkpoint"}
    plain = list(base_lines)
    for item in base.items:
        if item.kind == "checkpoint" and item.key in states:
            plain[item.index] = rewrite_state(base_lines[item.index], states[item.key].state,
                                              states[item.key].blocked_reason)
    return "".join(plain)


# --- schema ----------------------------------------------------------------------------------


def plan_json_schema() -> dict:
    """The JSON Schema of the front matter, with duration defaults shown in minutes as written."""
    schema = PlanConfig.model_json_schema()

    def minutes(node: object) -> None:
        if isinstance(node, dict):
            any_of = node.get("anyOf")
            is_duration = isinstance(any_of, list) and any(
                isinstance(a, dict) and a.get("description") == "minutes" for a in any_of
            )
            if is_duration and isinstance(node.get("default"), (int, float)):
                value = node["default"] / 60
                node["default"] = int(value) if value == int(value) else value
            for child in node.values():
                minutes(child)
        elif isinstance(node, list):
            for child in node:
                minutes(child)

    minutes(schema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"Front matter of a plan-runner plan file; see {FORMAT_DOC}. Generated by `plan-runner schema`.",
        **schema,
    }
