"""What the trust boundary costs per session (SPEC 4b): isolation and fresh-checkout gates.

Side by side in one run, round-robin on the same 100-commit repository with the scripted
agent and the trivial gate of `benchmarks.overhead`: sessions with `isolation: none`
(the agent works in its own clone, gates on a fresh checkout, but as plan-runner's own
user) and with `isolation: user` (a pooled unprivileged user, uid-wide kills, ownership
handed over). The agent's own time and the gates' time are taken out, as in the
overhead benchmark. Needs root (or passwordless sudo) for the `user` rows.

Then a project with a real `setup:` (a virtualenv and `pip install` of one package from
the package index): the first session builds the setup cache, the second restores it.

    python -m benchmarks.isolation [--reps N] [--no-setup]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import child_env, median, run_child
from benchmarks.overhead import SCRIPT, project, run_one
from benchmarks.repos import build_repo

TARGET_EXTRA_S = 2.0

SETUP_PLAN = """\
---
agent: {{backend: script, script: {script}, stall_minutes: 10s, time_limit_minutes: 2m}}
setup:
  run:
    - {python} -m venv .venv
    - .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  cache: [.venv]
  key: [requirements.txt]
gates:
  - name: uses-the-setup
    run: .venv/bin/python -c "import iniconfig"
---
# Setup plan

## Stage 1: Feature <!-- sessions: 2 -->
- [ ] 1.1 Add the feature
- [ ] 1.2 Document it
"""

SETUP_SCRIPT = """\
sessions:
  - - write: {path: app/feature.py, content: "def feature():\\n    return 42\\n"}
    - commit: "Add the feature"
    - check: "1.1"
    - commit: "Tick 1.1"
  - - write: {path: app/doc.py, content: "DOC = 'feature'\\n"}
    - commit: "Document it"
    - check: "1.2"
    - commit: "Tick 1.2"
"""


def bench_isolation(workdir: Path, reps: int) -> dict:
    env = child_env()
    script = workdir / "agent-script.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    repo = workdir / "repo"
    build_repo(repo, 100, project(2 * reps + 1, script), env=env)
    modes = {"none": child_env(PLAN_RUNNER_ISOLATION="none"), "user": child_env(PLAN_RUNNER_ISOLATION="user")}
    run_one(repo, 0, modes["user"])  # warm-up: bytecode, page cache, the pool's user created
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    n = 1
    for _ in range(reps):
        for mode, mode_env in modes.items():
            runs[mode].append(run_one(repo, n, mode_env))
            n += 1
    rows = {m: {"overhead_median_s": round(median([r["overhead_s"] for r in done]), 3),
                "gates_median_s": round(median([r["gates_s"] for r in done]), 3),
                "wall_median_s": round(median([r["wall_s"] for r in done]), 3)}
            for m, done in runs.items()}
    extra = round(rows["user"]["overhead_median_s"] - rows["none"]["overhead_median_s"], 3)
    return {"rows": rows, "isolation_extra_s": extra, "reps": reps}


def bench_setup(workdir: Path) -> dict:
    env = child_env()
    script = workdir / "setup-script.yaml"
    script.write_text(SETUP_SCRIPT, encoding="utf-8")
    repo = workdir / "setup-repo"
    build_repo(repo, 10, {"app/__init__.py": "", "requirements.txt": "iniconfig==2.0.0\n",
                          "plans/setup.md": SETUP_PLAN.format(script=script, python=sys.executable)}, env=env)
    walls = []
    for _ in range(2):
        started = time.monotonic()
        run = run_child([sys.executable, "-m", "runner", "session", "plans/setup.md", "--json"], cwd=repo, env=env)
        walls.append(round(time.monotonic() - started, 3))
        if run.returncode != 0 or json.loads(run.stdout)["outcome"] != "Advanced":
            raise RuntimeError(f"setup session failed ({run.returncode}): {run.stdout[-1500:]} {run.stderr[-1500:]}")
    return {"first_session_wall_s": walls[0], "second_session_wall_s": walls[1],
            "saved_by_cache_s": round(walls[0] - walls[1], 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-setup", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pr-bench-iso-") as tmp:
        Path(tmp).chmod(0o755)  # the agent's user reads the scripted agent's file here
        iso = bench_isolation(Path(tmp), args.reps)
        print(f"{'':32} {'isolation: none':>16} {'isolation: user':>16}")
        for key in ("overhead_median_s", "gates_median_s", "wall_median_s"):
            print(f"{key:32} {iso['rows']['none'][key]:>16.3f} {iso['rows']['user'][key]:>16.3f}")
        met = "met" if iso["isolation_extra_s"] < TARGET_EXTRA_S else "MISSED"
        print(f"isolation costs {iso['isolation_extra_s']:.3f} s per session (target < {TARGET_EXTRA_S} s: {met}), "
              f"{iso['reps']} sessions each")
        if not args.no_setup:
            s = bench_setup(Path(tmp))
            print(f"setup (venv + pip install): session 1 {s['first_session_wall_s']:.2f} s, session 2 (cache) "
                  f"{s['second_session_wall_s']:.2f} s, saved {s['saved_by_cache_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
