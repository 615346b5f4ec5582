"""Reading a plan file from disk: the one part of plan parsing that touches the file system.

Parsing itself is pure text-to-record and lives in `runner.core.planfile`.
"""

from __future__ import annotations

from pathlib import Path

from runner.core.errors import PlanError, Problem
from runner.core.plan import Plan
from runner.core.planfile import parse_plan

__all__ = ["load_plan"]


def load_plan(path: Path, root: Path) -> Plan:
    """Read and parse a plan file that must live inside `root` (the repository)."""
    root_resolved = root.resolve()
    try:
        shown = path.absolute().relative_to(root.absolute()).as_posix()
    except ValueError:
        shown = str(path)
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError) as e:
        raise PlanError([Problem(shown, 1, f"cannot open the plan: {getattr(e, 'strerror', None) or e}", "check the path")]) from None
    if not resolved.is_relative_to(root_resolved):
        why = "is a symlink to" if path.is_symlink() else "resolves to"
        raise PlanError([Problem(shown, 1, f"the plan {why} {resolved}, outside {root_resolved}",
                                 "plans must live inside the repository; copy the file in instead of linking it")])
    try:
        data = resolved.read_bytes()
    except OSError as e:
        raise PlanError([Problem(shown, 1, f"cannot read the plan: {e.strerror or e}", "check the path and permissions")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PlanError([Problem(shown, line, f"the plan is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
                                 "save the file as UTF-8")]) from None
    return parse_plan(text, shown)
