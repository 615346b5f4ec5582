"""The one place to watch a plan on GitHub: the plan's pull request, a draft from the first credited work on.

After every session job, its description is rewritten in place (never a new pull request, never a comment)
with the checkpoints and their state, the sessions table (outcome, blame, tokens, cost, duration, the run, the
`logs` command) and the next action; at the finish it is turned ready for review, when the plan parks it is
closed with a link to the park issue (GitHub cross-references the issue), and the next session after a resume
reopens it. A pull request rather than a tracking issue: the finished plan ends in one anyway, so the place
people watch is the place they review and merge, and its diff shows the work so far (docs/github-actions.md).

Everything the agent wrote that reaches the description goes through render's Markdown escaping (published
text, SPEC 4b invariant 6). The watch view is a report, never a decision: when GitHub refuses it (the setting
that lets Actions open pull requests is off, a missing permission, an outage) the session's outcome stands and
the job summary says what to change.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.adapters.github.events import GitHubContext
from runner.adapters.render.report import Markdown, redact, render_watch, session_rows
from runner.core.actions import describe
from runner.core.errors import PlanRunnerError
from runner.drivers.session import Session, SessionResult


def run_link(ctx: GitHubContext) -> Callable[[str], str | None]:
    """The Actions run of a session, from its `started` entry's job (GITHUB_RUN_ID when the job wrote it)."""
    return lambda job: f"{ctx.server_url}/{ctx.repository}/actions/runs/{job}" if job.isdigit() else None


def rows_of(s: Session, ctx: GitHubContext) -> list[dict]:
    return session_rows(s.entries, run_link(ctx))


def watch_state(result: SessionResult) -> str | None:
    """What the watch pull request is left as after this job: None when another job has the plan."""
    if result.status in ("superseded", "busy"):
        return None
    if result.status == "finished" or result.state.finished:
        return "ready"
    if result.status == "parked" or result.state.parked:
        return "closed"
    return "draft"


def status_line(state: str) -> Markdown:
    """plan-runner's own words, one per watch state."""
    return Markdown({"ready": "finished: ready for review",
                     "closed": "parked, waiting for a human (this pull request reopens when the plan resumes)",
                     "draft": "running (a draft until the plan is finished)"}[state])


def update_watch(driver: object, ctx: GitHubContext, s: Session, result: SessionResult, rows: list[dict],
                 warn: Callable[[str], None]) -> str | None:
    """Bring the plan's watch pull request up to date; its URL, or None (nothing credited yet, nothing to do,
    or GitHub refused: `warn` says why)."""
    state = watch_state(result)
    update = getattr(driver, "update_watch", None)
    if state is None or update is None or not any(r["advanced"] for r in rows):
        return None  # before the first credited work there is nothing to review: no pull request yet
    plan = result.plan
    links = [("park issue", result.state.park_issue)] if state == "closed" and result.state.park_issue else []
    body = render_watch(plan, result.state, rows, status=status_line(state), links=links,
                        next_action=describe(result.action) if result.action is not None else "",
                        report=result.report if isinstance(result.report, Markdown) else "")
    try:
        return update(plan.id, plan.work_branch, s.trusted.config.base, f"plan-runner: {plan.title or plan.id}",
                      redact(body, s.secrets), state)
    except PlanRunnerError as err:
        warn(f"the pull request that shows the plan could not be updated: {err.render()}")
        return None
