"""Session prompts: one jinja2 template per `SessionKind`, rendered from real records.

Python builds a plain view of the plan and the last session's evidence; the
templates only lay it out. The prompt points at the work: the checkpoint and the
stage's text come first, as instructions, because that text is the maintainer's
(taken from the plan on the base branch, never from the agent's work branch,
whose free text an agent may have written). The plan file is named once, in the
one rule that says exactly how to tick (the line before and after), and the rules
are cut to what the verdict reads: gates, commits, the tick. Text the agent or a
tool produced (gate output, the agent's handoff, error messages, rejected ticks)
is fenced with a fence longer than any backtick run inside it, and introduced as
data, so it cannot pose as instructions. One form for every backend: what the
verdict reads does not depend on the agent. Templates use `StrictUndefined`: a
missing field fails the render instead of leaving a hole in the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import jinja2

from runner.core.actions import RunSession, SessionKind
from runner.core.evidence import CheckpointState, Evidence, GateResult
from runner.core.plan import GateConfig, Plan, Stage
from runner.core.planfile_body import rewrite_state

__all__ = ["PromptContext", "failure_pointers", "fence", "inline_code", "instead_of", "render_handoff_from_evidence", "render_prompt", "stage_excerpt"]

_TEMPLATES = {
    SessionKind.DELIVERY: "prompt_delivery.j2",
    SessionKind.FIX_GATES: "prompt_fix_gates.j2",
    SessionKind.FIX_NO_PROGRESS: "prompt_fix_no_progress.j2",
    SessionKind.FIX_ERROR: "prompt_fix_error.j2",
    SessionKind.RESUME: "prompt_resume.j2",
    SessionKind.HANDOFF: "prompt_handoff.j2",
}
# Bounds on embedded text, so one noisy gate cannot crowd the task out of the prompt.
GATE_TAIL_CHARS = 8000
HANDOFF_CHARS = 20000
ERROR_CHARS = 4000
STAGE_CHARS = 12000


@dataclass(frozen=True)
class PromptContext:
    """Everything a session prompt is rendered from.

    ``plan`` is parsed from the session's base commit and ``plan_text`` is that
    file's text. ``last_evidence`` is the previous session's evidence (failing
    gates, error, commits); ``history`` is every session since the last
    handoff, for plan-runner's own handoff when the agent wrote none.
    ``rejected_flips`` are the previous verdict's "id: why" lines.
    ``instructions`` is a maintainer's reply text (``RunSession.instructions``
    is used when this is None). ``trusted_text`` is the plan file as the
    maintainer wrote it (on the base branch): the stage's text is taken from it
    and shown as instructions; when None, ``plan_text`` is taken to be it.
    """

    plan: Plan
    plan_text: str
    handoff_path: str
    previous_handoff: str | None = None
    last_evidence: Evidence | None = None
    history: tuple[Evidence, ...] = ()
    rejected_flips: tuple[str, ...] = ()
    instructions: str | None = None
    session_number: int | None = None
    trusted_text: str | None = None


def fence(text: str, info: str = "text") -> str:
    """``text`` in a Markdown code fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{ticks}{info}\n{body}{ticks}"


def inline_code(text: str) -> str:
    """``text`` as inline Markdown code, whatever backticks it contains."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _clip_end(text: str, limit: int) -> str:
    """The end of ``text`` (where failures are summarised), cut at a line start."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    if 0 <= newline < len(cut) // 2:
        cut = cut[newline + 1 :]
    return f"[... {len(text) - len(cut)} earlier characters omitted ...]\n{cut}"


def _clip_start(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters omitted ...]\n"


_HEADING = re.compile(r"^#{1,2}(?:[ \t]|$)")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_STAGE_HEADING = r"^##[ \t]+stage[ \t]+{n}(?![\d.])"


def stage_excerpt(plan_text: str, stage: Stage) -> str:
    """The stage's section of the plan: its heading up to the next `#`/`##` heading."""
    lines = plan_text.splitlines()
    start = stage.line - 1
    if not (0 <= start < len(lines) and re.match(_STAGE_HEADING.format(n=stage.number), lines[start], re.I)):
        pattern = re.compile(_STAGE_HEADING.format(n=stage.number), re.I)
        start = next((i for i, line in enumerate(lines) if pattern.match(line)), -1)
    if start < 0:
        # No heading found (a plan built in code): list the checkpoints instead.
        boxes = (f"- [{'x' if c.state is CheckpointState.DONE else ' '}] {c.id} {c.title}" for c in stage.checkpoints)
        return "\n".join([f"## Stage {stage.number}: {stage.title}", *boxes])
    end, open_fence = len(lines), None
    for i in range(start + 1, len(lines)):
        found = _FENCE_LINE.match(lines[i])
        if open_fence:
            if found and found.group(1)[0] == open_fence[0] and len(found.group(1)) >= len(open_fence):
                open_fence = None
        elif found:
            open_fence = found.group(1)
        elif _HEADING.match(lines[i]):
            end = i
            break
    return _clip_start("\n".join(lines[start:end]).strip("\n"), STAGE_CHARS)


_CHECKPOINT_LINE = r"^ {{0,3}}[-*+][ \t]+\[[ xX]\][ \t]+{id}(?=\s|$)"


def _checkpoint_line(text: str, checkpoint_id: str) -> tuple[int, str] | None:
    """(index, line) of the checkpoint's line in ``text`` (outside code fences), or None."""
    pattern = re.compile(_CHECKPOINT_LINE.format(id=re.escape(checkpoint_id)))
    open_fence = None
    for i, line in enumerate(text.splitlines()):
        found = _FENCE_LINE.match(line)
        if open_fence:
            if found and found.group(1)[0] == open_fence[0] and len(found.group(1)) >= len(open_fence):
                open_fence = None
        elif found:
            open_fence = found.group(1)
        elif pattern.match(line):
            return i, line
    return None


def _task_text(text: str, stage: Stage) -> str:
    """The stage's section of the maintainer's text without its heading, each box as the tracker has it now."""
    lines = stage_excerpt(text, stage).splitlines()[1:]
    for c in stage.checkpoints:
        found = _checkpoint_line("\n".join(lines), c.id)
        if found is not None:
            # the reason of a BLOCKED marker the agent set is the agent's text: not shown here
            lines[found[0]] = rewrite_state(found[1], c.state)
    return "\n".join(lines).strip("\n")


def _tick_view(plan_text: str, checkpoint: dict | None, stage: Stage | None) -> dict | None:
    """The checkpoint's line as it is in the agent's copy of the plan file, and the same line ticked."""
    if checkpoint is None:
        return None
    found = _checkpoint_line(plan_text, checkpoint["id"])
    before = found[1] if found else f"- [ ] {checkpoint['id']} {checkpoint['title']}"
    try:
        after = rewrite_state(before, CheckpointState.DONE)
    except ValueError:
        return None
    more = stage is not None and any(c.state is not CheckpointState.DONE and c.id != checkpoint["id"]
                                     for c in stage.checkpoints)
    box_before, box_after = _BOX.match(before), _BOX.match(after)
    return {"before": before.rstrip(), "after": after.rstrip(), "more": more,
            "box_before": box_before.group(1) if box_before else "- [ ]",
            "box_after": box_after.group(1) if box_after else "- [x]"}


_BOX = re.compile(r"^\s*([-*+][ \t]+\[[ xX]\])")
# A test file as pytest and unittest name it: `tests/test_x.py`, `x_test.py`, or unittest's dotted id.
_TEST_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*(?:test_\w+|\w+_test)\.py)\b")
_UNITTEST_ID = re.compile(r"^(?:FAIL|ERROR): (\S+) \(([\w.]+)\)", re.M)
_PY_PATH = re.compile(r"(?:File \"([^\"]+\.py)\", line \d+|(?<![\w/.-])([\w./-]+\.py):\d+|\((/[^()\s]+\.py)\))")


def _is_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def failure_pointers(tail: str) -> dict:
    """The failing test files and the modules they point at, from a gate's output (pytest or unittest): the
    files a fix starts from. Paths are made relative to the checkout the gate ran in, found from a test file
    the output names; other absolute paths (the standard library, site-packages) are left out."""
    tests: list[str] = []
    for found in _TEST_FILE.finditer(tail):
        if not found.group(1).startswith("/") and found.group(1) not in tests:
            tests.append(found.group(1))
    for found in _UNITTEST_ID.finditer(tail):
        # `test_x (tests.test_m.Case.test_x)`, or a module that failed to import: `tests.test_m (unittest...)`
        dotted = found.group(1) if "." in found.group(1) else found.group(2).rsplit(".", 2)[0]
        path = dotted.replace(".", "/") + ".py"
        if _is_test(path) and path not in tests:
            tests.append(path)
    paths = [a or b or c for a, b, c in _PY_PATH.findall(tail)]
    roots = {p[: -len(t)] for p in paths for t in tests if p.startswith("/") and p.endswith("/" + t)}
    if not roots:  # no relative name to anchor on: a test folder's parent is the checkout
        roots = {p[: p.rindex(d) + 1] for p in paths for d in ("/tests/", "/test/") if p.startswith("/") and d in p
                 and _is_test(p)}
    modules: list[str] = []
    for path in paths:
        if path.startswith("/"):
            root = next((r for r in roots if path.startswith(r)), None)
            if root is None:
                continue
            path = path[len(root):]
        if "site-packages/" in path or path.startswith(".") or _is_test(path):  # a venv in the checkout
            if _is_test(path) and path not in tests and path.rsplit("/", 1)[-1] != "conftest.py":
                tests.append(path)
            continue
        if path not in modules:
            modules.append(path)
    guessed = []
    if not modules:  # an assertion shows no frame of the code under test: its name after the test file's
        for t in tests:
            name = t.rsplit("/", 1)[-1].removeprefix("test_").removesuffix("_test.py").removesuffix(".py") + ".py"
            if name not in guessed:
                guessed.append(name)
    return {"tests": tests[:5], "modules": modules[:5], "guessed": guessed[:5]}


_STUCK = re.compile(r"^stuck \((\w+)\): .*?: (\w+) (\{.*?\})(?:: |$)", re.S)


def instead_of(error: str | None) -> str | None:
    """What to do instead of the call the built-in agent repeated until it was stopped (its `stuck (...)` error)."""
    found = _STUCK.match(error or "")
    if found is None:
        return None
    rule, tool = found.group(1), found.group(2)
    if rule in ("repeated_result", "alternation"):
        return ("Its results could not change because nothing in the work tree changed between the calls. Instead of "
                "calling it again, do the next step: change the code the task names (read_file, then write_file or "
                "edit_file), run the gates, commit; if the work is done and committed, tick and stop.")
    advice = {
        "edit_file": "Instead of edit_file with the same old_string, read_file the file and write_file it whole with "
                     "your change, keeping everything else.",
        "read_file": "Instead of read_file of that path, call list_files with `.` to see the real paths.",
        "list_files": "Instead, call list_files with `.` to see the real paths.",
        "write_file": "Instead of writing the whole file again, change only the lines that need it with edit_file "
                      "(old_string: one line copied exactly from read_file's result, new_string: that line changed).",
        "mark_done": "Instead of mark_done again, commit the work first (`git add -A && git commit -m '<message>'`); "
                     "if mark_done says the checkpoint is unknown, give its id as the task shows it.",
        "run_shell": "Instead of running the same command again, read the error above, change the code it points at "
                     "(read_file, then write_file or edit_file), and only then run it again.",
    }
    return advice.get(tool)



def _gate_target(gate: GateConfig) -> str:
    if gate.run is not None:
        return gate.run
    if gate.http is not None:
        return f"GET {gate.http}"
    return "remote checks: " + ", ".join(gate.checks or ())


def _gate_views(plan: Plan) -> list[dict]:
    return [
        {"name": g.name, "kind": g.kind, "target": _gate_target(g), "required": g.required,
         "cwd": g.cwd, "timeout_s": g.timeout_s}
        for g in plan.config.gates
    ]


def _failing_gate_views(plan: Plan, gates: Sequence[GateResult], *, required_only: bool = True) -> list[dict]:
    by_name = {g.name: g for g in plan.config.gates}
    views = []
    for r in gates:
        if r.passed or (required_only and not r.required):
            continue
        config = by_name.get(r.name)
        if r.timed_out:
            status = "timed out"
        elif r.http_status is not None:
            status = f"HTTP {r.http_status}"
        elif r.exit_code is not None:
            status = f"exit code {r.exit_code}"
        else:
            status = "could not run"
        views.append({
            "name": r.name, "kind": r.kind, "target": _gate_target(config) if config else "(not in the plan)",
            "status": status, "error": r.error, "reran": r.reran, "required": r.required,
            "tail": _clip_end(r.output_tail, GATE_TAIL_CHARS),
        })
    return views


def _checkpoint_view(plan: Plan, checkpoint_id: str | None) -> tuple[dict | None, dict | None]:
    checkpoint = plan.checkpoint(checkpoint_id) if checkpoint_id else None
    if checkpoint is None:
        checkpoint = plan.next_checkpoint()
    if checkpoint is None:
        return None, None
    stage = plan.stage_of(checkpoint.id)
    cp = {"id": checkpoint.id, "title": checkpoint.title, "verify": checkpoint.verify,
          "state": checkpoint.state.value, "line": checkpoint.line, "blocked_reason": checkpoint.blocked_reason}
    st = None
    if stage is not None:
        st = {"number": stage.number, "title": stage.title,
              "checkpoints": [{"id": c.id, "title": c.title, "state": c.state.value} for c in stage.checkpoints]}
    return cp, st


def _commit_views(evidence: Sequence[Evidence], limit: int = 30) -> list[dict]:
    seen: dict[str, dict] = {}
    for e in evidence:
        for c in e.commits:
            seen.setdefault(c.sha, {"sha": c.sha[:10], "summary": c.summary, "files": list(c.files[:8]),
                                    "more_files": max(0, len(c.files) - 8), "work": c.counts_as_work and not c.wip,
                                    "wip": c.wip, "session": e.session_number})
    return list(seen.values())[-limit:]


def _session_view(e: Evidence | None) -> dict | None:
    if e is None:
        return None
    s = e.signals
    return {
        "number": e.session_number, "kind": e.session_kind, "checkpoint": e.next_checkpoint,
        "commits": _commit_views([e]), "work_commits": len(e.work_commits),
        "exit_kind": s.exit_kind.value, "exit_code": s.exit_code,
        "error": _clip_end(s.error, ERROR_CHARS) if s.error else None,
        "tampering": list(e.tampering),
        "flips": [{"id": f.checkpoint_id, "before": f.before.value if f.before else None,
                   "after": f.after.value if f.after else None} for f in e.flips],
    }


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("runner", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # prompts are Markdown for a model, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fence"] = fence
    env.filters["code"] = inline_code
    return env


def _plan_view(plan: Plan) -> dict:
    # `named`: the plan has a title of its own; a bare id ("mathx") in bold was read as a path by small models
    return {"title": plan.title or plan.id, "named": bool(plan.title), "id": plan.id, "path": plan.path, "branch": plan.work_branch,
            "gates": _gate_views(plan)}


def render_prompt(action: RunSession, context: PromptContext) -> str:
    """The prompt for ``action``'s session kind, rendered from ``context``."""
    plan = context.plan
    last = context.last_evidence
    checkpoint, stage = _checkpoint_view(plan, action.checkpoint)
    stage_obj = plan.stage_of(checkpoint["id"]) if checkpoint else None
    handoff = context.previous_handoff
    handoff_by_plan_runner = False
    if action.kind is SessionKind.HANDOFF and not (handoff and handoff.strip()):
        handoff = render_handoff_from_evidence(plan, context.history or ((last,) if last else ()))
        handoff_by_plan_runner = True
    instructions = context.instructions if context.instructions is not None else action.instructions
    stage_text = _task_text(context.trusted_text or context.plan_text, stage_obj) if stage_obj else ""
    failing = _failing_gate_views(plan, last.gates) if last else []
    values = {
        "kind": action.kind.value,
        "reason": action.reason,
        "session_number": context.session_number,
        "plan": _plan_view(plan),
        "checkpoint": checkpoint,
        "stage": stage,
        "stage_text": stage_text,
        "tick": _tick_view(context.plan_text, checkpoint, stage_obj),
        "checkpoint_shown": bool(checkpoint and _checkpoint_line(stage_text, checkpoint["id"]) is not None),
        "handoff_rule": not (action.kind is SessionKind.DELIVERY
                             and sum(c.state is not CheckpointState.DONE for c in plan.checkpoints) <= 1),
        "pointers": failure_pointers("\n".join(g["tail"] for g in failing)) if failing else None,
        "instead": instead_of(last.signals.error) if last else None,
        "handoff_path": context.handoff_path,
        "previous_handoff": _clip_end(handoff, HANDOFF_CHARS) if handoff and handoff.strip() else None,
        "handoff_by_plan_runner": handoff_by_plan_runner,
        "last": _session_view(last),
        "failing_gates": failing,
        "rejected_flips": list(context.rejected_flips),
        "instructions": instructions.strip() if instructions and instructions.strip() else None,
    }
    return _environment().get_template(_TEMPLATES[action.kind]).render(**values)


def render_handoff_from_evidence(plan: Plan, evidence_list: Sequence[Evidence]) -> str:
    """plan-runner's own handoff when the agent wrote none: commits, checkpoint states, last gates.

    ``plan`` should carry the tracker as of the latest head, so the checkpoint
    states are current.
    """
    evidence = [e for e in evidence_list if e is not None]
    last = evidence[-1] if evidence else None
    next_cp = plan.next_checkpoint()
    values = {
        "plan": _plan_view(plan),
        "stages": [
            {"number": s.number, "title": s.title,
             "checkpoints": [{"id": c.id, "title": c.title, "state": c.state.value,
                              "blocked_reason": c.blocked_reason, "next": next_cp is not None and c.id == next_cp.id}
                             for c in s.checkpoints]}
            for s in plan.stages
        ],
        "sessions": [_session_view(e) for e in evidence],
        "commits": _commit_views(evidence),
        "last_gates": [
            {"name": g.name, "passed": g.passed, "required": g.required, "flaky": g.flaky, "timed_out": g.timed_out,
             "exit_code": g.exit_code, "http_status": g.http_status, "cached": g.cached}
            for g in (last.gates if last else ())
        ],
    }
    return _environment().get_template("prompt_evidence_handoff.j2").render(**values)
