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

from runner.core.evidence import GateResult
from runner.core.plan import GateConfig

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


NO_CI_AFTER_S = 120.0  # webhook CI (not Actions) reports within this on a push; Actions never does
# Each poll is two requests (check runs, statuses) against the job token's 1,000 requests an hour per repository
# (GitHub's REST rate limits for GITHUB_TOKEN). The wait between polls grows by half each time, from the gate's
# `poll_s` up to MAX_POLL_S: a quick answer is seen quickly, an hour-long CI costs ~130 requests, not 720.
POLL_BACKOFF = 1.5
MAX_POLL_S = 60.0


def poll_waits(poll_s: float) -> Callable[[], float]:
    """The successive waits between polls: poll_s, 1.5 x, ... up to MAX_POLL_S (never below poll_s)."""
    wait = [poll_s]

    def next_wait() -> float:
        now = wait[0]
        wait[0] = max(poll_s, min(MAX_POLL_S, wait[0] * POLL_BACKOFF))
        return now
    return next_wait


def no_ci_for_token_pushes(names: Sequence[str], sha: str, waited_s: float) -> str:
    return (f"nothing reported any check run or status for {sha[:12]} in {waited_s:g} s, and the work branch was "
            "pushed with the job's GITHUB_TOKEN: GitHub starts no workflow for such a push, so "
            f"{', '.join(names)} cannot appear. Fix: give the action a token whose pushes start workflows, "
            "a GitHub App installation token or a fine-grained personal access token with `contents: write` "
            "(`push-token: ${{ secrets.PLAN_RUNNER_PUSH_TOKEN }}`), or make this gate a `run:` command "
            "plan-runner runs itself; then answer `/plan-runner retry`")


def collect_checks_gate(request: Request, gate: GateConfig, sha: str, *, timeout_s: float, poll_s: float,
                        clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep,
                        pushed_with_job_token: bool = False, no_ci_after_s: float = NO_CI_AFTER_S) -> GateResult:
    """`pushed_with_job_token`: the commit reached GitHub through a GITHUB_TOKEN push, which starts no
    workflow; when nothing at all reports on the commit for `no_ci_after_s`, the gate needs a person
    (`needs_human`) instead of waiting out its timeout and counting red against the agent."""
    names = tuple(gate.checks or ())
    started = clock()
    next_wait = poll_waits(poll_s)
    while True:
        runs, statuses = _fetch(request, sha)
        states = classify_checks(names, runs, statuses)
        red = [s for s in states if s.state == "red"]
        waiting = [s for s in states if s.state in ("pending", "missing")]
        elapsed = clock() - started
        if pushed_with_job_token and waiting and not runs and not statuses and elapsed >= min(no_ci_after_s, timeout_s):
            return GateResult(name=gate.name, required=gate.required, kind="checks", passed=False,
                              duration_s=round(elapsed, 3), output_tail="\n".join(f"{s.name}: {s.detail}" for s in states),
                              fingerprint="checks:no-ci-for-token-pushes",
                              needs_human=no_ci_for_token_pushes(names, sha, round(elapsed)))
        if red or not waiting or elapsed >= timeout_s:
            break
        sleep(max(0.0, min(next_wait(), timeout_s - elapsed)))
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
