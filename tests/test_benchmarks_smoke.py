"""Keep the benchmark scripts working: their fast parts run end to end on tiny inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.sim_loops import run_claim_driven, run_naive, run_plan_runner
from benchmarks.sim_world import FaultModel, generate_plans
from benchmarks.simulate import bench_loop

ROOT = Path(__file__).resolve().parent.parent


def test_simulator_is_deterministic_for_a_seed():
    """The same seed gives the same figures for every loop, run after run."""
    assert bench_loop(30, seed=7)["loops"] == bench_loop(30, seed=7)["loops"]


def test_simulated_plan_runner_never_marks_a_checkpoint_done_that_is_not():
    """Through the real policy, no checkpoint is falsely marked done and no attempt is burned by weather."""
    faults = FaultModel()
    runs = [run_plan_runner(t, 3, faults) for t in generate_plans(40, 3, faults)]
    assert sum(r.false_done for r in runs) == 0
    assert sum(r.attempts_burned_env for r in runs) == 0
    assert sum(r.finished_checkpoints for r in runs) > 0


def test_baselines_are_fooled_by_the_same_world():
    """The claim-driven loop marks checkpoints done without work; the naive loop burns attempts on weather."""
    faults = FaultModel()
    truths = generate_plans(40, 3, faults)
    claim = [run_claim_driven(t, 3, faults) for t in truths]
    naive = [run_naive(t, 3, faults) for t in truths]
    assert sum(r.false_done for r in claim) > 0
    assert sum(r.attempts_burned_env for r in naive) > 0


@pytest.mark.integration
def test_run_py_quick_prints_a_table_and_writes_json(tmp_path):
    """`run.py --quick --only loop` prints the table and writes the figures as JSON."""
    out = tmp_path / "latest.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--only", "loop",
                           "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "target: zero false done" in proc.stdout
    figures = json.loads(out.read_text())
    assert figures["parts"]["loop"]["loops"]["plan-runner"]["plans"] == 300
    assert figures["machine"]["cores"] >= 1


@pytest.mark.integration
def test_state_benchmark_counts_one_fetch_per_tick_and_no_lost_plan(tmp_path):
    """The state benchmark's network and concurrency parts run on tiny inputs: a tick over 6 plans fetches once,
    and 3 plans run at once in separate clones all advance with nothing lost."""
    from benchmarks.state_bench import bench_concurrent, bench_network

    (tmp_path / "n").mkdir()
    (tmp_path / "c").mkdir()
    net = bench_network(tmp_path / "n", 6)
    assert net["tick_fetches"] == 1 and net["session_status"] == "ran"
    assert 1 <= net["session_network_ops"] <= 8
    many = bench_concurrent(tmp_path / "c", 3)
    assert many["advanced"] == 3 and many["lost"] == 0
