"""Section 1 of docs/performance.md side by side: plan-runner's overhead per session for two trees of
plan-runner (`--before`: another checkout, e.g. `git worktree add /tmp/before <ref>`; after: this one) on
the same repositories in one run, round-robin (a machine that slows down mid-run slows both alike), with
the floors of the same run (bare Python, Python importing the dependencies a session needs).

    python -m benchmarks.overhead_pair --before /tmp/before [--commits 100,10000,100000]
        [--files 200,50000] [--isolation user,none] [--reps 3] [--sessions 2] [--fresh-machine] [--json out.json]

Axes: a repository of N commits (the tree: a few files), and one of 100 commits with F files in the
tree. Each row: overhead median (wall - agent - gates), CPU and peak RSS of the whole command, for each
tree. A session is a first session of a fresh plan (its own work branch), as in benchmarks/overhead.py,
and `--sessions 2` adds a second session of each plan (the agent's area reused)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, child_env, median, require_session_python
from benchmarks.overhead import SCRIPT, floors, plan_text, run_one
from benchmarks.repos import build_repo

# `--sessions 2`: each plan's second session is the one measured (a later session job: the plan has state, the
# agent's area and the seed store exist); the first runs unmeasured before it.
SCRIPT_TWO = SCRIPT + """\
  - - write: {path: app/feature.md, content: "feature() returns 42\\n"}
    - commit: "Document the feature"
    - check: "1.2"
    - commit: "Tick 1.2"
"""


def project(reps: int, script: Path, files: int) -> dict[str, str]:
    out = {"app/__init__.py": "", "app/core.py": "def core():\n    return 1\n", "README.md": "# bench\n"}
    out.update({f"tree/d{i // 500:03d}/f{i:05d}.txt": f"file {i}\n" for i in range(files)})
    out.update({f"plans/bench-{n:02d}.md": plan_text(n, script) for n in range(reps + 1)})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, help="another plan-runner tree to compare with (default: none)")
    p.add_argument("--after", type=Path, default=ROOT, help="the tree measured (default: this one)")
    p.add_argument("--commits", default="100,10000,100000")
    p.add_argument("--files", default="200,50000")
    p.add_argument("--isolation", default="user,none")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sessions", type=int, choices=(1, 2), default=1,
                   help="2: measure each plan's second session (its first runs unmeasured before it)")
    p.add_argument("--fresh-machine", action="store_true",
                   help="remove the seed store before every measured session, as on a GitHub-hosted runner, where "
                        "every job starts on a fresh machine (each tree gets a sandbox root of its own)")
    p.add_argument("--json", type=Path)
    p.add_argument("--keep", action="store_true", help="keep the repositories (their folder is printed)")
    a = p.parse_args(argv)
    require_session_python()
    trees = {"after": a.after.resolve()}
    if a.before:
        trees = {"before": a.before.resolve(), **trees}
    axes = [("commits", int(c), 0) for c in a.commits.split(",") if c] + \
           [("files", 100, int(f)) for f in a.files.split(",") if f]
    work = Path(tempfile.mkdtemp(prefix="plan-runner-pair-"))
    try:
        work.chmod(0o755)  # the agent's user reaches the scripted agent's file
        script = work / "work.yaml"
        script.write_text(SCRIPT_TWO if a.sessions == 2 else SCRIPT, encoding="utf-8")
        script.chmod(0o644)
        cases = {}
        names = list(trees)
        for iso in a.isolation.split(","):
            for axis, commits, files in axes:
                # One repository for both trees (built once): each tree runs plans of its own in it.
                repo = work / f"{iso}-{axis}-{commits}-{files}"
                build_repo(repo, commits, project(len(names) * (a.reps + 1), script, files), env=child_env())
                print(f"built {repo.name}", file=sys.stderr, flush=True)
                for t, name in enumerate(names):
                    env = child_env(PLAN_RUNNER_ISOLATION=iso)
                    env["PYTHONPATH"] = str(trees[name])
                    if a.fresh_machine:
                        sandbox = work / f"sandbox-{name}"
                        sandbox.mkdir(mode=0o755, exist_ok=True)
                        env["PLAN_RUNNER_SANDBOX_ROOT"] = str(sandbox)
                    run_one(repo, t, env)  # warm-up: page cache, bytecode, a seed store's first fill
                    cases[(iso, axis, commits, files, name)] = (repo, env, [], t)
        for n in range(1, a.reps + 1):
            for key, (repo, env, runs, t) in cases.items():
                if a.sessions == 2:
                    run_one(repo, n * len(names) + t, env)  # the plan's first session, not measured
                if a.fresh_machine:  # what a fresh runner has not: the seed store (the agents' areas stay: held)
                    shutil.rmtree(Path(env["PLAN_RUNNER_SANDBOX_ROOT"]) / f"plan-runner-{os.geteuid()}" / "seeds",
                                  ignore_errors=True)
                runs.append(run_one(repo, n * len(names) + t, env))
        rows = []
        for (iso, axis, commits, files, name), (_, _, runs, _) in cases.items():
            rows.append({"isolation": iso, "axis": axis, "commits": commits, "files": files, "tree": name,
                         "overhead_s": round(median([r["overhead_s"] for r in runs]), 3),
                         "cpu_s": round(median([r["cpu_s"] for r in runs]), 3),
                         "peak_rss_mb": round(max(r["maxrss_mb"] for r in runs), 1)})
        fl = floors(work, child_env(), max(3, a.reps))
        for r in rows:
            size = f"{r['commits']:,} commits" if r["axis"] == "commits" else f"{r['files']:,} files"
            print(f"{r['isolation']:5s} {size:>16s} {r['tree']:6s} overhead {r['overhead_s']:.3f} s  "
                  f"cpu {r['cpu_s']:.2f} s  peak {r['peak_rss_mb']:.0f} MB")
        for name, value in fl.items():
            print(f"floor {name}: {value:.3f} s")
        if a.json:
            a.json.write_text(json.dumps({"rows": rows, "floors_s": fl}, indent=2) + "\n", encoding="utf-8")
    finally:  # the repositories (about 1 GB with 50,000 files) and the agents' areas of their plans
        if a.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
