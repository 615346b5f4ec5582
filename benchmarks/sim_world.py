"""The weather for the loop benchmark: seeded plans and a fault model of agent sessions.

Every loop (plan-runner's real policy and the baselines) plays the same plans
against the same world: the n-th session of a plan draws its randomness from
`Random(f"{seed}:{plan}:{n}")`, so the same session number meets the same
weather whichever loop runs it. What the session *does* then depends on the
world's state (is a rate-limit window open, how much of the checkpoint is done,
how many mistakes the agent still has to make on it), which each loop advances
in its own copy of the world.

The world knows the truth (is the checkpoint really done? was this failure the
environment's fault?) so the metrics can judge each loop; the loops see only
what a real loop sees: plan-runner gets `Evidence`, the baselines get the exit
status, one gate run, the tracker and the agent's claim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

T0 = datetime(2026, 1, 5, 22, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class FaultModel:
    """Per-session probabilities. Environment faults are drawn first; the agent's behaviour after."""

    rate_limit: float = 0.05  # opens a window of `limit_window_min` minutes: every session in it is limited
    limit_window_min: tuple[int, ...] = (15, 30, 60, 120, 300)
    transient: float = 0.05  # 5xx / overloaded: the session ends at once
    stall: float = 0.04  # the API hangs: no output for stall_minutes
    zero_output_stall: float = 0.25  # share of stalls with no output at all (no agent session id)
    token_budget: float = 0.04  # the session's token budget runs out mid-work
    flaky_gate: float = 0.08  # a required gate fails once and passes on a re-run
    lazy_claim: float = 0.35  # share of an agent's mistakes that are "done!" without work (else a real bug)
    bug_claims_done: float = 0.3  # an agent that broke the tests still says it is done
    human_asks: float = 0.7  # at a checkpoint that needs a human: asks (else claims done without work)
    hopeless_claims_done: float = 0.5  # an agent repeating the same failure says "all tests pass"
    # plan shapes
    needs_human_plans: float = 0.10  # plans with a checkpoint only a human can unblock
    hopeless_plans: float = 0.08  # plans with a checkpoint the agent fails the same way every time
    mistakes: tuple[int, ...] = (0, 0, 0, 0, 0, 0, 1, 1, 1, 2)  # agent mistakes before a checkpoint succeeds


@dataclass(frozen=True)
class CheckpointTruth:
    id: str
    kind: str  # normal | human | hopeless
    units: int  # sessions of real work it takes
    mistakes: int  # failed sessions the agent makes on it before it gets it right (normal only)


@dataclass(frozen=True)
class StageTruth:
    number: int
    sessions: int  # the plan author's estimate (what plan-runner budgets from)
    checkpoints: tuple[CheckpointTruth, ...]


@dataclass(frozen=True)
class PlanTruth:
    id: str
    stages: tuple[StageTruth, ...]

    @property
    def checkpoints(self) -> tuple[CheckpointTruth, ...]:
        return tuple(c for s in self.stages for c in s.checkpoints)

    @property
    def can_finish(self) -> bool:
        """Finishable without a human: no checkpoint that needs one, none the agent can never do."""
        return all(c.kind == "normal" for c in self.checkpoints)


def generate_plans(count: int, seed: int, faults: FaultModel) -> list[PlanTruth]:
    plans = []
    for p in range(count):
        r = random.Random(f"{seed}:plan:{p}")
        stages = []
        special = None
        u = r.random()
        if u < faults.needs_human_plans:
            special = "human"
        elif u < faults.needs_human_plans + faults.hopeless_plans:
            special = "hopeless"
        n_stages = r.randint(1, 3)
        shapes = [r.randint(1, 3) for _ in range(n_stages)]
        total = sum(shapes)
        special_at = r.randrange(total) if special else -1
        k = 0
        for s in range(n_stages):
            cps = []
            for c in range(shapes[s]):
                kind = special if k == special_at else "normal"
                units = r.choice((1, 1, 1, 2, 2, 3))
                cps.append(CheckpointTruth(id=f"{s + 1}.{c + 1}", kind=kind, units=units,
                                           mistakes=r.choice(faults.mistakes) if kind == "normal" else 0))
                k += 1
            estimate = max(1, sum(c.units for c in cps) + r.choice((-1, 0, 0, 1)))
            stages.append(StageTruth(number=s + 1, sessions=estimate, checkpoints=tuple(cps)))
        plans.append(PlanTruth(id=f"plan-{p:04d}", stages=tuple(stages)))
    return plans


@dataclass(frozen=True)
class SessionTruth:
    """What really happened in one session, and what each kind of observer can see of it."""

    env: str | None  # rate_limit | transient | stall | token_budget | None
    behaviour: str  # none | complete | progress | bug | lazy_claim | same_failure | ask_human | false_claim
    duration: timedelta
    tokens: int
    reset_at: datetime | None = None
    zero_output: bool = False
    flaky: bool = False  # a required gate failed once (green on a re-run)
    work_commit: bool = False
    flip_done: bool = False  # the agent ticked the checkpoint in the tracker
    claims_done: bool = False
    asks_human: bool = False
    gates_green: bool = True  # the gates' real state (a flaky gate is green)
    fingerprint: str = ""  # of the red gate

    @property
    def environment_fault(self) -> bool:
        """The environment alone spoiled it: a limit, 5xx, stall or token run-out, or a flaky gate
        on good work (next to a bug or a claim without work, the failure is the agent's)."""
        return self.env is not None or (self.flaky and self.behaviour in ("complete", "progress"))


@dataclass
class World:
    """One loop's copy of the world for one plan."""

    plan: PlanTruth
    seed: int
    faults: FaultModel
    units_done: dict[str, int] = field(default_factory=dict)
    mistakes_made: dict[str, int] = field(default_factory=dict)
    limit_until: datetime | None = None

    def truly_done(self, cid: str) -> bool:
        cp = next(c for c in self.plan.checkpoints if c.id == cid)
        return cp.kind == "normal" and self.units_done.get(cid, 0) >= cp.units

    def play(self, n: int, cid: str, now: datetime) -> SessionTruth:
        """Session number `n` of the plan, on checkpoint `cid`, started at `now`."""
        f = self.faults
        r = random.Random(f"{self.seed}:{self.plan.id}:{n}")
        u_env, u_agent, u_flaky, u_zero, u_claim, u_dur, u_tok = (r.random() for _ in range(7))
        window = timedelta(minutes=r.choice(f.limit_window_min))
        fp = f"fp-{r.getrandbits(32):08x}"
        minutes = 10 + 30 * u_dur
        tokens = int(80_000 + 170_000 * u_tok)
        cp = next(c for c in self.plan.checkpoints if c.id == cid)

        if self.limit_until is not None and now < self.limit_until:
            return SessionTruth("rate_limit", "none", timedelta(seconds=20), 500, reset_at=self.limit_until)
        if u_env < f.rate_limit:
            self.limit_until = now + window
            return SessionTruth("rate_limit", "none", timedelta(minutes=minutes / 3), tokens // 3,
                                reset_at=self.limit_until)
        u_env -= f.rate_limit
        if u_env < f.transient:
            return SessionTruth("transient", "none", timedelta(seconds=30), 2_000)
        u_env -= f.transient
        if u_env < f.stall:
            zero = u_zero < f.zero_output_stall
            return SessionTruth("stall", "none", timedelta(minutes=12 + minutes / 2), 0 if zero else tokens // 2,
                                zero_output=zero)
        u_env -= f.stall
        if u_env < f.token_budget:
            # Real work was committed, but the budget ran out before the checkpoint was done.
            return SessionTruth("token_budget", "none", timedelta(minutes=60), 600_000, work_commit=True)

        flaky = u_flaky < f.flaky_gate
        duration = timedelta(minutes=minutes)
        if cp.kind == "human":
            if u_agent < f.human_asks:
                return SessionTruth(None, "ask_human", duration, tokens // 4, asks_human=True, flaky=flaky)
            return SessionTruth(None, "false_claim", duration, tokens // 4, flip_done=True, claims_done=True, flaky=flaky)
        if cp.kind == "hopeless":
            return SessionTruth(None, "same_failure", duration, tokens, work_commit=True, gates_green=False,
                                fingerprint=f"same-{cid}", claims_done=u_claim < f.hopeless_claims_done, flaky=flaky)
        made = self.mistakes_made.get(cid, 0)
        if made < cp.mistakes:
            self.mistakes_made[cid] = made + 1
            if u_agent < f.lazy_claim:
                return SessionTruth(None, "lazy_claim", duration, tokens // 4, flip_done=True, claims_done=True,
                                    flaky=flaky)
            return SessionTruth(None, "bug", duration, tokens, work_commit=True, gates_green=False, fingerprint=fp,
                                claims_done=u_claim < f.bug_claims_done, flaky=flaky)
        done = self.units_done.get(cid, 0) + 1
        self.units_done[cid] = done
        if done >= cp.units:
            return SessionTruth(None, "complete", duration, tokens, work_commit=True, flip_done=True,
                                claims_done=True, flaky=flaky)
        return SessionTruth(None, "progress", duration, tokens, work_commit=True, flaky=flaky)
