"""A session job's seconds beyond its agent and its gates, on fresh hosted runners, with a real Python project's
`setup:` (issue 23): humanize 4.12.3's sdist from PyPI (checked by sha256, benchmarks/setup_cost.py), `setup:` =
`python3 -m venv .venv` + `.venv/bin/pip install -e .[tests]` (from a local wheelhouse: downloads are made once,
before timing), `cache: [.venv, src/humanize/_version.py]`, the gate its own test suite.

Each job is the composite action run as the hosted runner runs it (tests/e2e_act/hosted.py), a real session (script
backend: its agent commits an edit and ticks a step; real gates, isolated as the sandbox user), on a fresh runner:
fresh image, install directory, checkout (at the same path, as on a hosted runner), agent area and scratch. Only the
cache service (hosted.ActionsCache, the actions' semantics over a folder) and the remote carry anything across jobs.
The install is not offline: the first job of each variant fetches uv and the dependencies from the machine's index.

Variants: `before`, the action at another commit (default: where this branch left `main`; the install in the Actions cache, the set-up not);
`after`, this checkout (the set-up too). Per job: the whole job, the agent (its first line to its `finished`), the
gates (each gate's start to finish), and the rest: what the job pays beyond its agent and gates.

    python -m benchmarks.action_setup [--sessions 3] [--before main]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmarks.action_startup import export_action
from benchmarks.setup_cost import fetch

ROOT = Path(__file__).resolve().parent.parent
PLAN_PATH = "plans/greeter.md"


def plan_text(wheels: Path, sessions: int) -> str:
    steps = "\n".join(f"- [ ] 1.{i} note {i} in the README" for i in range(1, sessions + 1))
    return f"""---
base: main
agent:
  backend: script
  script: plans/greeter.script.yaml
  stall_minutes: 2m
  time_limit_minutes: 5m
setup:
  run:
    - python3 -m venv .venv
    - .venv/bin/pip install -q --no-index --find-links {wheels} -e .[tests]
  cache: [.venv, src/humanize/_version.py]
  key: [pyproject.toml]
gates:
  - name: tests
    run: .venv/bin/python -m pytest -q -p no:cacheprovider
    timeout_minutes: 5m
budget:
  max_sessions: {sessions + 5}
---
# Notes

## Stage 1: Notes <!-- sessions: {sessions} -->
{steps}
"""


def script_text(sessions: int) -> str:
    out = ["sessions:"]
    for i in range(1, sessions + 1):
        out += [f"  - id: s-{i}", "    steps:",
                f"      - write: {{path: NOTES.md, content: \"note {i}\\n\"}}",
                f"      - commit: \"note {i}\"", f"      - check: \"1.{i}\"", f"      - commit: \"Tick 1.{i}\""]
    return "\n".join(out) + "\n"


def remote(top: Path, sdist: Path, wheels: Path, sessions: int) -> Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(top, filter="data") if sys.version_info >= (3, 12) else tar.extractall(top)  # noqa: S202
    repo = top / "humanize-4.12.3"
    (repo / "plans").mkdir()
    (repo / PLAN_PATH).write_text(plan_text(wheels, sessions))
    (repo / "plans/greeter.script.yaml").write_text(script_text(sessions))
    git = ["git", "-c", "user.name=m", "-c", "user.email=m@x"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "humanize 4.12.3 and a plan"], cwd=repo, check=True)
    bare = top / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    return bare


def split(stamps: list[tuple[float, str]]) -> tuple[float, float]:
    """(agent seconds, gate seconds) from the job's timestamped lines."""
    agent = gates = 0.0
    started: dict[str, float] = {}
    agent_from = None
    for at, line in stamps:
        if "plan-runner text: Starting scripted session" in line:
            agent_from = at
        elif "plan-runner agent: finished" in line and agent_from is not None:
            agent += at - agent_from
            agent_from = None
        elif m := re.search(r"plan-runner gate: start (\S+)", line):
            started[m[1]] = at
        elif (m := re.search(r"plan-runner gate: finish (\S+)", line)) and m[1] in started:
            gates += at - started.pop(m[1])
    return agent, gates


def run_variant(name: str, action: Path, bare: Path, top: Path, sessions: int, trace: bool = False) -> list[dict]:
    from tests.e2e_act.hosted import ActionsCache
    from tests.integration.test_action_setup_cache import Runners, outcome, setup_ran
    from tests.servers.github import GitHubServer

    work = top / name
    work.mkdir()
    copy = work / "origin.git"
    shutil.copytree(bare, copy)
    rows = []
    with GitHubServer() as srv:
        jobs = Runners(work, srv, ActionsCache(work / "cache-service"), bare=copy, action=action, fresh_install=True)
        for n in range(1, sessions + 1):
            job = jobs.job()
            wall = jobs.wall
            if job.status != "success" or outcome(job) != "Advanced":
                raise SystemExit(f"{name} job {n}: {job.status} {outcome(job)}\n{job.text[-4000:]}")
            agent, gates = split(jobs.stamps)
            steps = {s.name: s.seconds for s in job.steps if s.seconds}
            rows.append({"job": n, "wall": wall, "agent": agent, "gates": gates, "beyond": wall - agent - gates,
                         "setup_runs": setup_ran(job, "python3 -m venv"), "steps": steps})
            print(f"  {name} job {n}: whole {wall:.1f} s, agent {agent:.1f} s, gates {gates:.1f} s, "
                  f"beyond {wall - agent - gates:.1f} s, set-up runs {setup_ran(job, 'python3 -m venv')} "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            print("    steps: " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()), flush=True)
            if trace:
                first = jobs.stamps[0][0] if jobs.stamps else 0.0
                for at, line in jobs.stamps:
                    if line.startswith("plan-runner"):
                        print(f"      {at - first:6.2f} {line.rstrip()[:150]}")
    entries = [p for p in (work / "cache-service").glob("*/**/*.tar")]
    if entries:
        print(f"  {name}: set-up archives in the cache service: " + ", ".join(
            f"{p.stat().st_size / 1e6:.0f} MB" for p in entries), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--trace", action="store_true", help="print each job's plan-runner lines with their times")
    parser.add_argument("--before", default=None,
                        help="the commit of the `before` action (default: where this branch left main; '' to skip)")
    args = parser.parse_args()
    if args.before is None:
        args.before = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout.strip()
    top = Path(tempfile.mkdtemp(prefix="pr-action-setup-"))
    top.chmod(0o755)  # the wheelhouse is read by the sandbox user that runs `setup:`
    try:
        sdist, wheels = fetch(top)
        bare = remote(top, sdist, wheels, args.sessions)
        variants = [("after", export_action(None, top / "action-after"))]
        if args.before:
            variants.insert(0, ("before", export_action(args.before, top / "action-before")))
        results = {name: run_variant(name, action, bare, top, args.sessions, args.trace) for name, action in variants}
        print("\nseconds beyond the agent and the gates, per session job (fresh runner each):")
        for name, rows in results.items():
            print(f"  {name:6s} " + "  ".join(f"#{r['job']}: {r['beyond']:.1f}" for r in rows))
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
