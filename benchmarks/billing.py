"""Billable minutes a month, computed from the workflow files `plan-runner init` writes and a simulated month.

GitHub's billing (docs.github.com, "About billing for GitHub Actions"): a private repository's jobs on standard
hosted runners are billed by the minute, each job rounded up to a whole minute (Linux: 1x); a job skipped by its
`if:` runs on no runner and is billed nothing; public repositories are free. The free plan includes 2,000
minutes a month.

The table is a discrete-event model of what GitHub starts, read from the files (not from plan-runner's code):
* the clock's `schedule` fires at every cron slot (`ticks_per_hour` of its cron) while the workflow is enabled, one
  tick job each; the session workflow has no `schedule` (checked: a file with one is the old single workflow,
  whose tick fires at every slot whatever waits);
* a completed run of the session workflow is a `workflow_run` event for the reconcile file only when a person
  started it (the plan's first session): GitHub starts no workflow for the events of the job's token but the two
  dispatches, and every later session is dispatched by the job before it. The reconcile job runs only when its
  `if:` holds (evaluated here for the run's trigger and conclusion);
* plan-runner's clock rule (runner/drivers/actions/tick.py `needs_clock`, `set_clock`; tests/integration/test_action_clock.py
  shows it against the test server): a job that leaves a plan waiting, or a session that starts, enables the clock;
  it stays on while a session runs or is dispatched (so a job that dies is reconciled with no person); the first
  tick that finds no plan waiting and no session running or dispatched disables it; the commit of new files
  enables it once. A session dispatches the next, so a plan's sessions back to back keep the clock on throughout.

Scenarios, a 30-day month: an idle repository; a finished plan; a plan parked for a human for two weeks; a plan
waiting out a five-hour usage limit; a 30-session plan (sessions of `SESSION_MINUTES` of agent and gates plus the
job's set-up, `SETUP_SECONDS`, each billed rounded up). A tick job is billed 1 minute (checkout, install, one
fetch: well under 60 s, docs/performance.md section 5).

Run: `python benchmarks/billing.py` (prints the table docs/performance.md and docs/github-actions.md quote).

`python benchmarks/billing.py --measured` counts instead of modelling: a month of session and tick jobs run through
plan-runner's real code against the test server (`measured_month`; tests/integration/test_billing_measured.py).
"""

from __future__ import annotations

import math
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.adapters.init import (  # noqa: E402
    CLOCK_PATH, RECONCILE_PATH, WORKFLOW_PATH, InitOptions, ticks_per_hour, write_init)

MONTH_MINUTES = 30 * 24 * 60
TICK_JOB_MINUTES = 1
SESSION_MINUTES = 12.0  # agent and gates of one session (an assumption: the sessions pay for themselves either way)
SETUP_SECONDS = 25.0  # checkout, plan-runner's install and the agent CLI's, cold (docs/performance.md section 5)
FREE_PLAN_MINUTES = 2000


@dataclass(frozen=True)
class Files:
    """What the simulation reads from the workflow files."""

    session_has_schedule: bool
    clock_slots: tuple[int, ...]  # minutes of the hour the clock's tick fires (empty: no clock file)
    reconcile_if: str  # the reconcile job's `if:` ("" when there is no reconcile file)

    def reconcile_runs(self, event: str, conclusion: str) -> bool:
        """The reconcile job's `if:` for a completed run: it compares `workflow_run.event` and `.conclusion`."""
        if not self.reconcile_if:
            return False
        env = {"github.event.workflow_run.event": event, "github.event.workflow_run.conclusion": conclusion}
        expr = self.reconcile_if
        for name, value in env.items():
            expr = expr.replace(name, repr(value))
        if not re.fullmatch(r"[\s'a-z_]+(?:==|!=)[\s'a-z_]+(?:\s*&&[\s'a-z_]+(?:==|!=)[\s'a-z_]+)*", expr.strip()):
            raise ValueError(f"the reconcile job's `if:` is not a conjunction of comparisons: {self.reconcile_if!r}")
        return bool(eval(expr.replace("&&", " and ")))  # noqa: S307 - checked above: quoted words and comparisons


def slots(cron: str) -> tuple[int, ...]:
    minute = cron.split()[0]
    out: list[int] = []
    for part in minute.split(","):
        if part.startswith("*/"):
            out += range(0, 60, int(part[2:]))
        elif "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        else:
            out.append(int(part))
    assert len(out) == ticks_per_hour(cron)
    return tuple(sorted(out))


def read_files(repo: Path) -> Files:
    def load(path: str) -> dict | None:
        file = repo / path
        return yaml.safe_load(file.read_text()) if file.exists() else None

    session, clock, rec = load(WORKFLOW_PATH), load(CLOCK_PATH), load(RECONCILE_PATH)
    on = session[True]
    session_cron = [s["cron"] for s in on.get("schedule") or ()]
    clock_cron = [s["cron"] for s in (clock or {}).get(True, {}).get("schedule") or ()]
    return Files(session_has_schedule=bool(session_cron),
                 clock_slots=slots((clock_cron or session_cron)[0]) if clock_cron or session_cron else (),
                 reconcile_if=" ".join(rec["jobs"]["reconcile"]["if"].split()) if rec else "")


@dataclass
class Month:
    """A simulated month: the jobs GitHub starts and what they bill."""

    files: Files
    first_month: bool = False  # the month the files are committed (the commit enables the clock once)
    ticks: int = 0
    reconciles: int = 0
    skipped: int = 0
    sessions: list[float] = field(default_factory=list)

    def billed(self) -> int:
        return (self.ticks + self.reconciles) * TICK_JOB_MINUTES + sum(math.ceil(m) for m in self.sessions)

    def run(self, waits: list[tuple[int, int]], sessions: list[int], failed: frozenset[int] = frozenset()) -> Month:
        """`waits`: (start, end) minutes of the month a plan waits on a clock; `sessions`: minutes a session job
        starts (each ends `SESSION_MINUTES` + set-up later); `failed`: indexes of sessions whose run did not
        succeed."""
        enabled = self.first_month and not self.files.session_has_schedule
        waits = sorted(waits)
        length = SESSION_MINUTES + SETUP_SECONDS / 60
        running = [(start, start + math.ceil(length)) for start in sessions]
        for i, _start in enumerate(sessions):
            self.sessions.append(length)
            if i > 0:  # dispatched by the job before it: its end is no event (GitHub's rule for the job's token)
                continue
            if self.files.reconcile_runs("workflow_dispatch", "failure" if i in failed else "success"):
                self.reconciles += 1
            else:
                self.skipped += 1
        busy = waits + running
        for minute in range(MONTH_MINUTES):
            for start, _end in busy:
                if start == minute:
                    enabled = True  # the job that leaves the plan waiting, or a session that starts, enables it
            if minute % 60 not in self.files.clock_slots:
                continue
            if self.files.session_has_schedule:  # the old single workflow: every slot, whatever waits
                self.ticks += 1
                continue
            if not enabled:
                continue
            self.ticks += 1
            if not any(start <= minute < end for start, end in busy):
                enabled = False  # the tick that finds no plan waiting and no session running disables it
        return self


def scenarios(files: Files) -> list[tuple[str, Month]]:
    hour = 60
    day = 24 * hour
    wait_start = 3 * day + 10 * hour + 5
    return [
        ("idle repository (no plan state)", Month(files).run([], [])),
        ("idle, the month the files are committed", Month(files, first_month=True).run([], [])),
        ("a finished plan", Month(files).run([], [])),
        ("a plan parked for a human for two weeks", Month(files).run([], [])),
        ("a plan waiting out a 5-hour usage limit (its 2 sessions)",
         Month(files).run([(wait_start, wait_start + 5 * hour)], [wait_start - 13, wait_start + 5 * hour + 20])),
        ("a 30-session plan (one killed run, reconciled)",
         Month(files).run([], [d * 12 * hour for d in range(30)], failed=frozenset({7}))),
    ]


def report(files: Files) -> list[tuple[str, Month]]:
    return scenarios(files)


def main() -> int:
    if sys.argv[1:] == ["--measured"]:
        print_measured()
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        new = Path(tmp) / "new"
        new.mkdir()
        write_init(new, action_ref="./")
        old = Path(tmp) / "old"
        (old / ".github/workflows").mkdir(parents=True)
        (old / WORKFLOW_PATH).write_text((ROOT / "tests/data/old-single-workflow.yml").read_text())
        before, after = read_files(old), read_files(new)
    print(f"session: {SESSION_MINUTES:g} min of agent and gates + {SETUP_SECONDS:g} s set-up, billed rounded up; "
          f"a tick job {TICK_JOB_MINUTES} min; clock slots {after.clock_slots} an hour\n")
    print("| month | before: jobs (ticks + sessions) | before: billable min | after: jobs billed (ticks + "
          "reconciles + sessions; skipped) | after: billable min |")
    print("|---|---|---|---|---|")
    for (name, b), (_, a) in zip(report(before), report(after)):
        print(f"| {name} | {b.ticks} + {len(b.sessions)} | {b.billed():,} | {a.ticks} + {a.reconciles} + "
              f"{len(a.sessions)}; {a.skipped} skipped | **{a.billed():,}** |")
    print(f"\nfree plan: {FREE_PLAN_MINUTES:,} minutes a month")
    return 0



# --- measured: the same month run through plan-runner's real code -------------------------------------------------

SLOT_MINUTES = 60 // ticks_per_hour(InitOptions().cron)  # a tick interval of the clock `init` writes


def measured_month(root: Path, wait_slots: int = 10, max_ticks: int = 60) -> dict[str, object]:
    """The jobs GitHub would start in a simulated month, counted from plan-runner's real code against the test server:
    every job is `run_action` in-process (session, tick), the clock's schedule fires at a slot only while the test
    server holds the clock workflow enabled (PUT .../enable and .../disable by the real code), and a session job runs
    for every dispatch the server recorded. The plan (the greeter of tests/e2e_act/world.py, script backend): session
    1 advances, session 2 hits a usage limit resetting `wait_slots - 1/2` tick intervals after the month's first
    slot, session 3 advances, session 4 parks for a human, who never answers: the rest of the month is a parked plan.

    The month's time is plan-runner's own clock (runner/adapters/clock.py's testing switch, which every decision
    reads: the limit's reset, the ledger's times, the tick's wake-up): the jobs of slot k run at noon of today plus
    k tick intervals, so the wait (4 h 45 min by default) is real to plan-runner, no test or benchmark waits for it,
    and a loaded machine cannot shift a tick into another slot. Returns the counts; more than `max_ticks` tick jobs
    is an error (a clock that never turns off would tick 1,440 times)."""
    import os
    from datetime import datetime, timedelta, timezone
    from unittest.mock import patch

    from runner.adapters import clock as wallclock
    from tests.e2e_act import world as w
    from tests.integration.test_action_modes import Jobs
    from tests.servers.github import GitHubServer

    noon = datetime.now(timezone.utc).replace(hour=12, minute=0, second=0, microsecond=0)

    def at(slot: int) -> None:  # plan-runner's clock reads slot `slot`'s instant (and runs on from it)
        os.environ[wallclock.ENV] = (noon + timedelta(minutes=slot * SLOT_MINUTES)).strftime("%Y-%m-%dT%H:%M:%SZ")

    reset = noon + timedelta(minutes=(wait_slots - 0.5) * SLOT_MINUTES)
    script = w.SCRIPT.replace("reset_in: 2,", f"reset_at: '{reset.strftime('%Y-%m-%dT%H:%M:%SZ')}',")
    assert script != w.SCRIPT
    clock_env = {"GITHUB_WORKFLOW_REF": f"octo-org/demo/{CLOCK_PATH}@refs/heads/main",
                 "PLAN_RUNNER_SESSION_WORKFLOW": Path(WORKFLOW_PATH).name}
    counts: dict[str, object] = {"ticks": 0, "sessions": 0, "failed_sessions": 0, "outcomes": [], "tick_slots": []}
    clock = Path(CLOCK_PATH).name
    with patch.dict(os.environ), GitHubServer() as srv:  # the clock variable put back afterwards
        jobs = Jobs(root, srv, script=script)
        seen = 0
        pending = 1  # the user's first dispatch (`plan-runner start`)
        for slot in range(MONTH_MINUTES // SLOT_MINUTES):
            at(slot)
            while pending:  # the runs the last tick (or the user) dispatched, before the slot's tick
                pending -= 1
                rc, out, outputs, _, _ = jobs.session()
                counts["sessions"] += 1  # type: ignore[operator]
                counts["failed_sessions"] += rc != 0  # type: ignore[operator]
                counts["outcomes"].append(outputs.get("outcome", "?"))  # type: ignore[union-attr]
                pending += len(srv.dispatches) - seen
                seen = len(srv.dispatches)
            if not srv.schedule_fires(clock):
                continue
            # the tick: still slot `slot` to plan-runner (its clock ran on only by the sessions' real seconds)
            rc, out, outputs, _, _ = jobs.run("schedule", w.schedule_event(), **clock_env)
            if rc != 0:
                raise RuntimeError(out)
            counts["ticks"] += 1  # type: ignore[operator]
            counts["tick_slots"].append(slot)  # type: ignore[union-attr]
            if counts["ticks"] > max_ticks:  # type: ignore[operator]
                raise RuntimeError(f"more than {max_ticks} tick jobs: the clock never turned off")
            pending += len(srv.dispatches) - seen
            seen = len(srv.dispatches)
        counts["dispatches"] = len(srv.dispatches)
        counts["parked"] = any(i for i in srv.issues.values() if not i.get("pull"))
    return counts


def print_measured() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        got = measured_month(Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        write_init(Path(tmp), action_ref="./")
        files = read_files(Path(tmp))
    month = Month(files, first_month=True)
    month.ticks = got["ticks"]  # type: ignore[assignment]
    for i, _outcome in enumerate(got["outcomes"]):  # type: ignore[arg-type]
        month.sessions.append(SESSION_MINUTES + SETUP_SECONDS / 60)
        if i > 0:  # dispatched by the job before it: GitHub sends no workflow_run for the job token's run
            continue
        if files.reconcile_runs("workflow_dispatch", "success"):
            month.reconciles += 1
        else:
            month.skipped += 1
    print("measured month (real code, test server): a plan that advances, waits out a usage limit of 10 tick "
          "intervals, advances, then parks for a human for the rest of the month; the month the files are committed")
    print(f"  sessions run {got['sessions']} ({', '.join(got['outcomes'])}), dispatches {got['dispatches']}, "  # type: ignore[arg-type]
          f"parked {got['parked']}")
    print(f"  tick jobs {got['ticks']} at slots {got['tick_slots']}, reconcile jobs {month.reconciles} "
          f"({month.skipped} skipped)")
    print(f"  billable minutes {month.billed()} (sessions of {SESSION_MINUTES:g} min + {SETUP_SECONDS:g} s)")


if __name__ == "__main__":
    raise SystemExit(main())
