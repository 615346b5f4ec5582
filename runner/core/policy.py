"""The next-action policy and the run state folded from the ledger. Pure.

`fold(ledger)` derives the run state; `decide_next(verdict, state, plan)` picks
what happens after a session, given the state *including* that session.
The bounds live here: stage attempt budgets, resume budgets, the circuit
breaker, zero-output stalls, backoffs, sessions and cost. No sequence of
outcomes loops forever: `max_sessions` parks the plan.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import Field, ValidationError

from runner.core.actions import (
    Blame, ConsultAdvisor, Finish, Outcome, Park, RunSession, SessionKind, Verdict, Wait,
)
from runner.core.evidence import CheckpointState, Record
from runner.core.bounds import FLOAT_MAX, bound_text
from runner.core.outcome import SETUP_PROBLEM
from runner.core.ledger import (
    Advice, Dispatched, Entry, Finished, Note, Parked, Place, Reply, SessionRecord, SessionStarted, StoredLedger,
    Summary,
)
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
    notes: tuple[Note, ...] = ()  # notes from the watch pull request the next session's prompt shows (the latest)
    pending: AnyAction | None = Field(default=None, discriminator="action")  # decided, not yet superseded
    last_dispatch: int = 0  # highest session number a dispatch was recorded for
    park_issue: str | None = None
    parked_at: datetime | None = None
    finished: bool = False
    pull_request: str | None = None
    ref: str | None = None  # the branch its sessions run on, on GitHub (the last session's): dispatches go there
    place: Place | None = None  # the issue the plan talks in on GitHub (its progress comments), if any
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


def plus_cost(total: float, cost: float | None) -> float:
    """`total` with a record's cost added, finite whatever an older or hand-written ledger holds (a record plan-runner
    writes holds a bounded cost: runner.core.bounds.bound_cost): a run state is written as JSON and read back."""
    added = total + (cost if cost is not None and not math.isnan(cost) else 0.0)
    return added if math.isfinite(added) else (FLOAT_MAX if added > 0 else total)


def _note_interruption(state: RunState, r: SessionRecord) -> RunState:
    """plan-runner was stopped mid-session: the session counts (its tokens and cost were spent),
    but no budget moves: attempts, resumes, backoffs and the circuit breaker stay as they were."""
    open_session = state.open_session if state.open_session and state.open_session.n != r.n else None
    return state.model_copy(update=dict(
        sessions=state.sessions + 1, tokens=state.tokens + r.tokens, cost_usd=plus_cost(state.cost_usd, r.cost_usd),
        last=r, open_session=open_session, pending=r.next_action, park_issue=None, parked_at=None,
        uncredited_base=state.uncredited_base or r.base_sha or None,
    ))


def _note_session(state: RunState, r: SessionRecord) -> RunState:
    if r.outcome in (Outcome.INTERRUPTED, Outcome.CRASHED):  # plan-runner stopped, or failed: nobody's attempt
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
        cost_usd=plus_cost(state.cost_usd, r.cost_usd),
        last=r,
        open_session=open_session,
        stage_attempts=attempts,
        consecutive_backoffs=state.consecutive_backoffs + 1 if r.outcome is Outcome.LIMIT_BACKOFF else 0,
        consecutive_zero_stalls=state.consecutive_zero_stalls + 1 if stalled and r.zero_output else 0,
        consecutive_stalls=state.consecutive_stalls + 1 if stalled else 0,
        streak=state.streak + 1 if same else (1 if r.fingerprint else 0),
        instructions=state.instructions if r.blame is Blame.ENVIRONMENT else None,
        # a note written while this session ran reaches the next one
        notes=state.notes if r.blame is Blame.ENVIRONMENT else tuple(n for n in state.notes if n.at > r.started_at),
        pending=r.next_action,
        park_issue=None,  # a session ran: any earlier park is over
        parked_at=None,
        # Work no verdict credited to a checkpoint (cut short, judged red, NeedsHuman, Progress, NoProgress) is
        # judged again with the next session's evidence: only Advanced credits it.
        uncredited_base=None if r.outcome is Outcome.ADVANCED else (state.uncredited_base or r.base_sha or None),
    )


def _skipping(state: RunState, checkpoint: str | None) -> frozenset[str]:
    """The skipped checkpoints with `checkpoint` added (None: nothing to skip)."""
    return state.skipped | {checkpoint} if checkpoint else state.skipped


def _last_checkpoint(state: RunState) -> str | None:
    return state.last.checkpoint if state.last else None


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


MAX_NOTES = 5  # notes from the watch pull request one prompt shows: the latest


def with_notes(instructions: str | None, notes: Sequence[Note]) -> str | None:
    """A session's instructions: the park reply's text, then each note from the watch pull request, attributed to
    its author (the prompt quotes every line, so no text poses as plan-runner's own sections)."""
    parts = [instructions.strip()] if instructions and instructions.strip() else []
    parts += [f"Note from @{n.user} on the plan's pull request:\n{n.text.strip()}" for n in notes if n.text.strip()]
    return "\n\n".join(parts) or None


FOLD_VERSION = 4  # bump when fold() changes what it derives: stored snapshots are then refolded


def snapshot_json(state: RunState) -> str:
    """The folded state as stored with the ledger (`snapshot.json`), tagged with the fold's version."""
    return json.dumps({"fold": FOLD_VERSION, "state": json.loads(state.model_dump_json())})


def folded(ledger: StoredLedger | Sequence[Entry]) -> RunState:
    """The run state of a ledger read from the store (`ports.StateStore.read`): from its stored snapshot when the
    store vouched that the snapshot was folded from exactly this ledger, else folded entry by entry (a plain
    sequence of entries is folded). A snapshot that does not parse, or comes from another fold version, is never
    trusted."""
    stored = ledger if isinstance(ledger, StoredLedger) else None
    raw = stored.snapshot if stored is not None else None
    if raw:
        try:
            snap = json.loads(raw)
            if isinstance(snap, dict) and snap.get("fold") == FOLD_VERSION:
                return RunState.model_validate(snap["state"])
        except (ValueError, KeyError, TypeError, ValidationError):
            pass
    if stored is not None:
        stored.parse_all()
    return fold(ledger)


def summary_state(summary: Summary) -> RunState:
    """The run state a compacted ledger's summary stands for. One folded by another version of `fold` is read as
    it was stored (its entries are gone); should it not read as a RunState at all, its totals carry on alone."""
    try:
        return RunState.model_validate(summary.state)
    except ValidationError:
        return RunState(sessions=summary.sessions, tokens=summary.tokens, cost_usd=summary.cost_usd)


def fold(ledger: Iterable[Entry], state: RunState | None = None) -> RunState:
    """The run state, derived from the plan's ledger in order (continuing from `state`, if given). A compacted
    ledger's summary (its first entry) stands for the state folded from the entries it replaced."""
    state = state if state is not None else RunState()
    for entry in ledger:
        if isinstance(entry, Summary):
            state = summary_state(entry)
        elif isinstance(entry, SessionStarted):
            state = state.evolve(open_session=entry, ref=entry.ref or state.ref)
        elif isinstance(entry, SessionRecord):
            state = _note_session(state, entry)
        elif isinstance(entry, Advice):
            skip = entry.answer == "skip" and entry.applied  # a refused skip (see `advice_entry`) skips nothing
            state = _fresh_budgets(state, pending=entry.next_action,
                                   skipped=_skipping(state, entry.checkpoint if skip else None),
                                   uncredited_base=None if skip else state.uncredited_base)
        elif isinstance(entry, Reply):
            skip = entry.command == "skip"
            state = _fresh_budgets(state, pending=entry.next_action,
                                   skipped=_skipping(state, _last_checkpoint(state) if skip else None),
                                   instructions=entry.text or None, park_issue=None, parked_at=None,
                                   finished=False, uncredited_base=None if skip else state.uncredited_base)
        elif isinstance(entry, Place):
            state = state.evolve(place=entry)
        elif isinstance(entry, Note):
            if all(n.source != entry.source or not entry.source for n in state.notes):
                state = state.evolve(notes=(*state.notes, entry)[-MAX_NOTES:])
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


@dataclass(frozen=True)
class Situation:
    """What a rule of `decide_next` looks at: the session's verdict, the state including it, the plan."""

    verdict: Verdict
    state: RunState
    plan: Plan

    @property
    def outcome(self) -> Outcome:
        return self.verdict.outcome

    @property
    def budget(self):
        return self.plan.config.budget

    @property
    def stalled(self) -> bool:
        return self.verdict.outcome in _STALLS

    @property
    def by_agent(self) -> bool:
        return self.verdict.blame is Blame.AGENT

    @property
    def checkpoint(self) -> str | None:
        return self.state.last.checkpoint if self.state.last else None


@dataclass(frozen=True)
class NextRule:
    """One row of `NEXT_RULES`: its name (recorded in the ledger as `decided_by`), when it applies, what it does."""

    name: str
    applies: Callable[[Situation], bool]
    action: Callable[[Situation], AnyAction]


class Decision(Record):
    """What `decide` chose and the name of the rule that chose it."""

    rule: str
    action: AnyAction


def _stage_spent(s: Situation) -> bool:
    stage = s.plan.stage_of(s.checkpoint) if s.checkpoint else None
    return stage is not None and s.state.stage_attempts.get(stage.number, 0) >= s.plan.stage_attempt_budget(stage)


def _stage_budget_spent(s: Situation) -> ConsultAdvisor:
    stage = s.plan.stage_of(s.checkpoint)  # type: ignore[arg-type]
    assert stage is not None
    return ConsultAdvisor(reason=f"stage {stage.number} attempt budget spent ({s.plan.stage_attempt_budget(stage)} "
                                 "attempts)", checkpoint=s.checkpoint)


def _wait_out(s: Situation) -> Wait:
    what = "transient error" if s.verdict.transient else "rate limit"
    return Wait(until=_backoff(s.verdict, s.state), reason=f"{what}; no attempt burned",
                then=_same_session_again(s.state, f"retry after the {what}"))


def _resume(s: Situation) -> RunSession:
    return RunSession(kind=SessionKind.RESUME, checkpoint=s.checkpoint,
                      reason=f"{s.outcome.value}: resume the same agent session",
                      resume_session_id=s.verdict.agent_session_id, instructions=s.state.instructions)


_DELIVERED = (Outcome.ADVANCED, Outcome.PROGRESS, Outcome.NO_PROGRESS)


def _human_headline(reasons: tuple[str, ...]) -> str:
    """A set-up problem is the headline itself (the gate and its failing line): the maintainer's to fix, and the
    first thing the report says; anything else that needs a human is in the details."""
    setup = [r.removeprefix(SETUP_PROBLEM) for r in reasons if r.startswith(SETUP_PROBLEM)]
    return f"set-up problem: {bound_text(setup[0], 400)}" if setup else "the session needs a human"

# `decide_next` as a table: the rules are checked in order and the first that applies decides (like
# `outcome.RULES`). One line per rule: a new bound is a new line, at the place where it should win.
NEXT_RULES: tuple[NextRule, ...] = (
    NextRule("needs-human", lambda s: s.outcome is Outcome.NEEDS_HUMAN,
             lambda s: Park(reason=_human_headline(s.verdict.reasons), details=s.verdict.reasons)),
    NextRule("nothing-left", lambda s: s.outcome in _DELIVERED and s.plan.next_checkpoint(s.state.skipped) is None,
             lambda s: _next_work(s.plan, s.state, SessionKind.DELIVERY, "")),
    NextRule("max-sessions", lambda s: s.state.sessions >= s.budget.max_sessions,
             lambda s: Park(reason=f"max_sessions reached ({s.state.sessions} of {s.budget.max_sessions})")),
    NextRule("max-cost", lambda s: s.budget.max_cost_usd is not None and s.state.cost_usd >= s.budget.max_cost_usd,
             lambda s: Park(reason=f"max_cost_usd reached (${s.state.cost_usd:.2f} of ${s.budget.max_cost_usd:.2f})")),
    NextRule("max-backoffs", lambda s: s.outcome is Outcome.LIMIT_BACKOFF
             and s.state.consecutive_backoffs >= s.budget.max_backoffs,
             lambda s: Park(reason=f"{s.state.consecutive_backoffs} backoffs in a row (max_backoffs "
                                   f"{s.budget.max_backoffs})", details=s.verdict.reasons)),
    NextRule("backoff", lambda s: s.outcome is Outcome.LIMIT_BACKOFF, _wait_out),
    NextRule("rolled-over", lambda s: s.outcome is Outcome.ROLLED_OVER,
             lambda s: _next_work(s.plan, s.state, SessionKind.HANDOFF,
                                  "token budget reached: fresh session with the handoff")),
    NextRule("zero-output-stalls", lambda s: s.stalled and s.state.consecutive_zero_stalls >= 2,
             lambda s: Park(reason="two consecutive sessions produced no output at all")),
    NextRule("resume-budget", lambda s: s.stalled and s.state.consecutive_stalls > s.budget.max_resumes,
             lambda s: ConsultAdvisor(reason=f"resume budget spent ({s.budget.max_resumes} resumes)",
                                      checkpoint=s.checkpoint)),
    NextRule("resume", lambda s: s.stalled and bool(s.verdict.agent_session_id), _resume),
    NextRule("restart", lambda s: s.stalled,
             lambda s: _same_session_again(s.state, f"{s.outcome.value} before the agent had a session id: "
                                                    "start it again")),
    NextRule("circuit-breaker", lambda s: s.by_agent and s.state.streak >= 2,
             lambda s: ConsultAdvisor(reason=f"circuit breaker: {s.outcome.value} twice in a row with the same "
                                             "failure", checkpoint=s.checkpoint)),
    NextRule("stage-budget", lambda s: s.by_agent and _stage_spent(s), _stage_budget_spent),
    NextRule("fix", lambda s: s.by_agent,
             lambda s: _next_work(s.plan, s.state, _FIX_KIND[s.outcome], f"{s.outcome.value}: fix session")),
    # gates red on the base commit too, before any work (outcome rule 8, blamed on nobody): the next session is
    # shown the failure; the same failure then is the agent's, and twice in a row the circuit breaker's
    NextRule("fix-red-on-base", lambda s: s.outcome is Outcome.GATES_RED,
             lambda s: _next_work(s.plan, s.state, _FIX_KIND[s.outcome],
                                  "GatesRed, as on the base commit before any work: fix session")),
    NextRule("deliver", lambda s: True,
             lambda s: _next_work(s.plan, s.state, SessionKind.DELIVERY, "advanced: next checkpoint"
                                  if s.outcome is Outcome.ADVANCED else "progress: keep delivering")),
)


def decide(verdict: Verdict, state: RunState, plan: Plan) -> Decision:
    """What happens after a session, and the name of the rule of `NEXT_RULES` that decided it. `state` already
    includes that session; `plan` is the configuration from the base commit with the tracker as of the work
    branch head."""
    situation = Situation(verdict, state, plan)
    for rule in NEXT_RULES:
        if rule.applies(situation):
            return Decision(rule=rule.name, action=rule.action(situation))
    raise AssertionError("the policy's table has no default rule")  # pragma: no cover - `deliver` always applies


def decide_next(verdict: Verdict, state: RunState, plan: Plan) -> AnyAction:
    """The action of `decide` alone."""
    return decide(verdict, state, plan).action


def _retry_kind(state: RunState) -> SessionKind:
    last = state.last
    return _FIX_KIND.get(last.outcome, SessionKind.DELIVERY) if last else SessionKind.DELIVERY


def decide_after_advice(answer: str, reason: str, state: RunState, plan: Plan, *, asked: bool = True) -> AnyAction:
    """The advisor's answer (already validated: anything else is 'human') turned into an action.
    `state` is the state before the advice; `plan.next_checkpoint` already reflects the tracker.
    `asked=False`: no advisor is configured, `reason` is the dead end itself, and a human decides."""
    last = state.last
    if answer == "retry":
        return _next_work(plan, state, _retry_kind(state), f"advisor: retry ({reason})")
    if answer == "resume" and last is not None and last.agent_session_id:
        return RunSession(kind=SessionKind.RESUME, checkpoint=last.checkpoint, reason=f"advisor: resume ({reason})",
                          resume_session_id=last.agent_session_id, instructions=state.instructions)
    if answer == "resume":
        return _next_work(plan, state, _retry_kind(state), f"advisor: resume, no agent session to resume ({reason})")
    if answer == "skip" and not advisor_may_skip(plan):
        return Park(reason=f"the advisor answered skip ({reason}); skipping a checkpoint needs a human "
                           "(the plan does not set `advisor.may_skip: true`)")
    if answer == "skip":
        return _next_work(plan, state.evolve(skipped=_skipping(state, _last_checkpoint(state))), SessionKind.DELIVERY,
                          f"advisor: skip ({reason})")
    if not asked:
        return Park(reason=reason)  # the park says what happened (the circuit breaker, a budget), not "the advisor"
    return Park(reason=f"the advisor asks for a human: {reason}")


def advisor_may_skip(plan: Plan) -> bool:
    """Whether the advisor's `skip` is applied without a human. The advisor reads text the agent wrote, and a
    model that obeys such text is a model: by default its skip parks the plan for a human; a plan opts in with
    `advisor.may_skip: true`. The other answers cannot drop a checkpoint (`max_sessions` bounds them)."""
    return plan.config.advisor is not None and plan.config.advisor.may_skip


def advice_entry(answer: str, reason: str, state: RunState, plan: Plan, *, at: datetime, valid: bool = True,
                 model: str = "", checkpoint: str | None = None, asked: bool = True) -> Advice:
    """The ledger entry of the advisor's answer: the answer as given, the action decided on it, and whether it
    was applied (`applied=False`: a skip the plan does not let the advisor take alone; the fold skips nothing)."""
    action = decide_after_advice(answer, reason, state, plan, asked=asked)
    return Advice(at=at, answer=answer, reason=reason, valid=valid, model=model, checkpoint=checkpoint,
                  next_action=action, applied=not (answer == "skip" and not advisor_may_skip(plan)))


def decide_after_reply(command: str, text: str, user: str, state: RunState, plan: Plan) -> AnyAction:
    """A human's `/plan-runner <command> [text]` turned into an action. Budgets restart."""
    fresh = _fresh_budgets(state, instructions=text or None)
    last = state.last
    who = f"@{user}" if user else "a human"
    if command == "stop":
        return Park(reason=f"stopped by {who}")
    if command == "skip":
        return _next_work(plan, fresh.evolve(skipped=_skipping(state, _last_checkpoint(state))), SessionKind.DELIVERY,
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
