"""Helpers every benchmark shares: child processes with their own rusage, statistics, the machine."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = Path(__file__).resolve().parent / "measure_child.py"


# What every plan-runner process imports: the benchmarks run plan-runner with this interpreter (sys.executable).
SESSION_MODULES = ("pydantic", "git", "yaml", "jinja2")


def require_session_python() -> None:
    """Exit with what to do when this interpreter cannot run plan-runner (every part would fail in its child)."""
    import importlib.util

    missing = [m for m in SESSION_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"benchmarks: {sys.executable} lacks {', '.join(missing)}, which plan-runner needs: the benchmarks "
                 "run plan-runner with the interpreter that runs them.\n  fix: run them with the project's venv, "
                 "`.venv/bin/python` (./scripts/test makes it), or `pip install -e .` into this Python")


@dataclass(frozen=True)
class ChildRun:
    wall_s: float
    returncode: int
    stdout: str
    stderr: str
    maxrss_mb: float  # peak resident set of the child and every descendant it waited for
    cpu_s: float  # user + system CPU of the child and its reaped descendants: robust to a busy machine


def run_child(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout_s: float = 600) -> ChildRun:
    """Run a command through `measure_child.py` and return its wall time, CPU time and peak memory.

    The launcher reaps the command with `os.wait4`, so the rusage is this one command's
    (with the descendants it reaped), measured from a small parent (see measure_child.py).
    Output goes to files, so a chatty child can never block on a full pipe.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "rusage.json"
        proc = subprocess.Popen([sys.executable, str(LAUNCHER), str(result), *argv], cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"{' '.join(argv)} did not finish within {timeout_s:g} s") from None
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
        if not result.exists():
            raise RuntimeError(f"the launcher failed ({proc.returncode}):\n{stderr[-3000:]}")
        m = json.loads(result.read_text(encoding="utf-8"))
        return ChildRun(m["wall_s"], m["returncode"], stdout, stderr, m["maxrss_kb"] / 1024, m["cpu_s"])


def child_env(**extra: str) -> dict[str, str]:
    """The benchmark's environment without anything that would make plan-runner talk to GitHub."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PLAN_RUNNER_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.invalid",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.invalid")
    if os.environ.get("PLAN_RUNNER_BENCH_ISOLATION"):  # run.py without root or sudo: isolation `none`
        env["PLAN_RUNNER_ISOLATION"] = os.environ["PLAN_RUNNER_BENCH_ISOLATION"]
    env.update(extra)
    return env


# The claude-code stand-in CLIs (benchmarks/stream.py) need no key, but plan-runner's preflight refuses a
# claude-code plan without one: a value that is no key, never sent anywhere (child_env drops the real ones).
STAND_IN_KEY = {"ANTHROPIC_API_KEY": "sk-ant-benchmark-stand-in-not-a-key"}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> dict[str, object]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb, "os": platform.platform(),
            "python": sys.version.split()[0], "git": git}
