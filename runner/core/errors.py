"""The one exception family users see: what happened, why, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.exits import Exit


@dataclass(frozen=True)
class Problem:
    """One problem in a user's file, located to a line."""

    file: str
    line: int
    what: str
    fix: str

    def render(self) -> str:
        return f"{self.file}:{self.line}: {self.what}\n    fix: {self.fix}"


class PlanRunnerError(Exception):
    """A user-facing error. The CLI and the action catch it in one place.

    ``what`` is one line, ``why`` the likely cause, ``fix`` the remedy (may be
    several lines, e.g. YAML to paste).
    """

    exit_code: int = Exit.USER_ERROR

    def __init__(self, what: str, why: str = "", fix: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.why = why
        self.fix = fix

    def render(self) -> str:
        lines = [f"error: {self.what}"]
        if self.why:
            lines.append(f"  why: {self.why}")
        if self.fix:
            fix_lines = self.fix.splitlines() or [""]
            lines.append(f"  fix: {fix_lines[0]}")
            lines.extend(f"       {line}" for line in fix_lines[1:])
        return "\n".join(lines)


class PlanError(PlanRunnerError):
    """A plan file is invalid. ``problems`` holds every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        first = problems[0] if problems else None
        super().__init__(
            what=f"{len(problems)} problem(s) in plan" + (f" {first.file}" if first else ""),
            why="the plan does not match the format in docs/plan-format.md",
            fix="correct each problem listed; `plan-runner validate FILE` re-checks",
        )

    def render(self) -> str:
        return "\n".join(p.render() for p in self.problems)


class StateConflict(PlanRunnerError):
    """Another job advanced the plan first (compare-and-swap lost)."""

    exit_code = Exit.OK


class ServiceUnavailable(PlanRunnerError):
    """An external service (GitHub, model API) stayed down past the retry budget."""

    exit_code = Exit.SERVICE_UNAVAILABLE  # not PARKED: nothing waits for a human, a later run goes on


class Refused(PlanRunnerError):
    """A service refused an act for a reason only a person can change (a repository setting, a
    permission): asking again changes nothing, so the plan parks with the fix instead of retrying.
    ``report_url`` is where the report can be read when the refusal kept it from being published."""

    def __init__(self, what: str, why: str = "", fix: str = "", report_url: str = "") -> None:
        super().__init__(what, why, fix)
        self.report_url = report_url
