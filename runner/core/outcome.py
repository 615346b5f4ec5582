"""classify(evidence) -> Verdict: the outcome table of the README ("How a session is judged"), in code.

Pure: no clock, no I/O. Rules are checked in order and the first match wins.
Hints (what the model said about itself) are never read by a rule; they are
only quoted in the reasons when they contradict the evidence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from runner.core.actions import Blame, Outcome, Verdict
from runner.core.bounds import bound_list
from runner.core.evidence import CheckpointState, Evidence, ExitKind, Flip

_FAILED_KINDS = {ExitKind.CRASHED, ExitKind.AUTH, ExitKind.RATE_LIMIT, ExitKind.TRANSIENT,
                 ExitKind.STALLED, ExitKind.TIME_LIMIT}


def human_lines(handoff: str | None) -> list[str]:
    """Lines of the handoff that start with `HUMAN:` (leading whitespace, bullets or quotes allowed)."""
    if not handoff:
        return []
    found = []
    for raw in handoff.splitlines():
        line = raw.strip().lstrip("-*> ").strip()
        if line.upper().startswith("HUMAN:"):
            found.append(line)
    return found


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def _gate_word(g) -> str:
    if g.error:
        return g.error
    if g.timed_out:
        return "timed out"
    if g.http_status is not None:
        return f"HTTP {g.http_status}"
    return f"exit {g.exit_code}"


def _is_done_flip(f: Flip) -> bool:
    return f.after is CheckpointState.DONE and f.before is not CheckpointState.DONE


@dataclass(frozen=True)
class _Rule:
    row: int
    outcome: Outcome
    blame: Blame
    matches: Callable[[Evidence], list[str]]  # non-empty list of reasons = match


SETUP_PROBLEM = "set-up problem, not the agent's failure: "


def _needs_human(e: Evidence) -> list[str]:
    reasons = [f"the handoff asks for a human: {line}" for line in human_lines(e.handoff)]
    reasons += [f"checkpoint {f.checkpoint_id} was marked BLOCKED" for f in e.flips
                if f.after is CheckpointState.BLOCKED and f.before is not CheckpointState.BLOCKED]
    if e.signals.exit_kind is ExitKind.AUTH:
        reasons.append(f"authentication or billing failure: {e.signals.error or 'the backend refused the credentials'}")
    reasons += [f"the agent changed protected configuration: {t}" for t in e.tampering]
    reasons += [f"gate {g.name} cannot be decided here: {g.needs_human}" for g in e.gates
                if g.required and g.needs_human]
    reasons += [f"{SETUP_PROBLEM}{p}" for p in e.setup_problems]
    reasons += [f"the agent's commits add the value of a secret to {p}; nothing of this session was pushed: "
                "take it out of the work branch's history before the plan goes on" for p in e.leaked_secrets]
    return reasons


def _exit(kind: ExitKind, text: str) -> Callable[[Evidence], list[str]]:
    def match(e: Evidence) -> list[str]:
        if e.signals.exit_kind is not kind:
            return []
        detail = f": {e.signals.error}" if e.signals.error else ""
        return [text + detail]
    return match


def _rolled_over(e: Evidence) -> list[str]:
    """The backend stopped the session at its token budget; or it finished on its own with its usage past the
    budget (a backend that counts but cannot stop its CLI mid-turn) and nothing credited: the session rolls over."""
    s = e.signals
    if s.exit_kind is ExitKind.TOKEN_BUDGET:
        return ["the session's token budget was reached" + (f": {s.error}" if s.error else "")]
    if (e.token_budget and s.exit_kind is ExitKind.FINISHED and s.exit_code in (0, None)
            and s.total_tokens >= e.token_budget and not _genuine_flips(e)):
        return [f"the session's token budget was reached: it used {s.total_tokens:,} tokens of {e.token_budget:,} "
                "(counted live; the backend did not stop it)"]
    return []


def _agent_error(e: Evidence) -> list[str]:
    s = e.signals
    if s.exit_kind is ExitKind.CRASHED:
        return [f"the agent process failed (exit {s.exit_code}): {s.error or 'no error text'}"]
    if s.exit_kind is ExitKind.FINISHED and s.exit_code not in (0, None):
        return [f"the agent process exited with code {s.exit_code}: {s.error or 'no error text'}"]
    return []


def _gates_red(e: Evidence) -> list[str]:
    return [f"required gate `{g.name}` is red ({_gate_word(g)})" + (" twice (re-run once)" if g.reran else "")
            + (f"; {g.red_on_base}" if g.red_on_base else "")
            for g in e.required_gates if not g.passed]


def _gates_red_as_on_base(e: Evidence) -> list[str]:
    """Every red required gate was red on the base commit too, before any work of the agent: not the agent's
    failure yet (a plan that starts from a failing test, or a `setup:` that misses the gate's tool)."""
    red = [g for g in e.required_gates if not g.passed]
    return _gates_red(e) if red and all(g.red_on_base for g in red) else []


def _carried(e: Evidence) -> list[str]:
    n = len(e.carried_work)
    return [f"counting {n} work commit(s) of the earlier session(s) on this checkpoint, which no verdict had "
            "credited (cut short, judged red, or not ticked then)"] if n else []


def _genuine_flips(e: Evidence) -> list[Flip]:
    if not e.credited_work or not e.gates_green:
        return []
    return [f for f in e.flips if _is_done_flip(f) and f.in_session_commits and f.verify_passed is not False]


def _advanced(e: Evidence) -> list[str]:
    flipped = [f"checkpoint {f.checkpoint_id} genuinely flipped to DONE" for f in _genuine_flips(e)]
    return flipped + _carried(e) if flipped else []


def _progress(e: Evidence) -> list[str]:
    n = len(e.credited_work)
    return [f"{n} work commit(s), gates green, no checkpoint flipped"] + _carried(e) if n else []


def _no_progress(e: Evidence) -> list[str]:
    return ["no work commits (commits that touch only the plan, tracker or handoff do not count)"]


# `Interrupted` is not in this table: no evidence classifies it. It is recorded, as rule 0, when
# plan-runner itself was stopped mid-session (Ctrl-C, SIGTERM, its own failure): see runner/drivers/session/cut_short.py.
INTERRUPTED_RULE = 0
# `Crashed` likewise (rule 0): plan-runner's own unexpected failure mid-session, recorded with the error and this.
CRASH_REPORT_URL = "https://github.com/plan-runner/plan-runner/issues/new"

RULES: tuple[_Rule, ...] = (
    _Rule(1, Outcome.NEEDS_HUMAN, Blame.NONE, _needs_human),
    _Rule(2, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT, _exit(ExitKind.RATE_LIMIT, "the backend hit a rate or usage limit")),
    _Rule(3, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT, _exit(ExitKind.TRANSIENT, "transient API or infrastructure error")),
    _Rule(4, Outcome.ROLLED_OVER, Blame.ENVIRONMENT, _rolled_over),
    _Rule(5, Outcome.STALLED, Blame.NONE, _exit(ExitKind.STALLED, "no output for stall_minutes; the agent was stopped")),
    _Rule(6, Outcome.TIMED_OUT, Blame.NONE, _exit(ExitKind.TIME_LIMIT, "the session's time limit was hit; the agent was stopped")),
    _Rule(7, Outcome.AGENT_ERROR, Blame.AGENT, _agent_error),
    # one row of the table, two blames: nobody's where every red gate was red on the base before any work
    _Rule(8, Outcome.GATES_RED, Blame.NONE, _gates_red_as_on_base),
    _Rule(8, Outcome.GATES_RED, Blame.AGENT, _gates_red),
    _Rule(9, Outcome.ADVANCED, Blame.NONE, _advanced),
    _Rule(10, Outcome.PROGRESS, Blame.NONE, _progress),
    _Rule(11, Outcome.NO_PROGRESS, Blame.AGENT, _no_progress),
)
# A session whose job died without a word, found later (runner/drivers/session/cut_short.py): judged as one
# that hit its time limit.
TIMED_OUT_RULE = next(rule.row for rule in RULES if rule.outcome is Outcome.TIMED_OUT)


def _rejected_flips(e: Evidence, credited: list[Flip], outcome: Outcome) -> tuple[str, ...]:
    """Flips to DONE that do not count, with why. The adapter reverts them on the work branch."""
    rejected = []
    genuine = _genuine_flips(e)
    for f in e.flips:
        if not _is_done_flip(f) or f in credited:
            continue
        if f in genuine:  # backed by the evidence, but the session ended another way: only Advanced credits
            why = f"the session ended {outcome.value}, and only an Advanced session credits a checkpoint"
        elif not f.in_session_commits:
            why = "the flip is not in this session's commits"
        elif not e.credited_work:
            why = "no work commits back it"
        elif not e.gates_green:
            why = "required gates are red"
        else:
            why = "its own verify: command failed"
        rejected.append(f"{f.checkpoint_id}: {why}")
    return tuple(rejected)


def _fingerprint(outcome: Outcome, e: Evidence) -> str | None:
    if outcome is Outcome.GATES_RED:
        red = sorted((g.name, g.fingerprint) for g in e.required_gates if not g.passed)
        return _digest("gates", *(f"{n}:{fp}" for n, fp in red))
    if outcome is Outcome.AGENT_ERROR:
        return _digest("error", str(e.signals.exit_code), e.signals.error or "")
    if outcome is Outcome.NO_PROGRESS:
        return _digest("no-progress", e.next_checkpoint or "")
    return None


def _hint_notes(e: Evidence, outcome: Outcome) -> list[str]:
    """Say so when the model's own account contradicts the evidence; never decisive."""
    h = e.signals.hints
    notes = []
    if h.claimed_done and outcome not in (Outcome.ADVANCED,):
        notes.append(f"the agent claimed it was done; the evidence says {outcome.value} (a claim is a hint, not a verdict)")
    if h.result_subtype == "success" and outcome in (Outcome.LIMIT_BACKOFF, Outcome.AGENT_ERROR, Outcome.NEEDS_HUMAN):
        notes.append("the backend's result said `success`; it is overruled by the evidence")
    notes += [f"usage report bounded: {n}" for n in e.signals.usage_notes]  # what the record shows is not what was said
    if e.deleted_tests:  # a red gate can be turned green by deleting what it runs: a human should look
        notes.append(f"the session deleted {len(e.deleted_tests)} test file(s): " + ", ".join(e.deleted_tests[:10])
                     + ("..." if len(e.deleted_tests) > 10 else "")
                     + "; check that the gates still test what they should (list them under `protected:` to forbid it)")
    return notes


def _all_failed(e: Evidence) -> bool:
    s = e.signals
    if e.work_commits:
        return False
    if s.tool_calls and s.tool_failures >= s.tool_calls:
        return True
    return s.exit_kind in _FAILED_KINDS


def classify(evidence: Evidence) -> Verdict:
    """The outcome of one session, from evidence only. First matching row wins."""
    for rule in RULES:
        reasons = rule.matches(evidence)
        if reasons:
            break
    else:  # pragma: no cover - row 11 always matches
        raise AssertionError("the outcome table has no default row")
    # A checkpoint is credited exactly when the verdict is Advanced: a genuine flip in a session that
    # matched an earlier row (an AgentError after the work, say) is not listed as advanced, and is
    # rejected and reverted, so the record and the pushed tick never disagree with the outcome.
    genuine = _genuine_flips(evidence) if rule.outcome is Outcome.ADVANCED else []
    signals = evidence.signals
    return Verdict(
        outcome=rule.outcome,
        blame=rule.blame,
        rule=rule.row,
        # bounded whatever the agent wrote (runner.core.bounds): the record and every report quote these
        reasons=bound_list(reasons, "reason(s)") + bound_list(_hint_notes(evidence, rule.outcome), "note(s)"),
        observed_at=evidence.observed_at,
        fingerprint=_fingerprint(rule.outcome, evidence),
        transient=rule.row == 3,
        reset_at=signals.reset_at if rule.row == 2 else None,
        advanced=tuple(f.checkpoint_id for f in genuine),
        rejected_flips=_rejected_flips(evidence, genuine, rule.outcome),
        # no output from the agent's work (a CLI's start-up lines are not its work, see SessionSignals), and
        # nothing committed: a session that committed produced something, whatever it printed
        zero_output=(rule.outcome in (Outcome.STALLED, Outcome.TIMED_OUT) and signals.output_bytes == 0
                     and not evidence.commits),
        agent_session_id=signals.agent_session_id,
        all_failed=_all_failed(evidence),
    )
