"""Reports for humans: park issues, park files, pull requests, job summaries, terminals.

Rendered from jinja2 templates (StrictUndefined) over the same records the
core uses. Every `{{ value }}` of a template is untrusted text unless it is `Markdown`
(what plan-runner rendered itself): the environment's `finalize` escapes it as literal
Markdown text on one line (`inert.md_text`), so a forgotten field cannot publish a heading,
link, image or HTML; `|code` makes a code span it cannot close, `fence()` a block. Known
secret values are redacted before anything is published.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import jinja2

from runner.adapters.secrets import redact
from runner.core import inert
from runner.core.inert import defang  # noqa: F401 - re-exported

from runner.core.actions import Verdict, describe
from runner.core.evidence import Evidence
from runner.core.ledger import SessionRecord, SessionStarted
from runner.core.plan import Plan
from runner.core.policy import AnyAction, RunState
from runner.core.progress import Live



class Markdown(str):
    """Markdown plan-runner rendered itself (a report, a fence around untrusted text): published as is.
    Anything else a template prints is untrusted text and is escaped. `+` of two stays Markdown."""

    def __add__(self, other: str) -> str:
        joined = str.__add__(self, other)
        return Markdown(joined) if isinstance(other, Markdown) else joined


def _finalize(value: object) -> str:
    if isinstance(value, Markdown):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return inert.md_text("" if value is None else value)


_PLAN_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")


def _plan_id(value: str) -> Markdown:
    """A plan id where no escape applies (an HTML comment, a mermaid block): checked, not escaped."""
    if not _PLAN_ID.fullmatch(value):
        raise ValueError(f"not a plan id: {value!r}")
    return Markdown(value)


def fence(text: str, info: str = "text") -> Markdown:
    return Markdown(inert.fence(text, info))


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("runner", "templates"),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    trim_blocks=False,
    finalize=_finalize,
)
_ENV.filters["code"] = lambda v, in_table=False: Markdown(inert.md_code(v, in_table=in_table))
_ENV.filters["plan_id"] = _plan_id


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
        out.append(("last words", h.final_text[:300]))
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
                  next_action: AnyAction | None = None, secrets: Iterable[str] = ()) -> Markdown:
    text = Markdown(_ENV.get_template("report.md.j2").render(
        title=title, plan=plan, state=state, verdict=verdict, evidence=evidence, reason=reason,
        details=list(details), fence=fence,
        wip=bool(evidence and any(c.wip for c in evidence.commits)),
        hints=_hints(evidence) if evidence else [], failures=_failures(evidence) if evidence else [],
        next_action=describe(next_action) if next_action is not None else "",
    ))
    return Markdown(redact(text, secrets))


def render_park_issue(plan: Plan, report: str, checkpoint: str | None, *, local: bool = False) -> Markdown:
    """The park report with how to answer it: `/plan-runner` comments on GitHub, `plan-runner reply` locally.
    `report` is published as is only when it is `Markdown` (render_report's); other text is escaped."""
    return Markdown(_ENV.get_template("park_issue.md.j2").render(plan=plan, report=report, checkpoint=checkpoint,
                                                                 local=local))


def park_marker(plan_id: str) -> str:
    return f"<!-- plan-runner:park plan={plan_id} -->"


def checkpoint_counts(plan: Plan, skipped: Iterable[str] = ()) -> list[tuple[str, int]]:
    skipped = set(skipped)
    counts = {"done": 0, "todo": 0, "blocked": 0, "skipped": 0}
    for c in plan.checkpoints:
        key = "skipped" if c.id in skipped and c.state.value != "DONE" else c.state.value.lower()
        counts[key] += 1
    return list(counts.items())


def render_summary(plan: Plan, report: str, headline: str, skipped: Iterable[str] = (),
                   rows: list[dict] | None = None) -> Markdown:
    """The job summary; `report` as in render_park_issue; `rows` (session_rows) the plan's sessions timeline."""
    return Markdown(_ENV.get_template("summary.md.j2").render(
        plan=plan, report=report, headline=headline, counts=checkpoint_counts(plan, skipped),
        sessions=render_sessions(rows, plan.path) if rows else ""))


# --- the sessions timeline and the watch view --------------------------------------------------------------


_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d+)?(?:/[A-Za-z0-9._~%/+=-]*)?")
WATCH_ROWS = 50  # sessions the watch view lists (the newest); its body must fit GitHub's 65,536 characters


def link(text: str, url: str | None) -> Markdown:
    """A Markdown link plan-runner builds: `text` escaped, `url` only when it is a plain http(s) URL (else the
    escaped text alone), so no value can add a title, close the link or start another."""
    label = inert.md_text(text)
    return Markdown(f"[{label}]({url})" if url and _URL.fullmatch(url) else label)


def duration_text(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def session_rows(entries: Iterable[object], run_url: Callable[[str], str | None] | None = None) -> list[dict]:
    """One row per finished (or reconciled) session of a ledger, oldest first: what the timeline shows.
    `run_url(job)`: the link to the job that ran it (the `job` of its `started` entry), or None."""
    jobs: dict[int, str] = {}
    rows = []
    for e in entries:
        if isinstance(e, SessionStarted):
            jobs[e.n] = e.job
        elif isinstance(e, SessionRecord):
            job = jobs.get(e.n, "")
            # numbers plan-runner formats (Markdown: no escape needed, none left in)
            cost = None if e.cost_usd is None else Markdown(("≥ " if e.cost_lower_bound else "") + f"${e.cost_usd:.2f}")
            rows.append(dict(
                n=e.n, kind=e.kind.value, checkpoint=e.checkpoint, outcome=e.outcome.value, blame=e.blame.value,
                tokens=e.tokens, tokens_text=Markdown(f"{e.tokens:,}"), cost=cost, reconciled=e.reconciled, advanced=e.advanced,
                duration=Markdown(duration_text((e.finished_at - e.started_at).total_seconds())),
                run=link(f"run {job}", run_url(job)) if run_url and job else None))
    return rows


def render_sessions(rows: list[dict], plan_path: str, limit: int | None = None) -> Markdown:
    """The per-session timeline (outcome, blame, tokens, cost, duration, the run, the `logs` command)."""
    shown = rows[-limit:] if limit else rows
    return Markdown(_ENV.get_template("sessions.md.j2").render(rows=shown, hidden=len(rows) - len(shown),
                                                               plan_path=plan_path))


def render_watch(plan: Plan, state: RunState, rows: list[dict], *, status: str, next_action: str = "",
                 links: Iterable[tuple[str, str]] = (), report: str = "") -> Markdown:
    """The one place to watch a plan on GitHub (its draft pull request's body), rewritten after every session.
    `links`: (label, URL) pairs plan-runner got from GitHub (the park issue); `report` as in render_park_issue."""
    return Markdown(_ENV.get_template("watch.md.j2").render(
        plan=plan, state=state, status=status, next_action=next_action, report=report,
        links=[link(label, url) for label, url in links],
        sessions=render_sessions(rows, plan.path, WATCH_ROWS)))


def progress_marker(plan_id: str, n: int | None) -> Markdown:
    """The hidden line of a session's progress comment (its plan and session, for people and tests)."""
    return Markdown(f"<!-- plan-runner:progress plan={_plan_id(plan_id)} session={int(n or 0)} -->")


def render_progress(plan: Plan, live: Live, *, elapsed_s: float, cost_usd: float | None = None,
                    cost_estimated: bool = False, ended: tuple[str, str] | None = None,
                    run_url: str | None = None, watch_url: str | None = None) -> Markdown:
    """A session's progress comment (runner.drivers.actions.progress): its checkpoint, the time it has run, the
    tokens and cost so far and the last tool the agent used, while it runs; how it ended, once it has (`ended`:
    the outcome from the verdict, and the next action). The agent's words (the tool's name and input) are
    untrusted: a code span and a fence they cannot leave, bounded (runner.core.progress)."""
    session = f"session {live.n}" if live.n else "a session"
    if ended is not None:
        outcome, next_action = ended
        head = f"### plan-runner: {inert.md_code(plan.id)} {session} ended: **{inert.md_text(outcome)}**"
    else:
        head = f"### plan-runner: {inert.md_code(plan.id)} {session} is running ({inert.md_text(live.phase)})"
    where = inert.md_code(live.checkpoint) if live.checkpoint else "none yet"
    rows = [("Checkpoint", where + (f" ({inert.md_text(live.kind)})" if live.kind else "")),
            ("Elapsed" if ended is None else "Ran for", duration_text(elapsed_s)),
            ("Tokens so far" if ended is None else "Tokens", f"{live.tokens:,}"),
            ("Cost so far" if ended is None else "Cost",
             "not reported" if cost_usd is None else ("≈ " if cost_estimated else "") + f"${cost_usd:.2f}")]
    if live.last_tool:
        rows.append(("Last tool", f"{inert.md_code(live.last_tool, in_table=True)} ({live.tool_calls} tool calls)"))
    if live.last_gate and ended is None and live.phase == "judging":
        rows.append(("Gate", inert.md_code(live.last_gate, in_table=True)))
    lines = [str(progress_marker(plan.id, live.n)), head, "", "| | |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in rows]
    if live.last_tool_input and ended is None:
        lines += ["", "The last tool's input (the agent's, as it gave it):", "", inert.fence(live.last_tool_input)]
    if ended is not None:
        lines += ["", f"**Outcome:** {inert.md_code(ended[0])} (from the verdict plan-runner computed, not from what "
                      "the agent said)." + (f" Next: {inert.md_text(ended[1])}." if ended[1] else "")]
    tail = [str(link("the run", run_url))] if run_url else []
    if watch_url:
        tail.append(str(link("the plan's pull request", watch_url)))
    note = ("Edited at most once a minute while the session runs." if ended is None
            else "This comment was edited while the session ran; it stays as the session ended.")
    lines += ["", f"_{note}_" + (" " + " · ".join(tail) if tail else "")]
    return Markdown("\n".join(lines) + "\n")
