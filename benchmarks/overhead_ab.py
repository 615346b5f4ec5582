"""Session overhead of two checkouts side by side in one run (before: another worktree of plan-runner, after:
this one), on copies of the same 100-commit repository, with cached bytecode and with PYTHONDONTWRITEBYTECODE=1
and the tree's runner/__pycache__ removed before every session (a cold start's compile cost); then the
floors of the same run: bare Python, and Python importing the dependencies a session needs.

    python -m benchmarks.overhead_ab /path/to/other/worktree [reps]

The other tree is put first on PYTHONPATH of each child (run from a directory that holds no `runner`)."""
from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.common import child_env, median
from benchmarks.overhead import SCRIPT, floors, project, run_one
from benchmarks.repos import build_repo

TREES = {"before": Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path("."),
         "after": Path(__file__).resolve().parents[1]}
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
d = Path(tempfile.mkdtemp())
atexit.register(shutil.rmtree, d, True)  # its repositories, however the run ends
(d / "work.yaml").write_text(SCRIPT)
rows = {}
repos = {}
for name, tree in TREES.items():
    for mode in ("cached", "fresh"):
        env = child_env(PLAN_RUNNER_ISOLATION="none")
        env["PYTHONPATH"] = str(tree)
        if mode == "fresh":
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        repo = d / f"{name}-{mode}"
        build_repo(repo, 100, project(reps, d / "work.yaml"), env=env)
        repos[(name, mode)] = (repo, env)
        rows[(name, mode)] = []
for (name, mode), (repo, env) in repos.items():  # warm-up: plan 0 (and the pyc of the cached mode)
    run_one(repo, 0, env)
for n in range(1, reps + 1):
    for (name, mode), (repo, env) in repos.items():
        if mode == "fresh":
            shutil.rmtree(TREES[name] / "runner" / "__pycache__", ignore_errors=True)
        rows[(name, mode)].append(run_one(repo, n, env))
for key, runs in rows.items():
    print(f"{key[0]:7s} {key[1]:7s} overhead median {median([r['overhead_s'] for r in runs]):.3f} s  "
          f"cpu {median([r['cpu_s'] for r in runs]):.2f} s  wall {median([r['wall_s'] for r in runs]):.3f} s")
# What any Python command on this stack pays before plan-runner does anything (same run, same machine).
for name, value in floors(d, child_env(), max(3, reps)).items():
    print(f"floor   {name}: {value:.3f} s")
