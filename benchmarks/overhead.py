"""1. Overhead per session: what `plan-runner session` costs beyond the agent and the gates.

Each repetition runs `python -m runner session plans/bench-NN.md --json` as a child
process on a real repository, with a scripted agent that makes one commit and flips
one checkpoint, and one trivial gate (`true`). Overhead = wall time of the whole
command - the agent's own wall time (SessionSignals.duration_s, read from the
evidence on the state branch) - the gates' wall time (GateResult.duration_s from
the session's JSON). Every repetition uses its own plan, so each starts from a
fresh plan state and work branch, as a real first session would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.common import child_env, median, run_child
from benchmarks.repos import build_repo, git

TARGET_MEDIAN_S = 0.5
TARGET_SCALE_RATIO = 1.5

SCRIPT = """\
sessions:
  - - write: {path: app/feature.py, content: "def feature():\\n    return 42\\n"}
    - commit: "Add the feature"
    - check: "1.1"
    - commit: "Tick 1.1"
    - say: "Done with 1.1"
"""


def plan_text(n: int, script: Path) -> str:
    return f"""\
---
agent: {{backend: script, script: {script}, stall_minutes: 10s, time_limit_minutes: 2m}}
gates:
  - name: trivial
    run: "true"
---
# Bench plan {n}

## Stage 1: Feature <!-- sessions: 1 -->
- [ ] 1.1 Add the feature
- [ ] 1.2 Document it
"""


def project(reps: int, script: Path) -> dict[str, str]:
    files = {"app/__init__.py": "", "app/core.py": "def core():\n    return 1\n",
             "README.md": "# bench project\n"}
    for n in range(reps + 1):  # plan 0 is the warm-up
        files[f"plans/bench-{n:02d}.md"] = plan_text(n, script)
    return files


def run_one(repo: Path, n: int, env: dict[str, str]) -> dict[str, float]:
    plan_id = f"bench-{n:02d}"
    run = run_child([sys.executable, "-m", "runner", "session", f"plans/{plan_id}.md", "--json"], cwd=repo, env=env)
    if run.returncode != 0:
        raise RuntimeError(f"plan-runner session failed ({run.returncode}):\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout)
    if result["outcome"] != "Advanced":
        raise RuntimeError(f"expected Advanced, got {result['outcome']}: {result['reasons']}")
    evidence = json.loads(git(repo, "show", f"refs/plan-runner/state/{plan_id}:files/last-evidence.json"))
    agent_s = float(evidence["signals"]["duration_s"])
    gates_s = sum(float(g["duration_s"]) for g in result["gates"])
    return {"wall_s": run.wall_s, "agent_s": agent_s, "gates_s": gates_s,
            "overhead_s": run.wall_s - agent_s - gates_s, "maxrss_mb": run.maxrss_mb, "cpu_s": run.cpu_s}


def dry_run(repo: Path, env: dict[str, str], reps: int, runs: int) -> float:
    """Wall time of `session --dry-run`: interpreter start, imports, plan and state load, the decision."""
    argv = [sys.executable, "-m", "runner", "session", f"plans/bench-{reps:02d}.md", "--dry-run", "--json"]
    return median([run_child(argv, cwd=repo, env=env).wall_s for _ in range(runs)])


# The baselines measured in the same run: what any Python command on this stack pays before
# plan-runner does anything of its own.
FLOORS = {
    "python": "pass",
    # the names plan-runner imports (pydantic's package is lazy: its parts load when first named)
    "python + dependencies": "from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, "
                             "ValidationError, WithJsonSchema, model_validator; import git, yaml, jinja2",
}


def floors(workdir: Path, env: dict[str, str], runs: int) -> dict[str, float]:
    return {name: round(median([run_child([sys.executable, "-c", code], cwd=workdir, env=env).wall_s
                                for _ in range(runs)]), 3)
            for name, code in FLOORS.items()}


def bench_overhead(workdir: Path, sizes: list[int], reps: int) -> dict:
    env = child_env()
    script = workdir / "agent-script.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    repos = {}
    for size in sizes:
        repo = workdir / f"repo-{size}"
        build_repo(repo, size, project(reps, script), env=env)
        run_one(repo, 0, env)  # warm-up: bytecode caches, page cache
        repos[size] = repo
    # Round-robin over the sizes: a machine that slows down mid-run (a neighbour on a shared host)
    # slows every size alike instead of whichever ran last, so the scale ratio stays honest.
    runs: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
    for n in range(1, reps + 1):
        for size in sizes:
            runs[size].append(run_one(repos[size], n, env))
    rows = []
    for size in sizes:
        repo, done = repos[size], runs[size]
        commits = int(git(repo, "rev-list", "--count", "main", env=env))
        rows.append({
            "commits": commits,
            "sessions": reps,
            "overhead_median_s": round(median([r["overhead_s"] for r in done]), 3),
            "overhead_min_s": round(min(r["overhead_s"] for r in done), 3),
            "overhead_max_s": round(max(r["overhead_s"] for r in done), 3),
            "wall_median_s": round(median([r["wall_s"] for r in done]), 3),
            "agent_median_s": round(median([r["agent_s"] for r in done]), 3),
            "gates_median_s": round(median([r["gates_s"] for r in done]), 3),
            "peak_rss_mb_median": round(median([r["maxrss_mb"] for r in done]), 1),
            "peak_rss_mb_max": round(max(r["maxrss_mb"] for r in done), 1),
            "cpu_median_s": round(median([r["cpu_s"] for r in done]), 3),
            "dry_run_s": round(dry_run(repo, env, reps, 1 if reps < 5 else 3), 3),
        })
    small, big = rows[0]["overhead_median_s"], rows[-1]["overhead_median_s"]
    ratio = round(big / small, 2) if small > 0 else float("nan")
    # CPU time barely moves with other load on the machine: the steadier view of the same ratio.
    cpu_ratio = round(rows[-1]["cpu_median_s"] / rows[0]["cpu_median_s"], 2) if rows[0]["cpu_median_s"] else float("nan")
    worst = max(r["overhead_median_s"] for r in rows)
    baseline = floors(workdir, env, max(3, reps))
    return {
        "rows": rows,
        "floors_s": baseline,
        "above_dependency_floor_s": round(worst - baseline["python + dependencies"], 3),
        "scale_ratio": ratio,
        "cpu_scale_ratio": cpu_ratio,
        "targets": {
            "median_overhead_s": {"target": f"< {TARGET_MEDIAN_S}", "worst": worst, "met": worst < TARGET_MEDIAN_S},
            "scale_ratio": {"target": f"<= {TARGET_SCALE_RATIO} ({rows[-1]['commits']} vs {rows[0]['commits']} commits)",
                            "value": ratio, "met": ratio <= TARGET_SCALE_RATIO},
        },
    }
