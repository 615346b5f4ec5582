"""Issue 26's real-project target: what a whole session costs beyond its agent on a real third-party project,
against the project's own test suite run directly.

humanize 4.12.3's sdist from PyPI (sha256-checked, as benchmarks/setup_cost.py), committed to a git repository
with a plan: `setup:` = a venv and `pip install -e .[tests]` from a local wheelhouse (downloads are made once,
before timing) with `cache: [.venv, src/humanize/_version.py]`, one required gate (the project's pytest), and a
scripted agent that makes one commit and ticks one checkpoint per session. `tests` is the project's suite run
directly in a set-up checkout, the figure a developer sees (measured before and after the sessions: the median
of both). The target: from the second session on, a session within 1.2x of `tests`.

Two ways a plan's sessions run, each on a repository of its own (`--mode`, both by default):
* `session`: `python -m runner session plans/real.md --json` once per session, each a process of its own (as a
  GitHub Actions job runs one session, or a developer runs `plan-runner session`): its figure is the process's
  wall time - the agent's own time (SessionSignals.duration_s), so it includes the interpreter's start and the
  imports;
* `run`: one `plan-runner run plans/real.md` for all sessions (as a developer runs a plan locally), each
  session's figure the wall time of its turn of the loop - the agent's own time (benchmarks/loop_child.py).

    python -m benchmarks.real_project [--mode session|run|both] [--sessions 4] [--tests-runs 3] [--json out.json]
                                      [--keep] [--profile DIR]

As root, sessions isolate the agent and the gates (isolation `user`); otherwise `PLAN_RUNNER_ISOLATION=none`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import child_env, machine, median, run_child
from benchmarks.setup_cost import CACHE, fetch, git, project

TARGET_RATIO = 1.2


def plan_text(script: Path, wheels: Path, sessions: int) -> str:
    boxes = "\n".join(f"- [ ] 1.{i} Note {i}" for i in range(1, sessions + 1))
    cache = ", ".join(CACHE)
    return f"""\
---
agent: {{backend: script, script: {script}, stall_minutes: 2m, time_limit_minutes: 5m}}
setup:
  run:
    - python3 -m venv .venv
    - .venv/bin/pip install -q --no-index --find-links {wheels} -e .[tests]
  cache: [{cache}]
  key: [pyproject.toml]
gates:
  - name: tests
    run: .venv/bin/python -m pytest -q -p no:cacheprovider
---
# Notes

## Stage 1: Notes <!-- sessions: {sessions + 2} -->
{boxes}
"""


def script_text(sessions: int) -> str:
    out = ["sessions:"]
    for i in range(1, sessions + 1):
        out += [f"  - - write: {{path: notes/note-{i}.md, content: \"note {i}\\n\"}}",
                f"    - commit: \"Note {i}\"",
                f"    - check: \"1.{i}\"",
                f"    - commit: \"Tick 1.{i}\""]
    return "\n".join(out) + "\n"


def developer_checkout(repo: Path, wheels: Path, top: Path) -> Path:
    """The project as a developer has it: a checkout, set up."""
    place = top / "developer"
    place.mkdir()
    subprocess.run(f"git -C {repo} archive HEAD | tar -x -C {place}", shell=True, check=True)
    subprocess.run([sys.executable, "-m", "venv", ".venv"], cwd=place, check=True)
    subprocess.run([".venv/bin/pip", "install", "-q", "--no-index", "--find-links", str(wheels), "-e", ".[tests]"],
                   cwd=place, check=True)
    return place


def tests_alone(place: Path, runs: int) -> list[float]:
    """The project's suite as a developer runs it in their set-up checkout, timed alone."""
    times = []
    for _ in range(runs):
        done = run_child([str(place / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=place)
        if done.returncode != 0:
            raise SystemExit(done.stdout[-2000:])
        times.append(done.wall_s)
    return times


def world(top: Path, sdist: Path, wheels: Path, sessions: int, name: str) -> Path:
    """The project at its maintainer's commit, with the plan committed: a repository of its own per mode."""
    place = top / name
    place.mkdir()
    repo, _base, _judged = project(place, sdist)
    git(repo, "reset", "-q", "--hard", "HEAD~1")  # the maintainer's commit only; the agent's come from the plan
    script = place / "agent.yaml"
    script.write_text(script_text(sessions), encoding="utf-8")
    (repo / "plans").mkdir()
    (repo / "plans/real.md").write_text(plan_text(script, wheels, sessions), encoding="utf-8")
    git(repo, "add", "plans/real.md")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "The plan")
    return repo


def one_process_each(repo: Path, sessions: int, env: dict[str, str], profile: Path | None) -> list[dict]:
    rows = []
    for n in range(1, sessions + 1):
        prof = ["-m", "cProfile", "-o", str(profile.resolve() / f"session-{n}.prof")] if profile else []
        run = run_child([sys.executable, *prof, "-m", "runner", "session", "plans/real.md", "--json"],
                        cwd=repo, env=env)
        if run.returncode != 0:
            raise SystemExit(f"session {n} failed ({run.returncode}):\n{run.stderr[-3000:]}")
        result = json.loads(run.stdout)
        if result["outcome"] != "Advanced":
            raise SystemExit(f"session {n}: expected Advanced, got {result['outcome']}: {result['reasons']}")
        evidence = json.loads(git(repo, "show", "refs/plan-runner/state/real:files/last-evidence.json"))
        agent_s = float(evidence["signals"]["duration_s"])
        gates_s = sum(float(g["duration_s"]) for g in result["gates"])
        rows.append(_row(n, run.wall_s, agent_s, gates_s, run.maxrss_mb))
    return rows


def one_run(repo: Path, sessions: int, env: dict[str, str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sessions.json"
        run = run_child([sys.executable, str(Path(__file__).with_name("loop_child.py")), str(out), "run",
                         "plans/real.md"], cwd=repo, env=env)
        if run.returncode != 0:
            raise SystemExit(f"plan-runner run failed ({run.returncode}):\n{run.stderr[-3000:]}")
        turns = json.loads(out.read_text(encoding="utf-8"))
    if len(turns) != sessions or any(t["outcome"] != "Advanced" for t in turns):
        raise SystemExit(f"plan-runner run: expected {sessions} sessions Advanced, got {turns}")
    return [_row(n, t["wall_s"], t["agent_s"], t["gates_s"], run.maxrss_mb) for n, t in enumerate(turns, 1)]


def _row(n: int, wall_s: float, agent_s: float, gates_s: float, peak_rss_mb: float) -> dict:
    return {"session": n, "wall_s": round(wall_s, 2), "agent_s": round(agent_s, 2), "gates_s": round(gates_s, 2),
            "beyond_agent_s": round(wall_s - agent_s, 2), "peak_rss_mb": round(peak_rss_mb, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("session", "run", "both"), default="both")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--tests-runs", type=int, default=3)
    p.add_argument("--json", type=Path)
    p.add_argument("--keep", action="store_true", help="keep the repositories (their folder is printed) to look into")
    p.add_argument("--profile", type=Path, help="a folder: each session of --mode session runs under cProfile into "
                                                "session-N.prof (its figures then include the profiler's cost)")
    a = p.parse_args(argv)
    if a.profile:  # (cProfile's dump fails at the end of a session into a folder that does not exist)
        a.profile.mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix="pr-real-project-"))
    top.chmod(0o755)  # the agent's user reaches the wheelhouse and the scripted agent's file
    env = child_env()
    if os.geteuid() != 0 and "PLAN_RUNNER_ISOLATION" not in env:
        env["PLAN_RUNNER_ISOLATION"] = "none"
    modes = ("session", "run") if a.mode == "both" else (a.mode,)
    try:
        sdist, wheels = fetch(top)
        repos = {mode: world(top, sdist, wheels, a.sessions, mode) for mode in modes}
        developer = developer_checkout(repos[modes[0]], wheels, top)
        alone = tests_alone(developer, a.tests_runs)
        results = {}
        for mode in modes:
            results[mode] = (one_process_each(repos[mode], a.sessions, env, a.profile) if mode == "session"
                             else one_run(repos[mode], a.sessions, env))
        alone += tests_alone(developer, a.tests_runs)  # (the machine may have drifted meanwhile)
        tests_s = median(alone)
        out = {"machine": machine(), "load_average": os.getloadavg(), "isolation": env.get("PLAN_RUNNER_ISOLATION", "user"),
               "tests_alone_s": [round(t, 2) for t in alone], "tests_median_s": round(tests_s, 2), "modes": {}}
        print(f"humanize 4.12.3, isolation {out['isolation']}, load {out['load_average'][0]:.1f}: "
              f"its tests alone {tests_s:.2f} s (median of {len(alone)}, before and after the sessions)")
        for mode, rows in results.items():
            for row in rows:
                row["ratio_to_tests"] = round(row["beyond_agent_s"] / tests_s, 2)
            later = [r["ratio_to_tests"] for r in rows[1:]]
            target = {"session 2+ beyond the agent / tests": f"<= {TARGET_RATIO}", "worst": max(later) if later else None,
                      "met": bool(later) and max(later) <= TARGET_RATIO}
            out["modes"][mode] = {"sessions": rows, "target": target}
            print(f"\n--mode {mode}: " + ("one `plan-runner session` process per session" if mode == "session"
                                           else "one `plan-runner run` for all the sessions"))
            print("session  wall s  agent s  gates s  beyond agent s  x tests  peak MB")
            for r in rows:
                print(f"{r['session']:7d}  {r['wall_s']:6.2f}  {r['agent_s']:7.2f}  {r['gates_s']:7.2f}  "
                      f"{r['beyond_agent_s']:14.2f}  {r['ratio_to_tests']:7.2f}  {r['peak_rss_mb']:7.1f}")
            print(f"target: session 2+ within {TARGET_RATIO}x of the tests: "
                  f"{'met' if target['met'] else 'missed'} (worst {target['worst']})")
        if a.json:
            a.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
        return 0
    finally:
        if a.keep:
            print(f"kept: {top}")
        else:
            subprocess.run(["rm", "-rf", str(top)], check=False)


if __name__ == "__main__":
    sys.exit(main())
