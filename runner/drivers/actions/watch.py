"""The one place to watch a plan on GitHub: the plan's pull request, a draft from the first credited work on.

After every session job, its description is rewritten in place (never a new pull request, never a comment)
with the checkpoints and their state, the sessions table (outcome, blame, tokens, cost, duration, the run, the
`logs` command) and the next action; at the finish it is turned ready for review, when the plan parks it is
closed with a link to the park issue (GitHub cross-references the issue), and the next session after a resume
reopens it. `plan-runner reset` starts the plan over (a new ledger: a new run, named by the time of its first
entry): the first job of the new run closes the pull request of the run before, heads it with where `reset` kept
that run's work (the backup ref, found on the remote) and says so in one comment; the new run's own pull request
names the old one. `reset` itself has no GitHub token, so the job does it with its own. A pull request rather than a tracking issue: the finished plan ends in one anyway, so the place
people watch is the place they review and merge, and its diff shows the work so far (docs/github-actions.md).

Everything the agent wrote that reaches the description goes through render's Markdown escaping (published
text, docs/security.md, "Hostile and broken input"). The watch view is a report, never a decision: when GitHub
refuses it (the setting that lets Actions open pull requests is off, a missing permission, an outage) the session's outcome stands and
the job summary says what to change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timezone
from pathlib import Path

from runner.adapters.git import work as gitwork
from runner.adapters.github.events import GitHubContext
from runner.adapters.render.report import Markdown, link, render_watch, session_rows
from runner.adapters.secrets import redact
from runner.core import inert
from runner.core.actions import describe
from runner.core.errors import PlanRunnerError
from runner.core.ports import Parker
from runner.drivers.session import Session, SessionResult


def run_link(ctx: GitHubContext) -> Callable[[str], str | None]:
    """The Actions run of a session, from its `started` entry's job (GITHUB_RUN_ID when the job wrote it)."""
    return lambda job: f"{ctx.server_url}/{ctx.repository}/actions/runs/{job}" if job.isdigit() else None


def rows_of(s: Session, ctx: GitHubContext) -> list[dict]:
    return session_rows(s.entries, run_link(ctx))


def run_key(entries: Sequence[object]) -> str:
    """The plan's run: the UTC time of its ledger's first entry ("" before any). A reset starts a new ledger."""
    if not len(entries):
        return ""
    first = entries[0]  # a compacted ledger's summary names the time of the entry it began with
    at = getattr(first, "began", None) or getattr(first, "started_at", None) or getattr(first, "at", None)
    return at.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ") if at is not None else ""


def backups(repo: Path, remote: str, plan_id: str) -> dict[str, dict[str, str]]:
    """The plan's backup refs on `remote` (`plan-runner reset` pushed them): {prefix: {"state"|"branch": sha}}."""
    from runner.adapters.store.layout import BACKUP

    found: dict[str, dict[str, str]] = {}
    for sha, ref in gitwork.remote_refs(repo, remote, f"{BACKUP}/{plan_id}/*") or ():
        prefix, _, kind = ref.rpartition("/")
        if kind in ("state", "branch") and prefix.startswith(f"{BACKUP}/{plan_id}/"):
            found.setdefault(prefix, {})[kind] = sha
    return found


def reset_note(repo: Path, remote: str, plan_id: str, branch: str, ctx: GitHubContext) -> Callable[[str], Markdown]:
    """What the pull request of a run before a reset is headed with: the backup ref that holds its work (the one
    whose branch is the pull request's head commit, else the newest), asked of the remote only when needed."""
    def note(head_sha: str) -> Markdown:
        kept = backups(repo, remote, plan_id)
        prefix = next((p for p, refs in kept.items() if refs.get("branch") == head_sha), None)
        prefix = prefix or (max(kept) if kept else None)
        text = ("**plan-runner started this plan over** (`plan-runner reset`): this pull request showed the run "
                "before, and is closed. ")
        if prefix is None:
            return Markdown(text + "No backup ref of that run is on the repository; its commits stay reachable "
                            "from this pull request.")
        refs = kept[prefix]
        where = []
        if "branch" in refs:
            commit = link(refs["branch"][:12], f"{ctx.server_url}/{ctx.repository}/commit/{refs['branch']}")
            where.append(f"its work under {inert.md_code(prefix + '/branch')} (commit {commit})")
        if "state" in refs:
            where.append(f"its state under {inert.md_code(prefix + '/state')}")
        back = inert.md_code(f"git fetch origin {prefix}/branch:refs/heads/{branch}-before-reset")
        return Markdown(text + "`reset` kept " + " and ".join(where) + "."
                        + (f" {back} brings the work back." if "branch" in refs else ""))
    return note


def attach(parker: Parker, ctx: GitHubContext, s: Session, remote: str) -> None:
    """Tell the publisher which run of the plan this job is in, and how to name a reset's backup ref."""
    parker.follow_run(lambda: run_key(s.entries), reset_note(s.ws.repo, remote, s.plan.id, s.plan.work_branch, ctx))


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


def update_watch(parker: Parker, ctx: GitHubContext, s: Session, result: SessionResult, rows: list[dict],
                 warn: Callable[[str], None]) -> str | None:
    """Bring the plan's watch pull request up to date; its URL, or None (nothing credited yet, nothing to do,
    or GitHub refused: `warn` says why)."""
    state = watch_state(result)
    if state is None:
        return None
    if not any(r["advanced"] for r in rows):
        # before the first credited work there is nothing to review: no pull request yet; the run's first job
        # still closes the pull request of the run before a reset (one list)
        if len(rows) > 1:
            return None
        state = None
    plan = result.plan
    links = [("park issue", result.state.park_issue)] if state == "closed" and result.state.park_issue else []
    if result.state.place is not None:  # where each session shows while it runs (runner.drivers.actions.progress)
        links.append(("session progress", result.state.place.url))
    body = Markdown("") if state is None else render_watch(
        plan, result.state, rows, status=status_line(state), links=links,
        next_action=describe(result.action) if result.action is not None else "",
        report=result.report if isinstance(result.report, Markdown) else "")
    try:
        return parker.update_watch(plan.id, plan.work_branch, s.trusted.config.base, f"plan-runner: {plan.title or plan.id}",
                      redact(body, s.secrets), state)
    except PlanRunnerError as err:
        warn(f"the pull request that shows the plan could not be updated: {err.render()}")
        return None
