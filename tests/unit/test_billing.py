"""The billing figures (benchmarks/billing.py) come from the workflow files `plan-runner init` writes: 0 minutes a
month while no plan waits, a wait's ticks only while it waits (plus one), sessions their own minutes; the old single
workflow's 1,440 ticks. Mutating a rule in the files (a schedule back in the session workflow, the reconcile `if:`
without its conclusion test) changes the figures."""

from __future__ import annotations

from pathlib import Path

from benchmarks.billing import Files, read_files, scenarios
from runner.adapters.init import WORKFLOW_PATH, write_init

ROOT = Path(__file__).resolve().parents[2]


def figures(files: Files) -> dict[str, object]:
    return {name: month for name, month in scenarios(files)}


def test_nothing_is_billed_while_nothing_waits_and_a_wait_pays_its_ticks(tmp_path):
    write_init(tmp_path, action_ref="./")
    files = read_files(tmp_path)
    assert files.clock_slots == (17, 47) and not files.session_has_schedule
    got = figures(files)
    for name in ("idle repository (no plan state)", "a finished plan", "a plan parked for a human for two weeks"):
        assert got[name].billed() == 0, name
    assert got["idle, the month the files are committed"].billed() == 1  # the first tick turns the clock off
    wait = got["a plan waiting out a 5-hour usage limit (its 2 sessions)"]
    assert wait.ticks == 5 * 2 + 2 and wait.reconciles == 0  # and the tick after the second session
    big = got["a 30-session plan (one killed run, reconciled)"]
    # the clock runs while a session does (a job that dies is found by its tick): one tick a session here, the one
    # after it that turns the clock off; only the first session's run (a person's dispatch) is a workflow_run event
    assert big.ticks == 30 and big.reconciles == 0 and big.skipped == 1 and len(big.sessions) == 30


def test_the_old_single_workflow_bills_every_tick(tmp_path):
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / WORKFLOW_PATH).write_text((ROOT / "tests/data/old-single-workflow.yml").read_text())
    got = figures(read_files(tmp_path))
    assert got["idle repository (no plan state)"].billed() == 1440
    assert got["a plan parked for a human for two weeks"].ticks == 1440


def test_a_reconcile_if_without_its_conclusion_test_would_bill_a_successful_run(tmp_path):
    write_init(tmp_path, action_ref="./")
    rec = tmp_path / ".github/workflows/plan-runner-reconcile.yml"
    rec.write_text(rec.read_text().replace("&& github.event.workflow_run.conclusion != 'success'", ""))
    big = figures(read_files(tmp_path))["a 30-session plan (one killed run, reconciled)"]
    assert big.reconciles == 1
    assert big.skipped == 0
