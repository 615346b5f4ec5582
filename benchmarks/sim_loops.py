"""Three loops over the same simulated world: plan-runner's real policy and two baselines.

* `run_plan_runner` drives the real pure core: `classify` on synthetic `Evidence`,
  `fold` of the real ledger records, `decide_next` / `decide_after_advice`; waits
  advance the simulated clock. The advisor is a deterministic rule: "retry" the
  first time per checkpoint, "human" after that.
* `run_naive`: a pass/fail loop. A session succeeds when the agent exited 0, the
  gates passed on one run and the checkpoint is ticked; anything else is a failed
  attempt; `attempts` failures on one checkpoint give up (a park). It retries
  `retry_delay` after a failure.
* `run_claim_driven`: the checkpoint is done when the agent says it is done; an
  agent asking for a human stops the plan; `attempts` sessions without a claim give up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from benchmarks.sim_world import T0, FaultModel, PlanTruth, SessionTruth, World
from runner.actions import Blame, ConsultAdvisor, Finish, Park, RunSession, Wait
from runner.evidence import (
    CheckpointState, CommitInfo, Evidence, ExitKind, Flip, GateResult, Hints, SessionSignals,
)
from runner.ledger import Advice, GateSummary, SessionRecord
from runner.outcome import classify
from runner.plan import BudgetConfig, Checkpoint, Plan, PlanConfig, Stage
from runner.policy import decide_after_advice, decide_next, decide_start, fold

MAX_SESSIONS = 60  # the same hard backstop for every loop (plan-runner's default max_sessions)


@dataclass
class PlanRun:
    """What one loop did with one plan, judged against the world's truth."""

    loop: str
    plan: str
    can_finish: bool
    finished: bool = False  # the loop said the plan is finished
    finished_truly: bool = False  # ... and every checkpoint really is done
    marked_done: int = 0
    false_done: int = 0
    sessions: int = 0
    tokens: int = 0
    attempts_burned: int = 0  # sessions counted against a retry budget
    attempts_burned_env: int = 0  # ... whose cause was the environment (limit, 5xx, stall, tokens, flaky gate)
    parks: int = 0
    parks_needed: int = 0  # parked at a checkpoint that needs a human or that the agent can never do
    park_reason: str = ""
    hours: float = 0.0  # simulated wall time until the plan finished or parked
    done: set[str] = field(default_factory=set)

    @property
    def finished_checkpoints(self) -> int:
        return self.marked_done - self.false_done


def _mark_done(run: PlanRun, world: World, cid: str) -> None:
    run.marked_done += 1
    run.done.add(cid)
    if not world.truly_done(cid):
        run.false_done += 1


def _park(run: PlanRun, world: World, cid: str | None, reason: str) -> None:
    run.parks += 1
    run.park_reason = reason
    kind = next((c.kind for c in world.plan.checkpoints if c.id == cid), "normal")
    if kind != "normal":
        run.parks_needed += 1


# --- plan-runner --------------------------------------------------------------------------

def _plan_model(truth: PlanTruth, done: set[str]) -> Plan:
    stages = tuple(
        Stage(number=s.number, title=f"Stage {s.number}", sessions=s.sessions,
              checkpoints=tuple(Checkpoint(id=c.id, title=f"Checkpoint {c.id}",
                                           state=CheckpointState.DONE if c.id in done else CheckpointState.TODO)
                                for c in s.checkpoints))
        for s in truth.stages)
    return Plan(path=f"plans/{truth.id}.md", id=truth.id,
                config=PlanConfig(budget=BudgetConfig(max_sessions=MAX_SESSIONS, max_cost_usd=None)), stages=stages)


_EXIT = {"rate_limit": ExitKind.RATE_LIMIT, "transient": ExitKind.TRANSIENT, "stall": ExitKind.STALLED,
         "token_budget": ExitKind.TOKEN_BUDGET, None: ExitKind.FINISHED}


def evidence_of(t: SessionTruth, *, plan_id: str, n: int, kind: str, cid: str, started: datetime) -> Evidence:
    """What plan-runner's collectors would record for this session (the gate battery re-runs a flaky gate)."""
    commits = []
    if t.work_commit:
        commits.append(CommitInfo(sha=f"{n:04d}a", summary="work", files=("src/app.py",)))
    if t.flip_done:
        commits.append(CommitInfo(sha=f"{n:04d}b", summary=f"Tick {cid}", files=(f"plans/{plan_id}.md",),
                                  counts_as_work=False))
    flips = (Flip(checkpoint_id=cid, before=CheckpointState.TODO, after=CheckpointState.DONE),) if t.flip_done else ()
    gate = GateResult(name="tests", passed=t.gates_green, exit_code=0 if t.gates_green else 1,
                      fingerprint="" if t.gates_green else t.fingerprint,
                      reran=t.flaky or not t.gates_green, flaky=t.flaky and t.gates_green)
    zero = t.zero_output
    signals = SessionSignals(
        backend="sim", exit_kind=_EXIT[t.env], exit_code=0 if t.env is None else None,
        agent_session_id=None if zero else f"agent-{n}", total_tokens=t.tokens, reset_at=t.reset_at,
        error={"rate_limit": "rate limit", "transient": "overloaded"}.get(t.env or ""),
        output_bytes=0 if zero else 4096, duration_s=t.duration.total_seconds(),
        hints=Hints(claimed_done=t.claims_done, final_text="Done." if t.claims_done else ""))
    return Evidence(plan_id=plan_id, session_number=n, session_kind=kind, started_at=started,
                    observed_at=started + t.duration, base_sha="0" * 40, head_sha=f"{n:040d}",
                    commits=tuple(commits), flips=flips, gates=(gate,), signals=signals,
                    handoff="HUMAN: this checkpoint needs a decision only a maintainer can make" if t.asks_human else None,
                    next_checkpoint=cid)


def run_plan_runner(truth: PlanTruth, seed: int, faults: FaultModel) -> PlanRun:
    world = World(truth, seed, faults)
    run = PlanRun("plan-runner", truth.id, truth.can_finish)
    plan = _plan_model(truth, set())
    ledger: list = []
    now = T0
    advised: dict[str | None, int] = {}
    current: str | None = None
    action = decide_start(fold(ledger), plan)
    for _ in range(10 * MAX_SESSIONS):
        if isinstance(action, Wait):
            now = max(now, action.until)
            action = action.then
        elif isinstance(action, ConsultAdvisor):
            answer = "retry" if advised.get(action.checkpoint, 0) == 0 else "human"
            advised[action.checkpoint] = advised.get(action.checkpoint, 0) + 1
            decided = decide_after_advice(answer, "deterministic advisor", fold(ledger), plan)
            ledger.append(Advice(at=now, answer=answer, reason="deterministic advisor", checkpoint=action.checkpoint,
                                 next_action=decided))
            action = decided
        elif isinstance(action, Park):
            _park(run, world, current, action.reason)
            break
        elif isinstance(action, Finish):
            run.finished = True
            run.finished_truly = all(world.truly_done(c.id) for c in truth.checkpoints)
            break
        else:
            assert isinstance(action, RunSession)
            n = run.sessions + 1
            current = action.checkpoint
            t = world.play(n, current, now)
            ev = evidence_of(t, plan_id=truth.id, n=n, kind=action.kind.value, cid=current, started=now)
            now = ev.observed_at
            verdict = classify(ev)
            run.sessions, run.tokens = n, run.tokens + t.tokens
            for cid in verdict.advanced:
                _mark_done(run, world, cid)
            if verdict.advanced:
                plan = _plan_model(truth, run.done)
            if verdict.blame is Blame.AGENT:
                run.attempts_burned += 1
                run.attempts_burned_env += t.environment_fault
            stage = plan.stage_of(current)
            record = SessionRecord(
                n=n, kind=action.kind, checkpoint=current, stage=stage.number if stage else None, started_at=ev.started_at,
                finished_at=ev.observed_at, outcome=verdict.outcome, blame=verdict.blame, rule=verdict.rule,
                fingerprint=verdict.fingerprint, zero_output=verdict.zero_output, advanced=verdict.advanced,
                agent_session_id=verdict.agent_session_id, tokens=t.tokens, work_commits=len(ev.work_commits),
                gates=tuple(GateSummary(name=g.name, required=g.required, passed=g.passed) for g in ev.gates),
                resume_session_id=action.resume_session_id)
            action = decide_next(verdict, fold(ledger + [record]), plan)
            ledger.append(record.model_copy(update={"next_action": action}))
    else:  # pragma: no cover - max_sessions parks first
        raise AssertionError(f"{truth.id}: the policy did not settle")
    run.hours = (now - T0).total_seconds() / 3600
    return run


# --- baselines ------------------------------------------------------------------------------

def _baseline(truth: PlanTruth, seed: int, faults: FaultModel, *, loop: str, attempts: int,
              retry_delay: timedelta) -> PlanRun:
    world = World(truth, seed, faults)
    run = PlanRun(loop, truth.id, truth.can_finish)
    now = T0
    for cp in truth.checkpoints:
        failures = 0
        while cp.id not in run.done:
            if run.sessions >= MAX_SESSIONS:
                _park(run, world, cp.id, "max sessions")
                run.hours = (now - T0).total_seconds() / 3600
                return run
            run.sessions += 1
            t = world.play(run.sessions, cp.id, now)
            now += t.duration
            run.tokens += t.tokens
            if loop == "naive":
                ok = t.env is None and t.gates_green and not t.flaky and t.flip_done
                env_caused = t.environment_fault
            else:
                ok = t.env is None and t.claims_done
                env_caused = t.env is not None  # it runs no gates: a flaky gate cannot touch it
                if t.env is None and t.asks_human and not ok:
                    _park(run, world, cp.id, "the agent asked for a human")
                    run.hours = (now - T0).total_seconds() / 3600
                    return run
            if ok:
                _mark_done(run, world, cp.id)
                continue
            failures += 1
            run.attempts_burned += 1
            run.attempts_burned_env += env_caused
            if failures >= attempts:
                _park(run, world, cp.id, f"{attempts} failed attempts")
                run.hours = (now - T0).total_seconds() / 3600
                return run
            now += retry_delay
    run.finished = True
    run.finished_truly = all(world.truly_done(c.id) for c in truth.checkpoints)
    run.hours = (now - T0).total_seconds() / 3600
    return run


def run_naive(truth: PlanTruth, seed: int, faults: FaultModel, *, attempts: int = 5,
              retry_delay: timedelta = timedelta(minutes=5)) -> PlanRun:
    return _baseline(truth, seed, faults, loop="naive", attempts=attempts, retry_delay=retry_delay)


def run_claim_driven(truth: PlanTruth, seed: int, faults: FaultModel, *, attempts: int = 5,
                     retry_delay: timedelta = timedelta(minutes=5)) -> PlanRun:
    return _baseline(truth, seed, faults, loop="claim-driven", attempts=attempts, retry_delay=retry_delay)
