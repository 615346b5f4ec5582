"""A `checks:` gate: wait, bounded, for named check runs and commit statuses of a commit.

`classify_checks` is pure (API JSON in, one state per name out);
`collect_checks_gate` polls GitHub until every name is decided, one is red, or
the time is up, and returns a `GateResult` like any other gate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.evidence import GateResult
from runner.plan import GateConfig

GREEN_CONCLUSIONS = frozenset({"success", "neutral", "skipped"})
# Everything else that is completed is red: failure, cancelled, timed_out, action_required, stale, ...
GREEN_STATUSES = frozenset({"success"})
RED_STATUSES = frozenset({"failure", "error"})
MAX_PAGES = 10  # 1,000 check runs on one commit is already far beyond any real workflow

Request = Callable[..., tuple[dict[str, Any], Any]]


@dataclass(frozen=True)
class CheckState:
    name: str
    state: str  # green | red | pending | missing
    detail: str  # the conclusion / status as GitHub gave it


def classify_checks(names: Sequence[str], check_runs: Sequence[dict[str, Any]],
                    statuses: Sequence[dict[str, Any]]) -> tuple[CheckState, ...]:
    """One state per wanted name; a check run of that name wins over a commit status of that context."""
    latest_runs: dict[str, dict[str, Any]] = {}
    for run in check_runs:
        name = run.get("name")
        # A re-run creates a new check run with a larger id; only the newest counts.
        if isinstance(name, str) and (name not in latest_runs or _id(run) > _id(latest_runs[name])):
            latest_runs[name] = run
    latest_status: dict[str, dict[str, Any]] = {}
    for status in statuses:
        context = status.get("context")
        if isinstance(context, str) and (context not in latest_status or _id(status) > _id(latest_status[context])):
            latest_status[context] = status
    out = []
    for name in names:
        if name in latest_runs:
            run = latest_runs[name]
            if run.get("status") != "completed":
                out.append(CheckState(name, "pending", str(run.get("status"))))
            else:
                conclusion = str(run.get("conclusion"))
                out.append(CheckState(name, "green" if conclusion in GREEN_CONCLUSIONS else "red", conclusion))
        elif name in latest_status:
            state = str(latest_status[name].get("state"))
            verdict = "green" if state in GREEN_STATUSES else "red" if state in RED_STATUSES else "pending"
            out.append(CheckState(name, verdict, state))
        else:
            out.append(CheckState(name, "missing", "not reported"))
    return tuple(out)


def _id(item: dict[str, Any]) -> int:
    value = item.get("id")
    return value if isinstance(value, int) else -1


def _fetch(request: Request, sha: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    for page in range(1, MAX_PAGES + 1):
        _, data = request("GET", f"/commits/{sha}/check-runs", parameters={"per_page": 100, "page": page})
        batch = data.get("check_runs") or []
        runs.extend(batch)
        if len(batch) < 100 or len(runs) >= int(data.get("total_count") or 0):
            break
    _, combined = request("GET", f"/commits/{sha}/status", parameters={"per_page": 100})
    return runs, list(combined.get("statuses") or [])


def collect_checks_gate(request: Request, gate: GateConfig, sha: str, *, timeout_s: float, poll_s: float,
                        clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep) -> GateResult:
    names = tuple(gate.checks or ())
    started = clock()
    while True:
        runs, statuses = _fetch(request, sha)
        states = classify_checks(names, runs, statuses)
        red = [s for s in states if s.state == "red"]
        waiting = [s for s in states if s.state in ("pending", "missing")]
        elapsed = clock() - started
        if red or not waiting or elapsed >= timeout_s:
            break
        sleep(max(0.0, min(poll_s, timeout_s - elapsed)))
    lines = [f"{s.name}: {s.detail}" for s in states]
    error = None
    timed_out = bool(waiting) and not red
    if timed_out:
        error = (f"after {timeout_s:g} s still waiting for " +
                 ", ".join(f"{s.name} ({s.detail})" for s in waiting) +
                 ": check that these names match the check runs / statuses of the commit exactly")
    failing = red or (waiting if timed_out else [])
    return GateResult(
        name=gate.name,
        required=gate.required,
        kind="checks",
        passed=not red and not waiting,
        duration_s=round(clock() - started, 3),
        output_tail="\n".join(lines),
        fingerprint="checks:" + ",".join(sorted(f"{s.name}={s.state}" for s in failing)),
        timed_out=timed_out,
        error=error,
    )
