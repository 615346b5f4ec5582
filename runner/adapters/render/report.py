"""Reports for humans: park issues, park files, pull requests, job summaries, terminals.

Rendered from jinja2 templates (StrictUndefined) over the same records the
core uses. Untrusted text (gate output, the agent's handoff) is fenced, and
known secret values are redacted before anything is published.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import jinja2

from runner.core.inert import defang, fence  # noqa: F401 - re-exported

from runner.core.actions import Verdict, describe
from runner.core.evidence import Evidence
from runner.core.plan import Plan
from runner.core.policy import AnyAction, RunState

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("runner", "templates"),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    trim_blocks=False,
)
def redact(text: str, secrets: Iterable[str]) -> str:
    for s in sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


def _hints(evidence: Evidence) -> list[tuple[str, str]]:
    h = evidence.signals.hints
    out = []
    if h.claimed_done is not None:
        out.append(("claimed done", "yes" if h.claimed_done else "no"))
    for name in ("stop_reason", "result_subtype", "is_error"):
        value = getattr(h, name)
        if value is not None:
            out.append((name.replace("_", " "), str(value)))
    if h.empty_output:
        out.append(("empty output", "yes"))
    if h.empty_plan:
        out.append(("empty plan", "yes"))
    if h.claims:
        out.append(("claims", "; ".join(h.claims)))
    if h.final_text:
        out.append(("last words", defang(h.final_text[:300]).replace("\n", " ")))
    return out


def _failures(evidence: Evidence) -> list[str]:
    """For an all-failed session: the errors, in plain words, not a model's summary."""
    s = evidence.signals
    lines = []
    if s.error:
        lines.append(f"the backend reported: {s.error}")
    if s.tool_calls:
        lines.append(f"{s.tool_failures} of {s.tool_calls} tool calls failed" + (f" (last: {s.last_tool})" if s.last_tool else ""))
    lines += [f"gate {g.name}: {g.error or 'red'}" for g in evidence.gates if not g.passed]
    if not evidence.work_commits:
        lines.append("no work was committed")
    return lines or ["the session ended without producing anything"]


def render_report(plan: Plan, state: RunState, *, title: str, verdict: Verdict | None = None,
                  evidence: Evidence | None = None, reason: str = "", details: Iterable[str] = (),
                  next_action: AnyAction | None = None, secrets: Iterable[str] = ()) -> str:
    text = _ENV.get_template("report.md.j2").render(
        title=title, plan=plan, state=state, verdict=verdict, evidence=evidence, reason=defang(reason),
        details=[defang(d) for d in details], fence=fence,
        wip=bool(evidence and any(c.wip for c in evidence.commits)),
        hints=_hints(evidence) if evidence else [], failures=_failures(evidence) if evidence else [],
        next_action=describe(next_action) if next_action is not None else "",
    )
    return redact(text, secrets)


def render_park_issue(plan: Plan, report: str, checkpoint: str | None, *, local: bool = False) -> str:
    """The park report with how to answer it: `/plan-runner` comments on GitHub, `plan-runner reply` locally."""
    return _ENV.get_template("park_issue.md.j2").render(plan=plan, report=report, checkpoint=checkpoint, local=local)


def park_marker(plan_id: str) -> str:
    return f"<!-- plan-runner:park plan={plan_id} -->"


def checkpoint_counts(plan: Plan, skipped: Iterable[str] = ()) -> list[tuple[str, int]]:
    skipped = set(skipped)
    counts = {"done": 0, "todo": 0, "blocked": 0, "skipped": 0}
    for c in plan.checkpoints:
        key = "skipped" if c.id in skipped and c.state.value != "DONE" else c.state.value.lower()
        counts[key] += 1
    return list(counts.items())


def render_summary(plan: Plan, report: str, headline: str, skipped: Iterable[str] = ()) -> str:
    return _ENV.get_template("summary.md.j2").render(
        plan=plan, report=report, headline=headline, counts=checkpoint_counts(plan, skipped))
