"""The one builder of `SessionSignals`: every backend's account of a session goes through `session_signals`.

What is the same for every backend is decided here once: the total is input + output tokens; a reset time is
kept only with a rate limit (a reset beside a crash would make the policy wait for nothing); the process's exit
code, output and duration come from the supervisor's `ProcessExit` unless the backend knows better; a cost is
`estimated` unless the backend read it from the provider; a backend that never started (a bad resume id, an
exhausted script) is one call with its error. Tokens, cost and duration are bounded here, where every
backend's report of them arrives (`runner.core.bounds.bound_cost`, `bound_count`): a cost of `Infinity`, `NaN`
or `1e308`, a count of 10**400 tokens is recorded bounded, and `usage_notes` says what was reported (the
verdict quotes them among its notes).
"""

from __future__ import annotations

from datetime import datetime

from runner.adapters.sandbox.supervise import ProcessExit
from runner.core.bounds import bound_cost, bound_count, bound_seconds
from runner.core.evidence import ExitKind, Hints, SessionSignals

_UNSET = object()


def session_signals(
    backend: str,
    kind: ExitKind,
    *,
    error: str | None = None,
    process: ProcessExit | None = None,
    exit_code: int | None | object = _UNSET,
    session_id: str | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cost_usd: float | None = None,
    cost_estimated: bool | None = None,
    cost_lower_bound: bool = False,
    reset_at: datetime | None = None,
    output_bytes: int | None = None,
    nudges: int = 0,
    tool_calls: int = 0,
    tool_failures: int = 0,
    last_tool: str | None = None,
    duration_s: float | None = None,
    hints: Hints | None = None,
    usage_notes: tuple[str, ...] = (),
) -> SessionSignals:
    """`cost_estimated` None: estimated whenever there is a cost (a list-price estimate, the usual case)."""
    if exit_code is _UNSET:
        exit_code = process.returncode if process is not None else None
    cost, cost_note = bound_cost(cost_usd, f"the {backend} backend reported a cost")
    input_tokens, input_note = bound_count(input_tokens, f"the {backend} backend's input tokens")
    output_tokens, output_note = bound_count(output_tokens, f"the {backend} backend's output tokens")
    return SessionSignals(
        backend=backend,
        exit_kind=kind,
        exit_code=exit_code,
        agent_session_id=session_id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        cost_usd=cost,
        cost_estimated=(cost is not None) if cost_estimated is None else cost_estimated,
        cost_lower_bound=cost_lower_bound,
        reset_at=reset_at if kind is ExitKind.RATE_LIMIT else None,
        error=error,
        output_bytes=output_bytes if output_bytes is not None else (process.output_bytes if process else 0),
        nudges=nudges,
        tool_calls=tool_calls,
        tool_failures=tool_failures,
        last_tool=last_tool,
        duration_s=bound_seconds(duration_s if duration_s is not None else (process.duration_s if process else 0.0)),
        hints=hints if hints is not None else Hints(),
        usage_notes=usage_notes + tuple(n for n in (cost_note, input_note, output_note) if n is not None),
    )
