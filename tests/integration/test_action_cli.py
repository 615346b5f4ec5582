"""The action installs the agent CLI the plan's backend needs, at its pinned version, read-only for other
users, or fails before any session is recorded with what / why / fix."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runner.drivers.actions.install import CLIS, install_cli, needed_cli
from runner.core.planfile import parse_plan
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.integration.test_action_modes import Jobs
from tests.other_users import privileged

pytestmark = pytest.mark.integration


def plan_with(backend: str, extra: str = "") -> str:
    return w.PLAN.replace("  backend: script\n  script: plans/greeter.script.yaml\n", f"  backend: {backend}\n{extra}")


@contextmanager
def root_owned_folder() -> Iterator[Path]:
    """A folder only root may write, every parent too (the action installs only into such a folder, as
    /usr/local/lib on a hosted runner): made and removed through sudo (tests/other_users.py)."""
    base = Path(f"/usr/local/lib/plan-runner-test-{secrets.token_hex(4)}")
    privileged("install", "-d", "-m", "0755", "-o", "0", "-g", "0", str(base))
    try:
        yield base
    finally:
        privileged("rm", "-rf", str(base))


def test_only_cli_backends_without_an_executable_need_an_install() -> None:
    """claude-code and codex need their CLI; a plan naming its executable, a job setting the path, and the
    script backend need none."""
    assert needed_cli(parse_plan(plan_with("claude-code"), "plans/a.md"), {}) == CLIS["claude-code"]
    assert needed_cli(parse_plan(plan_with("codex"), "plans/a.md"), {}) == CLIS["codex"]
    assert needed_cli(parse_plan(plan_with("claude-code", "  executable: /opt/claude\n"), "plans/a.md"), {}) is None
    assert needed_cli(parse_plan(plan_with("claude-code"), "plans/a.md"), {"PLAN_RUNNER_CLAUDE": "/x"}) is None
    assert needed_cli(parse_plan(w.PLAN, "plans/a.md"), {}) is None


@pytest.mark.sudo_user  # the action installs its CLI into a root-owned folder: a hosted runner's shape (sudo)
def test_a_runner_without_npm_fails_before_any_session_is_recorded(tmp_path: Path) -> None:
    """No npm on the runner: the session job fails with the setup-node fix and the plan's ledger stays empty."""
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, plan=plan_with("claude-code"))
        bare_path = tmp_path / "no-npm-bin"
        bare_path.mkdir()
        for tool in ("git", "python3"):
            os.symlink(shutil.which(tool), bare_path / tool)
        with root_owned_folder() as tools:
            rc, out, outputs, summary, _ = jobs.session(PATH=str(bare_path),
                                                        PLAN_RUNNER_INSTALL_ROOT=str(tools / "plan-runner"))
        assert rc == 2 and outputs["outcome"] == "error"
        assert "npm is not installed" in summary and "actions/setup-node" in summary
        assert w.ref(jobs.bare, "plan-runner/state") is None


@pytest.mark.e2e
@pytest.mark.sudo_user  # root owns the install: placed through sudo -n, as on a hosted runner
def test_the_pinned_claude_code_cli_is_installed_read_only_for_others(tmp_path: Path) -> None:
    """npm installs the pinned Claude Code into plan-runner's install directory; it answers --version with that
    version, root owns all of it, no other user may write any of it, and a second call reuses it without npm."""
    with root_owned_folder() as base:
        root = base / "plan-runner"
        env = {**os.environ, "PLAN_RUNNER_INSTALL_ROOT": str(root)}  # the job's environment (proxy, CA bundle, ...)
        path = install_cli(CLIS["claude-code"], env)
        assert path == root / "claude-code-2.1.332" / "node_modules" / ".bin" / "claude"
        writable = [p for p in root.rglob("*") if not p.is_symlink()
                    and (p.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH) or p.stat().st_uid != 0)]
        assert writable == []
        assert install_cli(CLIS["claude-code"], {**env, "PATH": "/nonexistent"}) == path  # cached: no npm needed


def _due_step() -> str:
    import yaml

    action = yaml.safe_load((Path(__file__).resolve().parents[2] / "action.yml").read_text())
    (step,) = [s for s in action["runs"]["steps"] if s.get("id") == "due"]
    return step["run"]


@pytest.mark.parametrize("with_state", [False, True])
def test_an_idle_tick_installs_nothing(tmp_path: Path, with_state: bool) -> None:
    """The action's first step: a tick on a repository whose remote holds no plan state stops after one
    `git ls-remote` (outputs due=false, outcome=idle, a summary); with state it goes on to install and run."""
    import subprocess

    files = {"plans/greeter.md": w.PLAN}
    bare = w.make_remote(tmp_path, files)
    clone = w.checkout(bare, tmp_path / "job")
    if with_state:
        subprocess.run(["git", "push", "-q", "origin", "HEAD:refs/plan-runner/state/greeter"], cwd=clone, check=True)
    out, summary = tmp_path / "out", tmp_path / "summary"
    out.write_text(""), summary.write_text("")
    env = {**os.environ, "MODE": "tick", "TOKEN": "", "SERVER": "https://github.example.invalid",
           "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
    proc = subprocess.run(["bash", "-c", _due_step()], cwd=clone, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if with_state:
        assert out.read_text() == "due=true\n" and summary.read_text() == ""
    else:
        assert out.read_text() == "due=false\noutcome=idle\n" and "nothing was installed" in summary.read_text()


def test_the_on_demand_dependencies_match_pyproject_and_only_the_built_in_backend_needs_them() -> None:
    """The action leaves `[tool.plan-runner] action-on-demand` out of its install; the SDK comes back, with the
    requirement pyproject.toml states, exactly when the plan's sessions import it (built-in backend, advisor)."""
    import tomllib

    from runner.drivers.actions.install import ON_DEMAND, needed_modules

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    on_demand = meta["tool"]["plan-runner"]["action-on-demand"]
    assert set(ON_DEMAND) <= set(on_demand) and set(on_demand) - set(ON_DEMAND) == {"rich"}  # rich: never
    for module, requirement in ON_DEMAND.items():
        assert requirement in meta["project"]["dependencies"], module
    assert needed_modules(parse_plan(plan_with("anthropic"), "plans/a.md")) == ["anthropic"]
    assert needed_modules(parse_plan(plan_with("claude-code"), "plans/a.md")) == []
    advised = w.PLAN.replace("budget:\n", "advisor:\n  enabled: true\nbudget:\n")
    assert needed_modules(parse_plan(advised, "plans/a.md")) == ["anthropic"]
    assert needed_modules(parse_plan(w.PLAN, "plans/a.md")) == []


def test_a_github_session_never_imports_what_the_action_leaves_out(tmp_path: Path) -> None:
    """A whole session job (script backend: gates, evidence, ledger, dispatch) in a fresh interpreter imports
    neither the anthropic SDK nor rich, so the action may leave them out."""
    import subprocess
    import sys

    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv)
        ws = w.checkout(jobs.bare, tmp_path / "job")
        env = {**w.job_env(srv, ws, tmp_path / "runner", "workflow_dispatch", w.dispatch_event("plans/greeter.md")),
               "PLAN_RUNNER_MODE": "session", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        code = ("import sys, runner.drivers.actions.main as a; rc = a.run_action(dict(__import__('os').environ)); "
                "print('LOADED', sorted(m for m in ('anthropic', 'rich') if m in sys.modules)); sys.exit(rc)")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "LOADED []" in proc.stdout and [e["outcome"] for e in jobs.ledger() if e["type"] == "session"] == ["Advanced"]
