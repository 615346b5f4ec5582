"""The action installs the agent CLI the plan's backend needs, at its pinned version, read-only for other
users, or fails before any session is recorded with what / why / fix."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from runner.action_cli import CLIS, install_cli, needed_cli
from runner.planfile import parse_plan
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from tests.test_action_modes import Jobs

pytestmark = pytest.mark.integration


def plan_with(backend: str, extra: str = "") -> str:
    return w.PLAN.replace("  backend: script\n  script: plans/greeter.script.yaml\n", f"  backend: {backend}\n{extra}")


def test_only_cli_backends_without_an_executable_need_an_install() -> None:
    """claude-code and codex need their CLI; a plan naming its executable, a job setting the path, and the
    script backend need none."""
    assert needed_cli(parse_plan(plan_with("claude-code"), "plans/a.md"), {}) == CLIS["claude-code"]
    assert needed_cli(parse_plan(plan_with("codex"), "plans/a.md"), {}) == CLIS["codex"]
    assert needed_cli(parse_plan(plan_with("claude-code", "  executable: /opt/claude\n"), "plans/a.md"), {}) is None
    assert needed_cli(parse_plan(plan_with("claude-code"), "plans/a.md"), {"PLAN_RUNNER_CLAUDE": "/x"}) is None
    assert needed_cli(parse_plan(w.PLAN, "plans/a.md"), {}) is None


def test_a_runner_without_npm_fails_before_any_session_is_recorded(tmp_path: Path) -> None:
    """No npm on the runner: the session job fails with the setup-node fix and the plan's ledger stays empty."""
    with GitHubServer() as srv:
        jobs = Jobs(tmp_path, srv, plan=plan_with("claude-code"))
        bare_path = tmp_path / "no-npm-bin"
        bare_path.mkdir()
        for tool in ("git", "python3"):
            os.symlink(shutil.which(tool), bare_path / tool)
        rc, out, outputs, summary, _ = jobs.session(PATH=str(bare_path), RUNNER_TOOL_CACHE=str(tmp_path / "tools"))
        assert rc == 2 and outputs["outcome"] == "error"
        assert "npm is not installed" in summary and "actions/setup-node" in summary
        assert w.ref(jobs.bare, "plan-runner/state") is None


@pytest.mark.e2e
def test_the_pinned_claude_code_cli_is_installed_read_only_for_others(tmp_path: Path) -> None:
    """npm installs the pinned Claude Code into the tool cache; it answers --version with that version, no other
    user may write any of it, and a second call reuses it without npm."""
    cache = tmp_path / "toolcache"
    env = {**os.environ, "RUNNER_TOOL_CACHE": str(cache)}  # the job's environment (proxy, CA bundle, ...)
    path = install_cli(CLIS["claude-code"], env)
    assert path == cache / "plan-runner" / "claude-code-2.1.332" / "node_modules" / ".bin" / "claude"
    writable = [p for p in (cache / "plan-runner").rglob("*") if not p.is_symlink()
                and p.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)]
    assert writable == []
    assert install_cli(CLIS["claude-code"], {**env, "PATH": "/nonexistent"}) == path  # cached: no npm needed
