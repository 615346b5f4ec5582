"""A session's verdict as a GitHub check run (`plan-runner / <plan>`), which a branch rule can require.

Pure: a frozen record in, the check run's fields out (`GitHubDriver.publish_check` sends them). The conclusion comes
from the evidence plan-runner computed, never from what the agent said: `success` only for a session that advanced
or made progress with every required gate green (the gates plan-runner re-ran itself, with their exit codes).
Everything else is `failure`, but a plan parked for a human, which is `action_required` with the park issue as its
details (GitHub shows a button to it). GitHub counts `neutral` and `skipped` as passing a required check, so
plan-runner never uses them: a waiting, parked or stopped plan must not look green to a branch rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.core.actions import Outcome
from runner.core.evidence import GateResult
from runner.core.ledger import GateSummary, SessionRecord

CHECK_PREFIX = "plan-runner / "
GREEN_OUTCOMES = frozenset({Outcome.ADVANCED, Outcome.PROGRESS})
MAX_OUTPUT = 65_535  # characters GitHub takes in a check run's output summary and text ("Create a check run")
MAX_TITLE = 200  # a one-line title: GitHub documents no limit, its UI shows about this much


def check_name(plan_id: str) -> str:
    return f"{CHECK_PREFIX}{plan_id}"


@dataclass(frozen=True)
class VerdictCheck:
    name: str
    conclusion: str  # success | failure | action_required
    title: str
    summary: str
    text: str
    details_url: str = ""  # required by GitHub for action_required


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|").replace("`", "'")


def _cap(text: str, note: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    tail = f"\n\n... cut to GitHub's {MAX_OUTPUT:,} characters; {note}\n"
    return text[: MAX_OUTPUT - len(tail)] + tail


def gate_rows(gates: Sequence[GateResult | GateSummary]) -> list[tuple[str, bool, bool, str]]:
    """(name, required, passed, what it gave) for each gate, in order."""
    rows = []
    for g in gates:
        if isinstance(g, GateResult):
            if g.exit_code is not None:
                how = f"exit {g.exit_code}"
            elif g.http_status is not None:
                how = f"HTTP {g.http_status}"
            elif g.timed_out:
                how = "timed out"
            else:
                how = g.needs_human or g.error or ("green" if g.passed else "red")
            if g.flaky:
                how += " (flaky: red, then green on the re-run)"
        else:
            how = "green" if g.passed else "red"
        rows.append((g.name, g.required, g.passed, how))
    return rows


def verdict_check(plan_id: str, record: SessionRecord, gates: Sequence[GateResult | GateSummary] = (), *,
                  next_action: str = "", park_url: str = "", run_url: str = "", finished: bool = False) -> VerdictCheck:
    """The check run for session `record.n` of `plan_id` (or, `finished`, for the plan's finished pull request, from
    its last session). `gates`: the session's gates as plan-runner ran them (exit codes), else the record's."""
    rows = gate_rows(gates or record.gates)
    required_green = all(passed for _, required, passed, _ in rows if required)
    outcome = record.outcome
    if outcome in GREEN_OUTCOMES and required_green:
        conclusion = "success"
    elif outcome == Outcome.NEEDS_HUMAN and park_url:
        conclusion = "action_required"
    else:
        conclusion = "failure"
    red = [name for name, required, passed, _ in rows if required and not passed]
    gates_word = ("no gates" if not rows else "required gates green" if not red
                  else f"required gate{'s' if len(red) > 1 else ''} red: {', '.join(red)}")
    what = f"finished after session {record.n}" if finished else f"session {record.n}"
    title = f"{outcome.value}: {what}" + (f", checkpoint {record.checkpoint}" if record.checkpoint else "")
    title = f"{title}; {gates_word}"[:MAX_TITLE]
    lines = [f"**Outcome:** `{outcome.value}` (session {record.n}, computed by plan-runner from the evidence: the "
             "gates it re-ran itself, the agent's commits, the plan's checkpoints; never from what the agent said)", ""]
    if rows:
        lines += ["| gate | required | result | |", "|---|---|---|---|"]
        lines += [f"| `{_cell(name)}` | {'yes' if required else 'no'} | {_cell(how)} | {'✅' if passed else '❌'} |"
                  for name, required, passed, how in rows]
        lines.append("")
    if record.advanced:
        lines.append(f"**Checked:** {', '.join(f'`{_cell(c)}`' for c in record.advanced)}")
    if next_action:
        lines.append(f"**Next:** {_cell(next_action)}")
    if park_url:
        lines.append(f"**Waiting for a human:** {park_url}")
    if run_url:
        lines.append(f"**Run:** {run_url}")
    summary = _cap("\n".join(lines).rstrip() + "\n", "the job summary has the whole report")
    reasons = "\n".join(f"- {r}" for r in record.reasons) or "- (no reasons recorded)"
    text = _cap(f"### Why\n\n{reasons}\n", "the job summary has the whole report")
    return VerdictCheck(name=check_name(plan_id), conclusion=conclusion, title=title, summary=summary, text=text,
                        details_url=park_url if conclusion == "action_required" else "")
