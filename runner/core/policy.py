"""The next-action policy and the run state folded from the ledger. Pure.

`fold(ledger)` derives the run state; `decide_next(verdict, state, plan)` picks
what happens after a session, given the state *including* that session.
The bounds live here: stage attempt budgets, resume budgets, the circuit
breaker, zero-output stalls, backoffs, sessions and cost. No sequence of
outcomes loops forever: `max_sessions` parks the plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from pydantic import Field, ValidationError

from runner.core.actions import (
    Blame, ConsultAdvisor, Finish, Outcome, Park, RunSession, SessionKind, Verdict, Wait,
)
from runner.core.evidence import CheckpointState, Record
from runner.core.ledger import Advice, Dispatched, Entry, Finished, Parked, Reply, SessionRecord, SessionStarted
from runner.core.plan import Plan

LIMIT_BACKOFF_BASE = timedelta(minutes=5)
LIMIT_BACKOFF_CAP = timedelta(hours=6)
TRANSIENT_BACKOFF_BASE = timedelta(seconds=30)
TRANSIENT_BACKOFF_CAP = timedelta(minutes=10)

_FIX_KIND = {
    Outcome.GATES_RED: SessionKind.FIX_GATES,
    Outcome.NO_PROGRESS: SessionKind.FIX_NO_PROGRESS,
    Outcome.AGENT_ERROR: SessionKind.FIX_ERROR,
}
_STALLS = (Outcome.STALLED, Outcome.TIMED_OUT)
AnyAction = RunSession | Wait | ConsultAdvisor | Park | Finish


class RunState(Record):
    """Everything the policy needs, derived from the ledger (never stored on its own)."""

    sessions: int = 0  # finished (or reconciled) sessions
    tokens: int = 0
    cost_usd: float = 0.0
    last: SessionRecord | None = None
    open_session: SessionStarted | None = None  # started and never finished
    stage_attempts: dict[int, int] = Field(default_factory=dict)  # attempts burned per stage number
    consecutive_backoffs: int = 0
    consecutive_zero_stalls: int = 0
    consecutive_stalls: int = 0  # stalls/time limits in a row: resumes used
    streak: int = 0  # sessions in a row with the same outcome and failure fingerprint
    skipped: frozenset[str] = frozenset()
    instructions: str | None = None  # a human's text, until a session not blamed on the environment used it
    pending: AnyAction | None = Field(default=None, discriminator="action")  # decided, not yet superseded
    last_dispatch: int = 0  # highest session number a dispatch was recorded for
    park_issue: str | None = None
    parked_at: datetime | None = None
    finished: bool = False
    pull_request: str | None = None
    # the base commit of the run of sessions since the last Advanced (their work no verdict credited), if any
    uncredited_base: str | None = None

    @property
    def parked(self) -> bool:
        return isinstance(self.pending, Park)

    @property
    def next_n(self) -> int:
        """The number of the next session to start (one past every session started or recorded)."""
        return max(self.sessions, self.last.n if self.last else 0,
                   self.open_session.n if self.open_session else 0) + 1


def _note_interruption(state: RunState, r: SessionRecord) -> RunState:
    """plan-runner was stopped mid-session: the session counts (its tokens and cost were spent),
    but no budget moves: attempts, resumes, backoffs and the circuit breaker stay as they were."""
    open_session = state.open_session if state.open_session and state.open_session.n != r.n else None
    return state.model_copy(update=dict(
        sessions=state.sessions + 1, tokens=state.tokens + r.tokens, cost_usd=state.cost_usd + (r.cost_usd or 0.0),
        last=r, open_session=open_session, pending=r.next_action, park_issue=None, parked_at=None,
        uncredited_base=state.uncredited_base or r.base_sha or None,
    ))


def _note_session(state: RunState, r: SessionRecord) -> RunState:
    if r.outcome is Outcome.INTERRUPTED:
        return _note_interruption(state, r)
    attempts = dict(state.stage_attempts)
    if r.stage is not None:
        if r.outcome is Outcome.ADVANCED:
            attempts[r.stage] = 0
        elif r.blame is Blame.AGENT:
            attempts[r.stage] = attempts.get(r.stage, 0) + 1
    last = state.last
    same = (last is not None and r.fingerprint is not None
            and last.outcome is r.outcome and last.fingerprint == r.fingerprint)
    stalled = r.outcome in _STALLS
    open_session = state.open_session if state.open_session and state.open_session.n != r.n else None
    return state.evolve(
        sessions=state.sessions + 1,
        tokens=state.tokens + r.tokens,
        cost_usd=state.cost_usd + (r.cost_usd or 0.0),
        last=r,
        open_session=open_session,
        stage_attempts=attempts,
        consecutive_backoffs=state.consecutive_backoffs + 1 if r.outcome is Outcome.LIMIT_BACKOFF else 0,
        consecutive_zero_stalls=state.consecutive_zero_stalls + 1 if stalled and r.zero_output else 0,
        consecutive_stalls=state.consecutive_stalls + 1 if stalled else 0,
        streak=state.streak + 1 if same else (1 if r.fingerprint else 0),
        instructions=state.instructions if r.blame is Blame.ENVIRONMENT else None,
        pending=r.next_action,
        park_issue=None,  # a session ran: any earlier park is over
        parked_at=None,
        # Work no verdict credited to a checkpoint (cut short, judged red, NeedsHuman, Progress, NoProgress) is
        # judged again with the next session's evidence: only Advanced credits it (issue 27, item 5).
        uncredited_base=None if r.outcome is Outcome.ADVANCED else (state.uncredited_base or r.base_sha or None),
    )


def _fresh_budgets(state: RunState, **extra) -> RunState:
    """A human or the advisor said go again: budgets for the current work restart."""
    stage = state.last.stage if state.last else None
    attempts = dict(state.stage_attempts)
    if stage is not None:
        attempts[stage] = 0
    return state.evolve(
        stage_attempts=attempts, streak=0, consecutive_backoffs=0,
        consecutive_zero_stalls=0, consecutive_stalls=0, **extra,
    )


FOLD_VERSION = 2  # bump when fold() changes what it derives: stored snapshots are then refolded


def snapshot_json(state: RunState) -> str:
    """The folded state as stored with the ledger (`snapshot.json`), tagged with the fold's version."""
    return json.dumps({"fold": FOLD_VERSION, "state": json.loads(state.model_dump_json())})


def folded(ledger: Sequence[Entry]) -> RunState:
    """The run state of a ledger read from the store: from its stored snapshot when the store
    vouched that the snapshot was folded from exactly this ledger, else folded entry by entry.
    A snapshot that does not parse, or comes from another fold version, is never trusted."""
    raw = getattr(ledger, "snapshot", None)
    if raw:
        try:
            snap = json.loads(raw)
            if isinstance(snap, dict) and snap.get("fold") == FOLD_VERSION:
                return RunState.model_validate(snap["state"])
        except (ValueError, KeyError, TypeError, ValidationError):
            pass
    if hasattr(ledger, "parse_all"):
        ledger.parse_all()
    return fold(ledger)


def fold(ledger: Iterable[Entry], state: RunState | None = None) -> RunState:
    """The run state, derived from the plan's ledger in order (continuing from `state`, if given)."""
    state = state if state is not None else RunState()
    for entry in ledger:
        if isinstance(entry, SessionStarted):
            state = state.evolve(open_session=entry)
        elif isinstance(entry, SessionRecord):
            state = _note_session(state, entry)
        elif isinstance(entry, Advice):
            skipped = state.skipped | {entry.checkpoint} if entry.answer == "skip" and entry.checkpoint else state.skipped
            state = _fresh_budgets(state, pending=entry.next_action, skipped=skipped,
                                   uncredited_base=None if entry.answer == "skip" else state.uncredited_base)
        elif isinstance(entry, Reply):
            checkpoint = state.last.checkpoint if state.last else None
            skipped = state.skipped | {checkpoint} if entry.command == "skip" and checkpoint else state.skipped
            state = _fresh_budgets(state, pending=entry.next_action, skipped=skipped,
                                   instructions=entry.text or None, park_issue=None, parked_at=None,
                                   finished=False,
                                   uncredited_base=None if entry.command == "skip" else state.uncredited_base)
        elif isinstance(entry, Dispatched):
            state = state.evolve(last_dispatch=max(state.last_dispatch, entry.for_session))
        elif isinstance(entry, Parked):
            # A park recorded for a decision that was not one (GitHub refused the finish's pull request)
            # parks the plan all the same: only a human's reply moves it on.
            pending = state.pending if isinstance(state.pending, Park) else Park(reason=entry.reason)
            # A park also voids a dispatch intent no run answered (GitHub refused the dispatch): only a human's
            # reply dispatches again, and the tick does not take the missing run for a lost one.
            state = state.evolve(park_issue=entry.issue_url or entry.report_path, parked_at=entry.at,
                                 pending=pending, last_dispatch=min(state.last_dispatch, state.sessions))
        elif isinstance(entry, Finished):
            state = state.evolve(finished=True, pull_request=entry.pull_request_url)
    return state


def _next_work(plan: Plan, state: RunState, kind: SessionKind, reason: str, **kw) -> AnyAction:
    """A session on the next open checkpoint, or finish / park when there is none to work on."""
    nxt = plan.next_checkpoint(state.skipped)
    if nxt is None:
        done = sum(c.state is CheckpointState.DONE for c in plan.checkpoints)
        skipped = f", {len(state.skipped)} skipped" if state.skipped else ""
        return Finish(reason=f"every checkpoint is done ({done} done{skipped})")
    if nxt.state is CheckpointState.BLOCKED:
        return Park(reason=f"checkpoint {nxt.id} is BLOCKED: {nxt.title}")
    return RunSession(kind=kind, checkpoint=nxt.id, reason=reason, instructions=state.instructions, **kw)


def _backoff(verdict: Verdict, state: RunState) -> datetime:
    if verdict.reset_at is not None and verdict.reset_at > verdict.observed_at:
        return verdict.reset_at
    base, cap = ((TRANSIENT_BACKOFF_BASE, TRANSIENT_BACKOFF_CAP) if verdict.transient
                 else (LIMIT_BACKOFF_BASE, LIMIT_BACKOFF_CAP))
    exponent = max(0, state.consecutive_backoffs - 1)
    return verdict.observed_at + min(cap, base * (2 ** min(exponent, 20)))


def _same_session_again(state: RunState, reason: str) -> RunSession:
    last = state.last
    assert last is not None
    return RunSession(kind=last.kind, checkpoint=last.checkpoint, reason=reason,
                      resume_session_id=last.resume_session_id, instructions=state.instructions)


def decide_next(verdict: Verdict, state: RunState, plan: Plan) -> AnyAction:
    """What happens after a session. `state` already includes that session; `plan`
    is the configuration from the base commit with the tracker as of the work branch head."""
    b = plan.config.budget
    o = verdict.outcome
    if o is Outcome.NEEDS_HUMAN:
        return Park(reason="the session needs a human", details=verdict.reasons)
    if o in (Outcome.ADVANCED, Outcome.PROGRESS, Outcome.NO_PROGRESS) and plan.next_checkpoint(state.skipped) is None:
        return _next_work(plan, state, SessionKind.DELIVERY, "")
    if state.sessions >= b.max_sessions:
        return Park(reason=f"max_sessions reached ({state.sessions} of {b.max_sessions})")
    if b.max_cost_usd is not None and state.cost_usd >= b.max_cost_usd:
        return Park(reason=f"max_cost_usd reached (${state.cost_usd:.2f} of ${b.max_cost_usd:.2f})")

    if o is Outcome.LIMIT_BACKOFF:
        if state.consecutive_backoffs >= b.max_backoffs:
            return Park(reason=f"{state.consecutive_backoffs} backoffs in a row (max_backoffs {b.max_backoffs})",
                        details=verdict.reasons)
        what = "transient error" if verdict.transient else "rate limit"
        return Wait(until=_backoff(verdict, state), reason=f"{what}; no attempt burned",
                    then=_same_session_again(state, f"retry after the {what}"))
    if o is Outcome.ROLLED_OVER:
        return _next_work(plan, state, SessionKind.HANDOFF, "token budget reached: fresh session with the handoff")
    if o in _STALLS:
        if state.consecutive_zero_stalls >= 2:
            return Park(reason="two consecutive sessions produced no output at all")
        if state.consecutive_stalls > b.max_resumes:
            return ConsultAdvisor(reason=f"resume budget spent ({b.max_resumes} resumes)",
                                  checkpoint=state.last.checkpoint if state.last else None)
        if verdict.agent_session_id:
            return RunSession(kind=SessionKind.RESUME, checkpoint=state.last.checkpoint if state.last else None,
                              reason=f"{o.value}: resume the same agent session",
                              resume_session_id=verdict.agent_session_id, instructions=state.instructions)
        return _same_session_again(state, f"{o.value} before the agent had a session id: start it again")
    if verdict.blame is Blame.AGENT:
        checkpoint = state.last.checkpoint if state.last else None
        if state.streak >= 2:
            return ConsultAdvisor(reason=f"circuit breaker: {o.value} twice in a row with the same failure",
                                  checkpoint=checkpoint)
        stage = plan.stage_of(checkpoint) if checkpoint else None
        if stage is not None and state.stage_attempts.get(stage.number, 0) >= plan.stage_attempt_budget(stage):
            return ConsultAdvisor(
                reason=f"stage {stage.number} attempt budget spent ({plan.stage_attempt_budget(stage)} attempts)",
                checkpoint=checkpoint)
        return _next_work(plan, state, _FIX_KIND[o], f"{o.value}: fix session")
    return _next_work(plan, state, SessionKind.DELIVERY,
                      "advanced: next checkpoint" if o is Outcome.ADVANCED else "progress: keep delivering")


def _retry_kind(state: RunState) -> SessionKind:
    last = state.last
    return _FIX_KIND.get(last.outcome, SessionKind.DELIVERY) if last else SessionKind.DELIVERY


def decide_after_advice(answer: str, reason: str, state: RunState, plan: Plan) -> AnyAction:
    """The advisor's answer (already validated: anything else is 'human') turned into an action.
    `state` is the state before the advice; `plan.next_checkpoint` already reflects the tracker."""
    last = state.last
    if answer == "retry":
        return _next_work(plan, state, _retry_kind(state), f"advisor: retry ({reason})")
    if answer == "resume" and last is not None and last.agent_session_id:
        return RunSession(kind=SessionKind.RESUME, checkpoint=last.checkpoint, reason=f"advisor: resume ({reason})",
                          resume_session_id=last.agent_session_id, instructions=state.instructions)
    if answer == "resume":
        return _next_work(plan, state, _retry_kind(state), f"advisor: resume, no agent session to resume ({reason})")
    if answer == "skip":
        skipped = state.skipped | ({last.checkpoint} if last and last.checkpoint else set())
        return _next_work(plan, state.evolve(skipped=skipped), SessionKind.DELIVERY,
                          f"advisor: skip ({reason})")
    return Park(reason=f"the advisor asks for a human: {reason}")


def decide_after_reply(command: str, text: str, user: str, state: RunState, plan: Plan) -> AnyAction:
    """A human's `/plan-runner <command> [text]` turned into an action. Budgets restart."""
    fresh = _fresh_budgets(state, instructions=text or None)
    last = state.last
    who = f"@{user}" if user else "a human"
    if command == "stop":
        return Park(reason=f"stopped by {who}")
    if command == "skip":
        skipped = state.skipped | ({last.checkpoint} if last and last.checkpoint else set())
        return _next_work(plan, fresh.evolve(skipped=skipped), SessionKind.DELIVERY,
                          f"{who}: skip the checkpoint")
    if command == "resume" and last is not None and last.outcome in _STALLS and last.agent_session_id:
        return RunSession(kind=SessionKind.RESUME, checkpoint=last.checkpoint, reason=f"{who}: resume",
                          resume_session_id=last.agent_session_id, instructions=fresh.instructions)
    return _next_work(plan, fresh, _retry_kind(state), f"{who}: {command}")


def decide_start(state: RunState, plan: Plan) -> AnyAction:
    """The action to take when a job starts: the pending decision, or the first session."""
    if state.pending is not None:
        return state.pending
    return _next_work(plan, state, SessionKind.DELIVERY, "first session of the plan")
