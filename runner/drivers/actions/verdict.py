"""Publish a session's verdict as a check run on the work branch's head (`plan-runner / <plan>`).

One `POST .../check-runs` a session job that recorded a session, or that opened the finished pull request: the
check is on the commit the work branch points at after the job's push, the same commit the pull request's head
is. Never the job's failure: a refusal (a workflow without `checks: write`) is a warning with the fix.
"""

from __future__ import annotations

from runner.adapters.git import work as gitwork
from runner.adapters.github.events import GitHubContext
from runner.adapters.github.verdict_check import verdict_check
from runner.core.actions import Finish, Park, describe
from runner.core.errors import PlanRunnerError
from runner.core.ledger import SessionRecord
from runner.core.ports import Parker
from runner.drivers.session import Session, SessionResult

NO_CHECKS_WRITE = ("add `checks: write` to the session job's `permissions:` (as `plan-runner init` writes it) to "
                   "publish each session's verdict as a check run a branch rule can require")


def last_record(s: Session) -> SessionRecord | None:
    for entry in reversed(s.entries):
        if isinstance(entry, SessionRecord):
            return entry
    return None


def publish_verdict(driver: Parker, ctx: GitHubContext, s: Session, result: SessionResult, recorded: bool,
                    warn=lambda text: None) -> str:
    """The check run for this job's session (`recorded`: the job recorded one) or finished pull request; a line for
    the summary ("" when there is nothing to publish)."""
    finished = result.status == "finished" or isinstance(result.action, Finish)
    record = result.record if recorded else None
    if record is None and not finished:
        return ""
    if record is None:
        record = last_record(s)
        if record is None:
            return ""
    if result.evidence is not None and result.evidence.leaked_secrets:
        return "No check run: the work branch was not pushed (a secret in a commit).\n"
    head = gitwork.ref_sha(s.ws.repo, f"refs/heads/{s.trusted.work_branch}")
    if not head:
        return ""
    park = result.url or s.state.park_issue or "" if isinstance(result.action, Park) or result.status == "parked" \
        else ""
    gates = result.evidence.gates if result.evidence is not None and result.record is record else ()
    check = verdict_check(s.trusted.id, record, gates, next_action=describe(result.action) if result.action else "",
                          park_url=park, run_url=ctx.run_url, finished=finished)
    try:
        url = driver.publish_check(check, head)
    except PlanRunnerError as err:
        fix = NO_CHECKS_WRITE if "403" in err.what or "checks" in err.why else err.fix
        warn(f"could not publish the check run {check.name}: {err.what} ({fix})")
        return f"Check run `{check.name}`: not published: {err.what}. Fix: {fix}.\n"
    return (f"Check run [`{check.name}`]({url}): **{check.conclusion}** on `{head[:12]}` ({check.title}).\n" if url
            else f"Check run `{check.name}`: **{check.conclusion}** on `{head[:12]}` ({check.title}).\n")
