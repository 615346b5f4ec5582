"""Keep the benchmark scripts working: their fast parts run end to end on tiny inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import child_env
from benchmarks.sim_loops import collect_evidence, run_claim_driven, run_naive, run_plan_runner, run_sensible
from benchmarks.sim_signals import plan_path, plan_text, render
from benchmarks.sim_world import T0, FaultModel, SessionTruth, generate_plans
from benchmarks.simulate import bench_loop
from runner.core.actions import Outcome
from runner.core.outcome import classify
from runner.core.planfile import parse_plan

ROOT = Path(__file__).resolve().parents[2]


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


def _verdict_of(truth_session: SessionTruth):
    """Render one session's raw signals and judge them the way the simulated plan-runner loop does."""
    plan_truth = generate_plans(1, 5, FaultModel())[0]
    cid = plan_truth.checkpoints[0].id
    text = plan_text(plan_truth, set(), 60)
    raw = render(truth_session, plan_truth, cid, 1, text, T0)
    ev = collect_evidence(raw, plan=parse_plan(text, plan_path(plan_truth)), tracker_before=text, n=1,
                          kind="delivery", cid=cid, started=T0)
    return raw, classify(ev)


def test_simulated_rate_limit_is_detected_from_the_cli_stream_not_handed_as_a_label():
    """The world's 429 reaches plan-runner as Claude Code's `success`/`is_error` result and exit 1; its parser finds the limit."""
    from datetime import timedelta

    raw, v = _verdict_of(SessionTruth("rate_limit", "none", timedelta(minutes=3), 500, reset_at=T0 + timedelta(hours=2)))
    assert raw.returncode == 1 and '"subtype":"success","is_error":true' in raw.stdout and "rate_limit" not in repr(raw.end)
    assert v.outcome is Outcome.LIMIT_BACKOFF and v.rule == 2


def test_simulated_flaky_gate_is_re_run_by_the_real_gate_battery():
    """A gate whose first raw run fails and second passes is green (flaky) for plan-runner; the first run alone is red."""
    from datetime import timedelta

    raw, v = _verdict_of(SessionTruth(None, "complete", timedelta(minutes=20), 90_000, flaky=True, work_commit=True,
                                      flip_done=True, claims_done=True))
    assert raw.gate_runs[0][0] == 1 and raw.gate_runs[1][0] == 0
    assert v.outcome is Outcome.ADVANCED


def test_simulated_lie_is_caught_from_commits_and_tracker():
    """A tick and "all tests pass" with only the plan file committed is NoProgress, the tick rejected."""
    from datetime import timedelta

    raw, v = _verdict_of(SessionTruth(None, "lazy_claim", timedelta(minutes=20), 30_000, flip_done=True, claims_done=True))
    assert "All tests pass" in raw.stdout and v.outcome is Outcome.NO_PROGRESS and v.rejected_flips


def test_sensible_baseline_waits_out_limits_without_burning_attempts():
    """The sensible pass/fail loop detects limits in the raw output itself: no attempt is burned by a rate limit."""
    faults = FaultModel(rate_limit=0.3, transient=0.0, stall=0.0, token_budget=0.0, flaky_gate=0.0)
    runs = [run_sensible(t, 3, faults) for t in generate_plans(20, 3, faults)]
    assert sum(r.attempts_burned_env for r in runs) == 0 and sum(r.false_done for r in runs) == 0


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


def test_run_py_without_pytest_skips_the_action_part_with_the_reason(tmp_path):
    """Installed without the test extra (no pytest), run.py skips the part that needs it, says why, and exits 0."""
    out = tmp_path / "figures.json"
    code = ("import sys; sys.modules['pytest'] = None; from benchmarks.run import main; "
            f"sys.exit(main(['--quick', '--only', 'action', '--out', {str(out)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ModuleNotFoundError" not in proc.stderr + proc.stdout
    assert "skipped" in proc.stdout and "needs pytest" in proc.stdout
    assert json.loads(out.read_text())["parts"]["action"]["skipped"].startswith("needs pytest")


@pytest.mark.parametrize("argv", [["benchmarks/run.py", "--quick", "--only", "overhead"],
                                  ["-m", "benchmarks.overhead_pair", "--reps", "1"]])
def test_a_python_without_plan_runners_dependencies_gets_what_to_do_not_a_traceback(argv):
    """Every part runs plan-runner with the benchmark's own interpreter: one without its dependencies (here
    without site-packages) is told at once to use the project's venv, before anything is built or run."""
    proc = subprocess.run([sys.executable, "-S", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "lacks pydantic, git, yaml, jinja2" in proc.stderr and "fix: run them with the project's venv" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_overhead_pair_prints_its_rows_and_floors_and_leaves_no_repository_behind(tmp_path):
    """Section 1's side-by-side script end to end on one small axis (one tree, isolation `none`): a row per
    case, both floors, the JSON, and its repositories removed at the end (they were about 1 GB a run with
    50,000 files, and stayed in the temporary folder for good)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "pair.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.overhead_pair", "--commits", "100", "--files", "",
                           "--isolation", "none", "--reps", "1", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=child_env(TMPDIR=str(tmp)))
    assert proc.returncode == 0, proc.stderr
    assert "none       100 commits after  overhead" in proc.stdout
    assert "floor python + dependencies" in proc.stdout
    (row,) = json.loads(out.read_text())["rows"]
    assert row["tree"] == "after" and row["overhead_s"] > 0 and row["peak_rss_mb"] > 0
    assert not list(tmp.glob("plan-runner-pair-*"))


def test_loop_child_times_each_session_of_one_plan_runner_run(tmp_path):
    """benchmarks/loop_child.py (real_project --mode run): one `plan-runner run` of a two-session plan, a row per
    session with its wall time, its agent's own time and its gates' time, every session Advanced."""
    from benchmarks.real_project import script_text

    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    (tmp_path / "agent.yaml").write_text(script_text(2))
    (repo / "plans/p.md").write_text(
        "---\nagent: {backend: script, script: %s}\ngates:\n  - name: ok\n    run: \"sleep 0.05\"\n---\n# P\n\n"
        "## Stage 1: Notes <!-- sessions: 4 -->\n- [ ] 1.1 Note 1\n- [ ] 1.2 Note 2\n" % (tmp_path / "agent.yaml"))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "plan"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/loop_child.py"), str(out), "run", "plans/p.md",
                           "--isolation", "none"], cwd=repo, capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [r["outcome"] for r in rows] == ["Advanced", "Advanced"]
    assert all(r["wall_s"] > r["agent_s"] + r["gates_s"] and r["agent_s"] > 0 and r["gates_s"] >= 0.05 for r in rows), rows
