"""A session's record, built in one place from who the session was and the verdict on it.

A session ends in one of three ways, and each writes a `SessionRecord`: judged from evidence
(runner/drivers/session/phases.py), interrupted by the process that started it, or found orphaned by
the next run (runner/drivers/session/cut_short.py). The verdict supplies the outcome, its rule and
reasons; the start supplies the session's identity and base; the caller adds what it measured.
"""

from __future__ import annotations

from typing import Any

from runner.core.actions import Verdict
from runner.core.bounds import TOKEN_LIMIT, bound_cost, bound_count, fit_record
from runner.core.ledger import SessionRecord, SessionStarted
from runner.core.plan import Plan


def session_record(started: SessionStarted, verdict: Verdict, plan: Plan, **measured: Any) -> SessionRecord:
    """The record of `started` under `verdict`; `measured` (head, spend, gates, the decision, ...) is added as is
    and wins over what the verdict says. The record is fitted to the ledger's per-entry limit (`bounds.fit_record`)."""
    stage = plan.stage_of(started.checkpoint) if started.checkpoint else None
    fields: dict[str, Any] = dict(
        n=started.n, kind=started.kind, checkpoint=started.checkpoint, stage=stage.number if stage else None,
        started_at=started.started_at, base_sha=started.base_sha, resume_session_id=started.resume_session_id,
        finished_at=verdict.observed_at, outcome=verdict.outcome, blame=verdict.blame, rule=verdict.rule,
        reasons=verdict.reasons, fingerprint=verdict.fingerprint, zero_output=verdict.zero_output,
        advanced=verdict.advanced, rejected_flips=verdict.rejected_flips, agent_session_id=verdict.agent_session_id)
    fields.update(measured)
    # spend is bounded where a backend's report is read (runner.backends.common.signals); again here, where every
    # record is built, so that none can hold a cost JSON cannot write (a NaN, an Infinity) or a summary overflow
    fields["cost_usd"] = bound_cost(fields.get("cost_usd"))[0]
    fields["tokens"] = bound_count(fields.get("tokens", 0), limit=2 * TOKEN_LIMIT)[0]
    return fit_record(SessionRecord(**fields))
