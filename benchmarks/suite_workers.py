"""The default test command's wall time by the number of pytest-xdist workers, side by side in one run.

    python -m benchmarks.suite_workers [--workers 2,3] [--reps 1] [--json out.json] [pytest paths ...]

Each run is the README's test command (`scripts/test -q -p no:cacheprovider [paths]`) with
PLAN_RUNNER_TEST_WORKERS set to one of the counts (0: one process), the counts taken round-robin rep by rep
(a machine that slows down mid-run slows every count alike). For each count it prints the wall time of the
whole command (its installs re-checked, a few seconds once installed), pytest's own time, the CPU of the
command and every process it reaped (user + system), and how busy the machine's cores were over the run
(CPU / wall / cores): a suite whose cores stay idle part of the time is waiting on child processes, servers
or the disk, and gains from more workers than cores. The whole suite takes about 10 minutes a run on a
2-core machine; give paths (`tests/unit`) for a quick look. Run one at a time per checkout: two suites in
one checkout share its .venv and its files, and fail each other.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from benchmarks.common import ROOT, median, run_child

_PYTEST_TIME = re.compile(r"(?m)^=*\s*(?:(\d+) failed, )?(\d+) passed.* in ([\d.]+)s")


def run_suite(workers: int, paths: list[str]) -> dict:
    env = dict(os.environ, PLAN_RUNNER_TEST_WORKERS=str(workers))
    run = run_child([str(ROOT / "scripts" / "test"), "-q", "-p", "no:cacheprovider", *paths], cwd=ROOT, env=env,
                    timeout_s=3 * 3600)
    # Without paths scripts/test runs two pytest sessions (the unit tier, then the rest): their sums.
    found = _PYTEST_TIME.findall(run.stdout)
    cores = os.cpu_count() or 1
    return {"workers": workers, "returncode": run.returncode, "wall_s": round(run.wall_s, 1),
            "pytest_s": round(sum(float(f[2]) for f in found), 2) if found else None,
            "passed": sum(int(f[1]) for f in found), "failed": sum(int(f[0] or 0) for f in found) if found else None,
            "cpu_s": round(run.cpu_s, 1), "busy": round(run.cpu_s / run.wall_s / cores, 3),
            # what failed, when something did: pytest's failure reports, or the end of its output
            "tail": "" if run.returncode == 0 else failures(run.stdout + run.stderr)}


def failures(output: str, limit: int = 40_000) -> str:
    """pytest's FAILURES and ERRORS sections with its short summary (the assertion of a one-off failure is
    otherwise lost, as it was once in issue 19), at most `limit` characters; without them, the output's end."""
    found = re.search(r"(?m)^=+ (?:FAILURES|ERRORS) =+$", output)
    return output[found.start():][:limit] if found else output[-4000:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="2,3", help="comma-separated worker counts (0: one process)")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("paths", nargs="*", help="pytest paths (default: the whole suite)")
    a = p.parse_args(argv)
    counts = [int(w) for w in a.workers.split(",") if w]
    runs: dict[int, list[dict]] = {w: [] for w in counts}
    for rep in range(a.reps):
        for w in counts:
            r = run_suite(w, a.paths)
            runs[w].append(r)
            print(f"rep {rep + 1} workers {w}: rc {r['returncode']}, wall {r['wall_s']} s, pytest {r['pytest_s']} s",
                  file=sys.stderr, flush=True)
            if r["tail"]:
                print(r["tail"], file=sys.stderr, flush=True)
    rows = []
    for w, rs in runs.items():
        rows.append({"workers": w, "wall_s": median([r["wall_s"] for r in rs]),
                     "pytest_s": median([r["pytest_s"] for r in rs if r["pytest_s"] is not None] or [0.0]),
                     "cpu_s": median([r["cpu_s"] for r in rs]), "busy": median([r["busy"] for r in rs]),
                     "all_passed": all(r["returncode"] == 0 for r in rs), "runs": rs})
    cores = os.cpu_count() or 1
    print(f"{'workers':>7s}  {'wall':>8s}  {'pytest':>8s}  {'CPU':>8s}  {'cores busy':>10s}  result")
    for r in rows:
        print(f"{r['workers']:7d}  {r['wall_s']:7.1f}s  {r['pytest_s']:7.1f}s  {r['cpu_s']:7.1f}s  "
              f"{r['busy'] * 100:9.0f}%  {'passed' if r['all_passed'] else 'FAILED'}")
    print(f"({cores} cores; medians of {a.reps} run(s) each; load average at the end "
          f"{os.getloadavg()[0]:.1f})")
    if a.json:
        a.json.write_text(json.dumps({"cores": cores, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    return 0 if all(r["all_passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
