"""Four loops over the same simulated world, each reading only the raw signals of a session.

`sim_signals.render` turns what really happened into what a loop can observe: the agent CLI's
stream-json lines and exit code, the commits and the plan file at the head, the handoff, and the
test gate's runs. Each loop must detect limits, flakes and lies from that itself.

* `run_plan_runner`: plan-runner's real parsers and pure core. The stream goes through
  `backends.claude_code.streamjson.parse_stream` (the Claude Code backend's parser and exit classifier), the
  gate runs through `gates.run_gates` (its re-run of a red required gate, flaky marking) and
  `fingerprint`, the commits through the collectors' bookkeeping rule, the tracker through
  `planfile.with_tracker`/`diff_tracker`; then `classify`, `fold` of real ledger records,
  `decide_next`/`decide_after_advice`. Waits advance the simulated clock; rejected ticks are
  reverted. The advisor is a deterministic rule: "retry" the first time per checkpoint, "human" after.
* `run_sensible`: the 40-line pass/fail loop a careful engineer writes. It greps the output for a
  429 or "rate limit" and then waits for the reset the stream announces (an hour when it announces
  none) without counting an attempt; it re-runs a red gate once; a session succeeds when the CLI
  exited 0, the checkpoint is ticked, a commit touches something besides the plan and the gate is
  green. 5 failed attempts on a checkpoint give up; retry 5 minutes after a failure.
* `run_naive`: success = the CLI exited 0, the gate passed on one run and the checkpoint is ticked;
  anything else is a failed attempt; 5 give up; retry after 5 minutes.
* `run_claim_driven`: the checkpoint is done when the CLI's final result says done or complete;
  a result asking for a human (`HUMAN:`) stops the plan; 5 sessions without a claim give up.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.sim_signals import RawSession, plan_path, plan_text, render, tick
from benchmarks.sim_world import T0, FaultModel, PlanTruth, World
from runner.core.actions import Blame, ConsultAdvisor, Finish, Park, RunSession, Wait
from runner.backends.claude_code.streamjson import STOP_TOKEN_BUDGET, parse_stream
from runner.adapters.judge.collect import handoff_path_of
from runner.core.evidence import CommitInfo, Evidence, GateResult
from runner.core.fingerprint import fingerprint
from runner.adapters.judge.gates import run_gates
from runner.adapters.git.evidence import _matches as matches_bookkeeping  # the collectors' "only plan/handoff" rule
from runner.core.ledger import Advice, GateSummary, SessionRecord
from runner.core.outcome import classify
from runner.core.plan import GateConfig, Plan
from runner.core.planfile import diff_tracker, parse_plan, with_tracker
from runner.core.policy import decide_after_advice, decide_next, decide_start, fold

MAX_SESSIONS = 60  # the same hard backstop for every loop (plan-runner's default max_sessions)
ATTEMPTS = 5  # the baselines' failed attempts on one checkpoint before they give up
RETRY_DELAY = timedelta(minutes=5)


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


# --- plan-runner ---------------------------------------------------------------------------

# Through the gate battery's checks path, so a test hands it each run's raw exit code and output.
_GATE = GateConfig(name="tests", checks=("tests",))


def collect_evidence(raw: RawSession, *, plan: Plan, tracker_before: str, n: int, kind: str, cid: str,
                     started: datetime, tracked: dict[str, Plan] | None = None) -> Evidence:
    """What plan-runner's collectors make of the raw signals (`runner.adapters.judge.collect.collect_evidence`, minus git).
    `tracked` caches `with_tracker` by the plan file's text (the same text parses the same)."""
    tracked = {} if tracked is None else tracked
    for text in (tracker_before, raw.tracker_after):
        if text not in tracked:
            tracked[text] = with_tracker(plan, text)
    signals = parse_stream(raw.lines, backend="claude-code", reason=raw.end, returncode=raw.returncode,
                           stop_detail=STOP_TOKEN_BUDGET if raw.end == "stopped" else "",
                           output_bytes=sum(len(line) + 1 for line in raw.lines),
                           duration_s=raw.duration.total_seconds())
    bookkeeping = {plan.path, handoff_path_of(plan)}
    commits = tuple(CommitInfo(sha=f"{n:04d}{i}", summary=summary, files=files,
                               counts_as_work=bool(files) and not all(matches_bookkeeping(f, bookkeeping) for f in files))
                    for i, (summary, files) in enumerate(raw.commits))
    flips = diff_tracker(tracked[tracker_before], tracked[raw.tracker_after])
    runs = iter(raw.gate_runs)

    def run_once(gate: GateConfig) -> GateResult:
        code, output = next(runs)
        passed = code == 0
        return GateResult(name=gate.name, passed=passed, exit_code=code, output_tail=output,
                          fingerprint="" if passed else fingerprint(f"{gate.name}\n\n{output}"))

    gates = run_gates((_GATE,), workdir=Path("."), env={}, checks_runner=run_once)
    return Evidence(plan_id=plan.id, session_number=n, session_kind=kind, started_at=started,
                    observed_at=started + raw.duration, base_sha="0" * 40, head_sha=f"{n:040d}",
                    commits=commits, flips=flips, gates=gates, signals=signals, handoff=raw.handoff,
                    next_checkpoint=cid)


def run_plan_runner(truth: PlanTruth, seed: int, faults: FaultModel) -> PlanRun:
    world = World(truth, seed, faults)
    run = PlanRun("plan-runner", truth.id, truth.can_finish)
    tracker = plan_text(truth, set(), MAX_SESSIONS)
    base = parse_plan(tracker, plan_path(truth))
    plan = base
    tracked: dict[str, Plan] = {tracker: base}
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
            raw = render(t, truth, current, n, tracker, now)
            ev = collect_evidence(raw, plan=base, tracker_before=tracker, n=n, kind=action.kind.value, cid=current,
                                  started=now, tracked=tracked)
            now = ev.observed_at
            verdict = classify(ev)
            run.sessions, run.tokens = n, run.tokens + t.tokens
            for cid in verdict.advanced:
                _mark_done(run, world, cid)
                tracker = tick(tracker, cid)  # rejected ticks are reverted: only genuine ones stay
            plan = tracked.get(tracker) or tracked.setdefault(tracker, with_tracker(base, tracker))
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
            ledger.append(record.evolve(next_action=action))
    else:  # pragma: no cover - max_sessions parks first
        raise AssertionError(f"{truth.id}: the policy did not settle")
    run.hours = (now - T0).total_seconds() / 3600
    return run


# --- baselines: each reads the same raw signals its own way ------------------------------------

_LIMITED = re.compile(r'"api_error_status":429\b|rate.limit', re.I)


def _announced_reset(raw: RawSession) -> datetime | None:
    for line in raw.lines:
        if '"resetsAt"' in line:
            at = json.loads(line).get("rate_limit_info", {}).get("resetsAt")
            if isinstance(at, int):
                return datetime.fromtimestamp(at, tz=timezone.utc)
    return None


def _final_text(raw: RawSession) -> str:
    for line in reversed(raw.lines):
        msg = json.loads(line)
        if msg.get("type") == "result":
            return str(msg.get("result") or "")
    return ""


def _ticked(raw: RawSession, cid: str) -> bool:
    return f"- [x] {cid} " in raw.tracker_after


def _baseline(truth: PlanTruth, seed: int, faults: FaultModel, *, loop: str) -> PlanRun:
    world = World(truth, seed, faults)
    run = PlanRun(loop, truth.id, truth.can_finish)
    path = plan_path(truth)
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
            raw = render(t, truth, cp.id, run.sessions, plan_text(truth, run.done, MAX_SESSIONS), now)
            now += raw.duration
            run.tokens += t.tokens
            env_caused = t.environment_fault
            if loop == "naive":
                ok = raw.returncode == 0 and raw.gate_runs[0][0] == 0 and _ticked(raw, cp.id)
            elif loop == "sensible":
                if _LIMITED.search(raw.stdout):
                    reset = _announced_reset(raw)
                    now = reset if reset is not None and reset > now else now + timedelta(hours=1)
                    continue
                green = raw.gate_runs[0][0] == 0 or raw.gate_runs[1][0] == 0
                work = any(any(f != path for f in files) for _, files in raw.commits)
                ok = raw.returncode == 0 and _ticked(raw, cp.id) and work and green
            else:
                final = _final_text(raw)
                ok = raw.returncode == 0 and re.search(r"\b(done|complete)\b", final, re.I) is not None
                env_caused = t.env is not None  # it runs no gates: a flaky gate cannot touch it
                if not ok and "HUMAN:" in final:
                    _park(run, world, cp.id, "the agent asked for a human")
                    run.hours = (now - T0).total_seconds() / 3600
                    return run
            if ok:
                _mark_done(run, world, cp.id)
                continue
            failures += 1
            run.attempts_burned += 1
            run.attempts_burned_env += env_caused
            if failures >= ATTEMPTS:
                _park(run, world, cp.id, f"{ATTEMPTS} failed attempts")
                run.hours = (now - T0).total_seconds() / 3600
                return run
            now += RETRY_DELAY
    run.finished = True
    run.finished_truly = all(world.truly_done(c.id) for c in truth.checkpoints)
    run.hours = (now - T0).total_seconds() / 3600
    return run


def run_sensible(truth: PlanTruth, seed: int, faults: FaultModel) -> PlanRun:
    return _baseline(truth, seed, faults, loop="sensible")


def run_naive(truth: PlanTruth, seed: int, faults: FaultModel) -> PlanRun:
    return _baseline(truth, seed, faults, loop="naive")


def run_claim_driven(truth: PlanTruth, seed: int, faults: FaultModel) -> PlanRun:
    return _baseline(truth, seed, faults, loop="claim-driven")
