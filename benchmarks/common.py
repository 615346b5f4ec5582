"""Helpers every benchmark shares: child processes with their own rusage, statistics, the machine."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ChildRun:
    wall_s: float
    returncode: int
    stdout: str
    stderr: str
    maxrss_mb: float  # peak resident set of the child and every descendant it waited for
    cpu_s: float  # user + system CPU of the child and its reaped descendants: robust to a busy machine


def run_child(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout_s: float = 600) -> ChildRun:
    """Run a command and return its wall time and peak memory.

    `os.wait4` gives the rusage of this one child (with the descendants it reaped),
    where `getrusage(RUSAGE_CHILDREN)` would be the maximum over every child so far.
    Output goes to files, so a chatty child can never block on a full pipe.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        deadline = started + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; tell Popen so it does not warn
        out.seek(0)
        err.seek(0)
        return ChildRun(wall, proc.returncode, out.read().decode("utf-8", "replace"),
                        err.read().decode("utf-8", "replace"), usage.ru_maxrss / 1024,
                        usage.ru_utime + usage.ru_stime)


def child_env(**extra: str) -> dict[str, str]:
    """The benchmark's environment without anything that would make plan-runner talk to GitHub."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PLAN_RUNNER_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.invalid",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.invalid")
    env.update(extra)
    return env


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
