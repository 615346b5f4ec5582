"""Action start-up: time from a job's start to the agent's start, from a cold cache, before and after.

Runs the real composite action under `act` (the end-to-end harness in tests/e2e/test_act_e2e.py), twice per
variant: the first job installs plan-runner's venv into a fresh install directory (PLAN_RUNNER_INSTALL_ROOT, root-owned,
as the action installs on a hosted runner: /usr/local/lib/plan-runner) with empty pip and uv caches, against real
PyPI (cold: what every job on a GitHub-hosted runner does without the Actions cache, its disk fresh); the next job
of the same plan reuses it (warm: a self-hosted runner, or a hosted one whose Actions cache restored the install). "Agent start" is the `started` ledger entry, written right
before the agent process is spawned; the job's start is when `act` is launched, so act's own start-up
(about a second) is counted too. The plan uses the script backend: no agent CLI is downloaded.

Variants, measured in the same run: `before` is the action at another commit (default `main`, whose install
step makes a venv with ensurepip and pip-installs every dependency), `after` is this checkout (uv, no
ensurepip, the dependencies a session imports). python3 is the machine's system Python (/usr/bin/python3,
as on a hosted runner), not the developer's, whose site-packages would hide downloads.

`--rounds N` times both variants N times, in alternating order (the first of a round goes second in the next),
and reports each figure's median over the rounds, with in how many rounds the work tree was the faster:

    PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/action_startup.py 211bc10 --rounds 8

The agent CLI's own install (npm, `@anthropic-ai/claude-code` at the pinned version, from the npm registry
into an empty install directory and an empty npm cache) is measured separately.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACTION_FILES = ("action.yml", "pyproject.toml", "README.md", "runner")
SYSTEM_PYTHON_DIRS = ("/usr/bin", "/bin")


def _started_at(world, n: int) -> datetime:
    entries = [e for e in world.ledger() if e["type"] == "started" and e["n"] == n]
    return datetime.fromisoformat(entries[0]["started_at"])


def export_action(ref: str | None, dest: Path) -> Path:
    """The action's files at `ref` (None: this work tree), as a user's runner gets them."""
    if ref is None:
        from tests.e2e.test_act_e2e import copy_action_source

        return copy_action_source(dest)
    dest.mkdir(parents=True)
    archive = dest.parent / f"{dest.name}.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref, *ACTION_FILES], cwd=ROOT, check=True)
    # GNU tar, not `extractall(filter="data")`: that argument exists from Python 3.11.4, and Debian 12 ships
    # 3.11.2. The archive is git's own, of a commit of this repository.
    subprocess.run(["tar", "-x", "-f", str(archive), "-C", str(dest), "--no-same-owner"], check=True)
    archive.unlink()
    return dest


def cold_env(root: Path) -> dict[str, str]:
    """Every job of a variant: empty pip and uv caches, real PyPI, no local wheel mirrors, the system python3."""
    system = [d for d in SYSTEM_PYTHON_DIRS if os.access(f"{d}/python3", os.X_OK)]
    path = ":".join([*system, *(p for p in os.environ.get("PATH", "").split(":") if p not in system)])
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "https://pypi.org/simple", "PIP_FIND_LINKS": "",
            "PIP_NO_INDEX": "", "PIP_CACHE_DIR": str(root / "pip-cache"), "UV_CACHE_DIR": str(root / "uv-cache"),
            "PATH": path}


def bench_variant(root: Path, ref: str | None) -> dict:
    from tests.e2e_act import world as w
    from tests.servers.github import GitHubServer
    from tests.e2e.test_act_e2e import PLAN, ActWorld

    with GitHubServer() as srv:
        # The repository lets Actions open pull requests, as docs/github-actions.md tells a user to set it (off by
        # default, as on GitHub): an action that fails its job without it (211bc10's) is still timed.
        srv.actions_can_create_prs = True
        world = ActWorld(root, srv, env=cold_env(root), action=export_action(ref, root / "action-variant"))
        figures = {}
        for label, n in (("cold", 1), ("warm", 2)):
            event = w.dispatch_event(PLAN)
            start = datetime.now(timezone.utc)
            t0 = time.perf_counter()
            try:
                world.act("workflow_dispatch", event)
            except AssertionError as failed:  # timed all the same: the agent's start is in the ledger; said below
                figures[f"{label}_job_failed"] = str(failed).splitlines()[0]
            figures[f"{label}_job_s"] = round(time.perf_counter() - t0, 2)
            figures[f"{label}_to_agent_s"] = round((_started_at(world, n) - start).total_seconds(), 2)
            world.new_dispatches()  # the job dispatched the next one; we start it ourselves above
    # The action installs into its root-owned PLAN_RUNNER_INSTALL_ROOT (the hosted image's), once the tool cache.
    found = [cfg for tools in (world.image.install_root, root / "act-cache" / "tool_cache" / "plan-runner")
             for cfg in tools.glob("venv-*/pyvenv.cfg")]
    if not found:
        raise RuntimeError(f"the action's venv is in neither {world.image.install_root} nor the tool cache")
    cfg = found[0]
    tools = cfg.parent.parent
    figures["python"] = next(line.split("=", 1)[1].strip() for line in cfg.read_text().splitlines()
                             if line.startswith("home"))
    figures["installer"] = "uv" if any(tools.glob("uv-*/uv")) else "pip"
    figures["ensurepip"] = (cfg.parent / "bin" / "pip").exists()
    return figures


def bench_cli_install(root: Path) -> dict:
    """The pinned Claude Code CLI, installed by the action's own code into an empty install directory (root-owned,
    as PLAN_RUNNER_INSTALL_ROOT must be) and an empty npm cache."""
    from runner.drivers.actions.install import CLIS, install_cli

    if shutil.which("npm") is None:
        return {"measured": False, "why": "npm is not installed"}
    # A private install root (never the machine's own /usr/local/lib/plan-runner) and an empty npm cache.
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RUNNER_TOOL_CACHE": str(root / "toolcache"), "npm_config_cache": str(root / "npm-cache"),
           "PLAN_RUNNER_INSTALL_ROOT": str(root / "install")}
    t0 = time.perf_counter()
    install_cli(CLIS["claude-code"], env)
    return {"measured": True, "package": f"{CLIS['claude-code'].package}@{CLIS['claude-code'].version}",
            "cold_install_s": round(time.perf_counter() - t0, 2)}


def bench_action_startup(workdir: Path, before: str = "main", rounds: int = 1) -> dict:
    import statistics
    import tempfile

    result: dict = {"measured": True, "before_ref": before, "load_at_start": round(os.getloadavg()[0], 2),
                    "at": datetime.now(timezone.utc).isoformat(timespec="minutes"), "rounds": []}
    # The agent's user runs plan-runner's venv from the install directory under this folder: a mkdtemp of its own
    # in the system's temporary folder (root-owned, opened to others: `workdir` may sit in a 0700 folder).
    base = Path(tempfile.mkdtemp(prefix="plan-runner-startup-"))
    try:
        base.chmod(0o755)
        for n in range(rounds):
            # Each round times both variants, in turn: the first of a round runs first in the next (ABBA), so a
            # variant gains nothing from going second (a warmer page cache, a quieter network).
            order = (("before", before), ("after", None))
            figures: dict = {"load": round(os.getloadavg()[0], 2)}
            for name, ref in (order if n % 2 == 0 else order[::-1]):
                root = base / f"act-startup-{n}-{name}"
                root.mkdir(parents=True)
                figures[name] = bench_variant(root, ref)
                shutil.rmtree(root, ignore_errors=True)
            result["rounds"].append(figures)
        for name in ("before", "after"):
            result[name] = dict(result["rounds"][0][name])
            for key in ("cold_to_agent_s", "warm_to_agent_s", "cold_job_s", "warm_job_s"):
                result[name][key] = round(statistics.median(r[name][key] for r in result["rounds"]), 2)
        if rounds > 1:
            for label in ("cold", "warm"):
                key = f"{label}_to_agent_s"
                result[f"{label}_after_faster_in"] = (
                    f"{sum(r['after'][key] < r['before'][key] for r in result['rounds'])} of {rounds}")
        result["cli"] = bench_cli_install(base / "cli-install")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return result


if __name__ == "__main__":
    import argparse
    import json
    import sys
    import tempfile

    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", nargs="?", default="main", help="the commit to compare with (default main)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of both variants, in alternating order; figures are the rounds' medians")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(bench_action_startup(Path(tmp), args.before, args.rounds), indent=2))
