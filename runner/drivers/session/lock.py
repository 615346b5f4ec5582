"""One `run` of a plan at a time in one repository: a lock of plan-runner's own per plan (under
.git/plan-runner/<plan>/), held for the whole loop, released by the kernel when the process dies.
Different plans have different locks and run at once."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from runner.core.errors import PlanRunnerError
from runner.core.planfile import plan_id_from_path
from runner.drivers.session.context import Workspace


@contextmanager
def plan_lock(ws: Workspace) -> Iterator[None]:
    plan_id = plan_id_from_path(ws.plan_path)
    folder = ws.scratch_dir / plan_id
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "run.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise PlanRunnerError(
            what=f"the plan {plan_id!r} is already running in {ws.repo}" + (f" (process {holder})" if holder else ""),
            why="two runs of one plan would work on the same work branch and judge each other's sessions",
            fix="wait for it to finish (`plan-runner status` shows it), or stop it (Ctrl-C in its terminal, or "
                f"`kill -TERM {holder or 'PID'}`: its session is recorded Interrupted); other plans can run meanwhile"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


@contextmanager
def start_lock(ws: Workspace, plan_id: str) -> Iterator[None]:
    """A moment's lock around a session's start (the work branch and plan-runner's own work tree made ready,
    the start recorded): two sessions of one plan started at once in one clone take turns, and the second sees
    the first's start. Blocking; the kernel releases it if the process dies."""
    folder = ws.scratch_dir / plan_id
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "start.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
