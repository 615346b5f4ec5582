"""The agent areas and seed stores of repositories that are gone, removed in the background.

An agent area (agent_clone.area_for) and a seed store (agent_clone.seed_store) are named by a digest of their
repository's path, so nothing in their names says where they came from, and a developer's clones and a test
suite's temporary repositories come and go: their areas stayed for good (a machine that ran this project's
suite for a day held 9,510 areas, 35 GB, and its disk filled up). Each area and store now records its
repository (`ORIGIN`: the resolved path, written by the judge in a folder only the judge writes, 0600), and
a sweep removes

* those whose repository no longer exists (its path is gone), unless a session holds the area (its in-use
  lock, agent_clone.hold_area) or the store (its fill lock);
* those with no record (made before records were kept) that nobody used for UNRECORDED_AFTER_S.

It runs at most once per SWEEP_EVERY_S per machine user, started at a session's end as a detached process
(`start`: never on the session's critical path), and at once from `plan-runner clean`. A repository that is
only missing for a while (an unmounted disk) loses its areas: its next session makes them again (a new
clone of the work branch), and nothing of the plan is lost (its state and work branch are in git).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from runner.adapters.sandbox import agent_clone
from runner.adapters.sandbox.origin import area_origin, read_private, store_origin, write_private
from runner.adapters.sandbox.identity import judge_dir
from runner.core.errors import PlanRunnerError

SWEEP_EVERY_S = 3600.0
UNRECORDED_AFTER_S = 14 * 86400.0
_STAMP = ".swept"  # in judge_dir("agents"): its mtime is the last sweep's start


def _gone(origin: Path, st: os.stat_result, now: float) -> bool:
    """Whether the repository `origin` records no longer exists (no record: unused for UNRECORDED_AFTER_S)."""
    text = read_private(origin)
    if text is None or not text.endswith("\n") or "\n" in text[:-1] or not text.startswith("/"):
        return now - st.st_mtime >= UNRECORDED_AFTER_S
    try:
        os.lstat(text[:-1])
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:  # unreadable on the way (another user's private folder, a disk that fails): it may exist
        return False
    return False


def sweep(*, now: float | None = None, wait: bool = True) -> list[Path]:
    """Remove the areas and seed stores whose repository is gone (module docstring); the paths removed."""
    now = time.time() if now is None else now
    return agent_clone.remove_agent_areas(0.0, wait=wait, now=now,
                                          select=lambda path, st: _gone(_origin_of(path), st, now))


def _origin_of(path: Path) -> Path:
    """The record of an area (its root) or of a seed store (`<key>-<name>` in seeds/: `<key>.origin`)."""
    if path.parent.name == "agents":
        return area_origin(path)
    return store_origin(path.parent, path.name.partition("-")[0])


def start(*, now: float | None = None) -> bool:
    """At a session's end: a sweep in a detached process when none started in the last SWEEP_EVERY_S (this
    machine user's stamp); True when one was started. Costs the session one stat when none is due."""
    now = time.time() if now is None else now
    try:
        stamp = judge_dir("agents") / _STAMP
        if now - os.lstat(stamp).st_mtime < SWEEP_EVERY_S:
            return False
    except FileNotFoundError:
        pass
    except (OSError, PlanRunnerError):
        return False  # it is called in a session's `finally`: it never hides what the session did
    try:
        write_private(stamp, "")
    except OSError:
        return False
    argv = [sys.executable, "-m", "runner.adapters.sandbox.sweep"]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "PLAN_RUNNER_SANDBOX_ROOT", "LANG",
                                                       "HOME", "TMPDIR")}
    # Detached by a shell that starts the sweep in the background (with the /dev/null descriptors given here)
    # and exits at once (waited for here, a few milliseconds): the sweep is the init process's child, never a
    # Popen of this one left unreaped (a zombie in a long-lived caller, and a ResourceWarning when Python
    # collects the object while the sweep runs).
    try:
        subprocess.run(["/bin/sh", "-c", '"$@" &', "sh", *argv],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True, close_fds=True, env=env, cwd="/", check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


if __name__ == "__main__":
    sweep()
