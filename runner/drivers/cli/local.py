"""Local mode: the same loop in one process, with no GitHub at all (docs/usage.md).

Dispatch becomes "next session now", a park writes the report to a file, and
the state store is the same git branch, without a remote unless one exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.adapters import clock as wallclock
from runner.adapters.git import work as gitwork
from runner.core.actions import Wait
from runner.core.errors import PlanRunnerError
from runner.core.exits import Exit
from runner.core.planfile import plan_id_from_path
from runner.drivers.session import Ports, SessionResult, Workspace
from runner.adapters.store.state import GitStateStore
from runner.drivers.session.phases import run_session

EXIT_FINISHED, EXIT_PARKED, EXIT_WAITING = Exit.OK, Exit.PARKED, Exit.WAITING


@dataclass
class LocalDispatcher:
    """Locally, dispatching the next session means the loop simply goes on."""

    dispatched: list[str] = field(default_factory=list)

    def dispatch_next(self, plan_path: str, key: str, ref: str | None = None) -> int | None:
        self.dispatched.append(key)
        return None

    @property
    def dispatched_runs(self) -> tuple[tuple[str, int, str], ...]:
        return ()  # no run is started: the loop goes on


@dataclass
class LocalParker:
    """Writes park and finish reports to files under `reports_dir`."""

    reports_dir: Path
    local = True  # park reports say `plan-runner reply`, not a GitHub comment

    def _write(self, name: str, body: str) -> str:
        self.reports_dir.mkdir(parents=True, exist_ok=True)
        path = self.reports_dir / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(body, encoding="utf-8")
        tmp.replace(path)  # never a half-written report
        return str(path)

    def open_park(self, plan_id: str, title: str, body: str) -> str | None:
        return self._write(f"{plan_id}-park.md", f"# {title}\n\n{body}")

    def open_finish(self, plan_id: str, head: str, base: str, title: str, body: str) -> str | None:
        return self._write(f"{plan_id}-finished.md", f"# {title}\n\nBranch `{head}` is ready to merge into `{base}`.\n\n{body}")

    def update_watch(self, plan_id: str, head: str, base: str, title: str, body: str, state: str | None) -> str | None:
        return None  # the terminal and `plan-runner status` are the watch view locally

    def publish_check(self, check: Any, head_sha: str) -> str | None:
        return None  # the verdict is in the ledger and on the terminal

    def follow_run(self, run_key: Callable[[], str], reset_note: Callable[[str], str]) -> None:
        return None


def repo_root(start: Path) -> Path:
    try:
        return Path(gitwork.git_text(start, "rev-parse", "--show-toplevel"))
    except Exception:  # noqa: BLE001 - any git failure here means "not a repository"
        raise PlanRunnerError(
            what=f"{start} is not inside a git repository",
            why="plan-runner keeps its state and the agent's work in git",
            fix="run it from your repository, or `git init && git add -A && git commit -m init` first") from None


def local_workspace(plan: Path, **kw) -> Workspace:
    plan = plan.absolute()
    if not plan.is_file():
        raise PlanRunnerError(what=f"no plan file at {plan}", why="the path does not name a file",
                              fix="pass the plan's path, e.g. `plan-runner run plans/my-plan.md`")
    root = repo_root(plan.parent)
    rel = plan.resolve().relative_to(root.resolve()).as_posix() if plan.resolve().is_relative_to(root.resolve()) else None
    if rel is None:
        raise PlanRunnerError(what=f"{plan} is outside the repository {root}",
                              why="a plan (or a symlink to one) must live in the repository it drives",
                              fix="move the plan into the repository's plans/ directory")
    remotes = gitwork.remotes(root)
    return Workspace(repo=root, plan_path=rel, remote="origin" if "origin" in remotes else None,
                     base=_base_named(plan), **kw)


def _base_named(plan: Path) -> str | None:
    """The base branch the plan file the user named asks for (the plan itself is then read from that branch's
    commit); None when the file does not parse (the error comes from reading it the usual way)."""
    from runner.core.planfile import parse_plan

    try:
        return parse_plan(plan.read_text(encoding="utf-8"), plan.name).config.base
    except (PlanRunnerError, OSError, UnicodeDecodeError, ValueError):
        return None


def local_ports(ws: Workspace) -> Ports:
    return Ports(store=GitStateStore(ws.repo, remote=ws.remote), dispatcher=LocalDispatcher(),
                 parker=LocalParker(ws.scratch_dir / "reports"))


def run_loop(ws: Workspace, ports: Ports, *, max_wait_s: float | None = None,
             on_result: Callable[[SessionResult], None] = lambda r: None,
             on_wait: Callable[[Wait, float], None] = lambda w, left: None,
             sleep: Callable[[float], None] = wallclock.sleep, max_steps: int = 10_000) -> tuple[int, SessionResult]:
    """Sessions until the plan finishes, parks, or must wait longer than `max_wait_s`."""
    result = None
    for _ in range(max_steps):
        result = run_session(ws, ports)
        on_result(result)
        if result.status == "finished":
            return EXIT_FINISHED, result
        if result.status == "parked":
            return EXIT_PARKED, result
        if result.status in ("busy", "superseded"):
            return EXIT_FINISHED, result
        if isinstance(result.action, Wait):
            left = (result.action.until - ws.clock()).total_seconds()
            if max_wait_s is not None and left > max_wait_s:
                return EXIT_WAITING, result
            while left > 0:
                on_wait(result.action, left)
                sleep(min(1.0, left))
                left = (result.action.until - ws.clock()).total_seconds()
    raise PlanRunnerError(what=f"the loop ran {max_steps} steps without finishing or parking",
                          why="max_sessions should have parked the plan first", fix="report this as a bug")


__all__ = ["EXIT_FINISHED", "EXIT_PARKED", "EXIT_WAITING", "LocalDispatcher", "LocalParker",
           "local_ports", "local_workspace", "plan_id_from_path", "run_loop"]
