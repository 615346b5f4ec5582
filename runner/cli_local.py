"""Local subcommands: `session`, `run`, `status`. They register with `runner.cli.command`."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

from runner.actions import Wait, describe, short
from runner.cli import command
from runner.term import err, out

# The session machinery (git, httpx, jinja2...) is imported inside the commands that need it,
# so `plan-runner validate` and `--help` start fast.
EXIT_FINISHED, EXIT_PARKED = 0, 3


class Progress:
    """Live progress on the terminal: session, kind, elapsed, tokens, last tool, gates, outcomes.

    On a terminal the status line is redrawn every second (the elapsed time moves while a quiet
    agent thinks); elsewhere only the events are printed, one line each."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.session = ""
        self.tokens = "0"
        self.tool = "-"
        self.waiting: str | None = None
        self.status = err.status("starting")
        self._stopped = threading.Event()
        if self.status:
            threading.Thread(target=self._tick, name="progress", daemon=True).start()

    def _tick(self) -> None:
        while not self._stopped.wait(1.0):
            if self.session and self.waiting is None:
                self._redraw()

    def _redraw(self) -> None:
        if self.status and not self._stopped.is_set():
            elapsed = time.monotonic() - self.started
            self.status.update(f"session {self.session} · {elapsed:5.0f}s · {self.tokens} tokens · last tool {self.tool}")

    def event(self, kind: str, detail: str) -> None:
        self.waiting = None
        if kind == "session":
            self.started, self.session, self.tokens, self.tool = time.monotonic(), detail, "0", "-"
            err.say(f"session {detail}", "bold")
        elif kind == "tokens":
            self.tokens = detail
        elif kind == "tool":
            self.tool = detail
        elif kind == "gate":
            err.say(f"  gate {detail}")
        elif kind in ("outcome", "agent", "advisor", "reconciled", "isolation", "warning", "setup"):
            err.say(f"  {kind}: {detail}")
        self._redraw()

    def wait(self, action: Wait, left: float) -> None:
        text = f"waiting {left:5.0f}s: {action.reason} (Ctrl-C stops; state is saved)"
        self.waiting = text
        if self.status:
            self.status.update(text)
        elif int(left) % 10 == 0 or left < 1:
            err.say(text)

    def stop(self) -> None:
        self._stopped.set()
        if self.status:
            self.status.stop()


def _plan_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", type=Path, help="the plan file, e.g. plans/add-auth.md")
    parser.add_argument("--isolation", choices=("auto", "user", "none"), default=None,
                        help="override the plan's `isolation`: `none` runs the agent and the gates as your own "
                             "user, unprotected (local mode only)")


def session_json(result) -> dict:
    r, s, plan = result.record, result.state, result.plan
    attempts = {}
    for stage in plan.stages:
        budget = plan.stage_attempt_budget(stage)
        attempts[str(stage.number)] = {"used": s.stage_attempts.get(stage.number, 0), "budget": budget}
    return {
        "status": result.status, "plan": plan.id, "message": result.message,
        "outcome": r.outcome.value if r else None, "blame": r.blame.value if r else None,
        "rule": r.rule if r else None, "reasons": list(r.reasons) if r else [],
        "next_action": result.action.model_dump(mode="json") if result.action is not None else None,
        "next": describe(result.action) if result.action is not None else None,
        "attempts": attempts,
        "gates": [g.model_dump(mode="json", exclude={"output_tail"}) for g in result.evidence.gates] if result.evidence else [],
        "work_commits": [c.sha for c in result.evidence.work_commits] if result.evidence else [],
        "rejected_flips": list(r.rejected_flips) if r else [],
        "hints": r.hints.model_dump(mode="json") if r else {},
        "tokens": r.tokens if r else 0, "cost_usd": r.cost_usd if r else None,
        "url": result.url,
    }


def _print_result(result) -> None:
    if result.record is None:
        err.say(result.message)
        return
    r = result.record
    err.say(f"session {r.n}: {r.outcome.value} (blame {r.blame.value}) → {result.message}", "bold")
    for reason in r.reasons:
        err.say(f"  - {reason}")


def _session_arguments(parser: argparse.ArgumentParser) -> None:
    _plan_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the session record as JSON on stdout")
    parser.add_argument("--dry-run", action="store_true", help="print the next action instead of running it")
    parser.add_argument("--local", action="store_true",
                        help="inside GitHub Actions, run locally anyway (no dispatch, issue or pull request)")


@command("session", help="run exactly one session of a plan (locally, or as a GitHub Actions job)",
         arguments=_session_arguments)
def cmd_session(args: argparse.Namespace) -> int:
    if os.environ.get("GITHUB_ACTIONS") == "true" and not args.local and not args.dry_run:
        # In a job, a session is the action's session mode: GitHub drives dispatch, parking, the PR.
        from runner.action import run_action

        return run_action(dict(os.environ, PLAN_RUNNER_PLAN=str(args.plan)), mode="session")
    from runner.local import local_drivers, local_workspace
    from runner.policy import decide_start
    from runner.session import Session

    ws = local_workspace(args.plan, isolation=args.isolation)
    drivers = local_drivers(ws)
    if args.dry_run:
        s = Session(ws, drivers)
        action = decide_start(s.state, s.plan)
        print(json.dumps({"plan": s.plan.id, "next": describe(action), "next_action": action.model_dump(mode="json")},
                         indent=2) if args.json else describe(action))
        return 0
    progress = Progress()
    ws.on_event = progress.event
    try:
        from runner.step import run_session

        result = run_session(ws, drivers)
    finally:
        progress.stop()
    if args.json:
        print(json.dumps(session_json(result), indent=2))
    else:
        _print_result(result)
    return EXIT_PARKED if result.status == "parked" else 0


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    _plan_argument(parser)
    parser.add_argument("--max-wait", type=float, default=None, metavar="SECONDS",
                        help="stop (exit 4) instead of waiting out a backoff longer than this")


def print_sessions_table(state_entries, title: str) -> None:
    from runner.ledger import SessionRecord

    rows = []
    for e in state_entries:
        if isinstance(e, SessionRecord):
            red = [g.name for g in e.gates if g.required and not g.passed]
            gates = ("red: " + ", ".join(red)) if red else ("green" if e.gates else "-")
            rows.append((str(e.n), e.kind.value, e.checkpoint or "-", e.outcome.value, e.blame.value,
                         str(e.tokens), gates, short(e.next_action) if e.next_action else "-"))
    out.table(title, ("#", "kind", "checkpoint", "outcome", "blame", "tokens", "gates", "next"), rows,
              no_wrap=("outcome", "kind"))


@command("run", help="run a plan's sessions until it finishes or parks (exit 0 finished, 3 parked, 4 waiting)",
         arguments=_run_arguments)
def cmd_run(args: argparse.Namespace) -> int:
    from runner.local import local_drivers, local_workspace, run_loop

    ws = local_workspace(args.plan, isolation=args.isolation)
    drivers = local_drivers(ws)
    progress = Progress()
    ws.on_event = progress.event
    try:
        code, result = run_loop(ws, drivers, max_wait_s=args.max_wait, on_result=_print_result, on_wait=progress.wait)
    finally:
        progress.stop()
    entries, _ = drivers.store.read(result.plan.id)
    print_sessions_table(entries, f"plan {result.plan.id}")
    if code == EXIT_PARKED:
        out.say(result.report or "")
        err.say(f"parked: {result.message}\nreport: {result.url}", "bold red")
    elif code == EXIT_FINISHED:
        err.say(result.message + (f"\nreport: {result.url}" if result.url else ""), "bold green")
    else:
        err.say(f"stopped: {result.message}; run again later (the state is saved)")
    return code


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plans", nargs="*", type=Path, help="plan files (default: plans/*.md)")
    parser.add_argument("--json", action="store_true")


@command("status", help="every plan's stage, checkpoints, attempts left, last outcome and what happens next",
         arguments=_status_arguments)
def cmd_status(args: argparse.Namespace) -> int:
    from runner.status import plan_statuses

    rows = plan_statuses(args.plans or sorted(p for p in Path("plans").glob("*.md") if not p.name.endswith(".handoff.md")))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    out.table("plan-runner status", ("plan", "stage", "done", "attempts left", "sessions", "last outcome", "next"),
              [(r["plan"], r["stage"], f"{r['done']}/{r['checkpoints']}", str(r["attempts_left"]),
                str(r["sessions"]), r["last_outcome"] or "-", r["next"]) for r in rows])
    return 0


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=None, help="where to create the demo repository (default: a temp dir)")


@command("demo", help="run a complete, offline, realistic plan in a temporary repository", arguments=_demo_arguments)
def cmd_demo(args: argparse.Namespace) -> int:
    from runner.demo import run_demo

    return run_demo(args.dir)
