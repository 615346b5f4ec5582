"""What a session leaves behind, as raw signals: the world's truth rendered the way a real session shows it.

`sim_world.World.play` decides what really happened in a session (`SessionTruth`); this module
turns that into what any loop can observe of it, and nothing more:

* the agent CLI's stdout, as Claude Code's stream-json lines (a rate limit is the CLI's own
  `"subtype":"success","is_error":true,"api_error_status":429` result and exit code 1; an
  overloaded API is a 529 retry then an error result; a hang is a stream that stops, killed by the
  supervisor; a session cut at the token budget is stopped by the meter);
* how the process ended (`exited`, `stalled`, `stopped`) and its exit code;
* the commits (summary and files) and the plan file's text at the head;
* the handoff file;
* the test gate's successive runs: exit code and output (a flaky gate fails its first run only;
  failing output carries volatile parts, durations and temp paths, that a fingerprint must ignore).

No label (`rate_limit`, `flaky`, `lazy`) crosses this boundary: each loop detects them itself.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from benchmarks.sim_world import PlanTruth, SessionTruth

STALL_MINUTES = 12
SESSION_TOKENS = 600_000


@dataclass(frozen=True)
class RawSession:
    lines: tuple[str, ...]  # the CLI's stdout
    end: str  # exited | stalled (no output for stall_minutes: killed) | stopped (token budget reached: stopped)
    returncode: int | None  # None when the supervisor killed it
    duration: timedelta
    commits: tuple[tuple[str, tuple[str, ...]], ...]  # (summary, files), oldest first
    tracker_after: str  # the plan file at the head of the session
    handoff: str | None
    gate_runs: tuple[tuple[int, str], ...]  # (exit code, output) of the `tests` gate's first and second run

    @property
    def stdout(self) -> str:
        return "\n".join(self.lines)


def plan_path(truth: PlanTruth) -> str:
    return f"plans/{truth.id}.md"


def plan_text(truth: PlanTruth, done: set[str], max_sessions: int) -> str:
    """The plan file as a user writes it (front matter, stages, checkpoints), `done` ticked."""
    lines = ["---", f"branch: plan-runner/{truth.id}", "agent:", "  backend: claude-code",
             f"  stall_minutes: {STALL_MINUTES}", f"  session_tokens: {SESSION_TOKENS}",
             "gates:", "  - name: tests", "    run: pytest -q",
             "budget:", f"  max_sessions: {max_sessions}", "---", f"# Plan {truth.id}", ""]
    for s in truth.stages:
        lines.append(f"## Stage {s.number}: Stage {s.number} <!-- sessions: {s.sessions} -->")
        lines += [f"- [{'x' if c.id in done else ' '}] {c.id} Checkpoint {c.id}" for c in s.checkpoints]
        lines.append("")
    return "\n".join(lines)


def tick(text: str, cid: str) -> str:
    return text.replace(f"- [ ] {cid} ", f"- [x] {cid} ", 1)


def _line(**msg) -> str:
    return json.dumps(msg, separators=(",", ":"))


def _init(sid: str) -> str:
    return _line(type="system", subtype="init", session_id=sid, model="claude-sonnet-4-5", tools=["Bash", "Edit"])


def _assistant(sid: str, text: str, tokens: int) -> str:
    return _line(type="assistant", session_id=sid, message={
        "id": f"msg_{sid[:6]}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": None,
        "usage": {"input_tokens": tokens * 9 // 10, "output_tokens": tokens // 10}})


def _tool_round(sid: str, n: int) -> list[str]:
    use = _line(type="assistant", session_id=sid, message={
        "id": f"msg_t{n}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": "pytest -q"}}],
        "usage": {"input_tokens": 1000, "output_tokens": 100}})
    result = _line(type="user", session_id=sid, message={"role": "user", "content": [
        {"tool_use_id": f"toolu_{n}", "type": "tool_result", "content": "ok", "is_error": False}]})
    return [use, result]


def _result(sid: str, text: str, tokens: int, *, is_error: bool = False, status: int | None = None) -> str:
    return _line(type="result", subtype="success", is_error=is_error, api_error_status=status, result=text,
                 session_id=sid, stop_reason="stop_sequence" if is_error else "end_turn",
                 total_cost_usd=round(tokens * 6e-6, 4), num_turns=3,
                 usage={"input_tokens": 0 if is_error else tokens * 9 // 10,
                        "output_tokens": 0 if is_error else tokens // 10})


def _gate_output(r: random.Random, cid: str, failing: str | None) -> str:
    took = f"{r.uniform(1, 40):.2f}s"
    tmp = f"/tmp/pytest-of-runner/pytest-{r.randrange(1, 999)}/test_{cid.replace('.', '_')}0"
    if failing is None:
        return f"........................................ [100%]\n42 passed in {took}\n"
    return (f"....F................................... [100%]\n"
            f"FAILED {failing} - AssertionError: assert 500 == 200 (workdir {tmp})\n"
            f"1 failed, 41 passed in {took}\n")


def render(t: SessionTruth, truth: PlanTruth, cid: str, n: int, tracker_before: str, started: datetime) -> RawSession:
    """The raw signals of session `n` on checkpoint `cid`, whose truth is `t`."""
    r = random.Random(f"raw:{truth.id}:{n}")
    sid = f"{r.getrandbits(32):08x}-{n:04d}-4000-8000-{r.getrandbits(48):012x}"
    tokens = max(t.tokens, 1)
    commits: list[tuple[str, tuple[str, ...]]] = []
    if t.work_commit:
        commits.append((f"Work on {cid}", (f"src/part_{cid.replace('.', '_')}.py", f"tests/test_{cid.replace('.', '_')}.py")))
    after = tracker_before
    if t.flip_done:
        after = tick(tracker_before, cid)
        commits.append((f"Tick {cid}", (plan_path(truth),)))
    handoff = None
    if t.asks_human:
        handoff = f"# Handoff\n\nStuck on {cid}.\n\nHUMAN: which of the two account models should {cid} keep?\n"

    # the gate's two runs (a loop may look at the first only, or re-run a red gate)
    if t.gates_green:
        first = _gate_output(r, cid, "tests/test_net.py::test_upload_timeout" if t.flaky else None)
        runs = ((1 if t.flaky else 0, first), (0, _gate_output(r, cid, None)))
    else:
        failing = f"tests/test_{cid.replace('.', '_')}.py::test_{t.fingerprint.replace('-', '_')}"
        runs = ((1, _gate_output(r, cid, failing)), (1, _gate_output(r, cid, failing)))

    end, code = "exited", 0
    if t.env == "rate_limit":
        lines = [_init(sid)]
        if t.reset_at is not None and r.random() < 0.7:  # a usage window says when it resets; a per-minute one does not
            lines.append(_line(type="rate_limit_event", session_id=sid, rate_limit_info={
                "status": "rejected", "resetsAt": int(t.reset_at.timestamp()), "rateLimitType": "five_hour"}))
        text = "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit"
        lines += [_assistant(sid, text, 0), _result(sid, text, 0, is_error=True, status=429)]
        code = 1
    elif t.env == "transient":
        lines = [_init(sid), _line(type="system", subtype="api_retry", attempt=1, max_retries=1, retry_delay_ms=544,
                                   error_status=529, error="overloaded", session_id=sid)]
        text = "API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"
        lines += [_assistant(sid, text, 0), _result(sid, text, 0, is_error=True, status=529)]
        code = 1
    elif t.env == "stall":
        lines = [] if t.zero_output else [_init(sid), *_tool_round(sid, 1), _assistant(sid, "Looking at the failing test.", tokens)]
        end, code = "stalled", None
    elif t.env == "token_budget":
        lines = [_init(sid), *_tool_round(sid, 1), _assistant(sid, f"Half of {cid} is in place.", SESSION_TOKENS)]
        end, code = "stopped", None
    else:
        if t.asks_human:
            final = f"I need a decision before {cid} can go on. HUMAN: see the handoff."
        elif t.claims_done:
            final = f"All done: {cid} is complete. All tests pass."
        elif t.behaviour == "progress":
            final = f"Made progress on {cid}; the rest is for the next session."
        else:
            final = f"I could not finish {cid}: a test still fails."
        lines = [_init(sid), *_tool_round(sid, 1), *_tool_round(sid, 2), _assistant(sid, final, tokens),
                 _result(sid, final, tokens)]
    return RawSession(lines=tuple(lines), end=end, returncode=code, duration=t.duration, commits=tuple(commits),
                      tracker_after=after, handoff=handoff, gate_runs=runs)
