"""The action's `Cache key` step runs `python3 -P runner/drivers/actions/install_cache.py key` on the runner's own python3,
before plan-runner or any of its dependencies is installed (action.yml): the module must run from the action's
files with the standard library alone. Here it runs under `-I -S` (no site-packages, so neither plan-runner's
install nor pydantic, jinja2 or GitPython can be found) and must print the key plan-runner computes itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runner.drivers.actions.install_cache import cache_key

ROOT = Path(__file__).resolve().parents[2]
PLAN = "---\nagent:\n  backend: claude-code\n---\n# A plan\n"


def test_the_key_step_runs_on_a_python_with_nothing_installed_and_gives_plan_runners_key(tmp_path: Path) -> None:
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "p.md").write_text(PLAN)
    out = tmp_path / "github-output"
    env = {"ACTION_PATH": str(ROOT), "PLAN_RUNNER_PLAN": "plans/p.md", "GITHUB_WORKSPACE": str(tmp_path),
           "GITHUB_OUTPUT": str(out), "RUNNER_TEMP": str(tmp_path / "temp"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-I", "-S", "-P", str(ROOT / "runner/drivers/actions/install_cache.py"), "key"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert outputs == {"key": cache_key(ROOT, PLAN), "dir": str(tmp_path / "temp" / "plan-runner-cache"),
                       "prepare": "true"}


def test_prepare_is_needed_for_an_agent_cli_or_a_setup_and_only_then() -> None:
    from runner.drivers.actions.install_cache import needs_prepare

    assert needs_prepare(PLAN) and needs_prepare("---\nagent:\n  backend: codex\n---\n")
    assert needs_prepare("---\ngates: []\n---\n# no backend named: the default, Claude Code\n")
    assert not needs_prepare("---\nagent:\n  backend: script\n---\n# setup: in the body is not the front matter\n")
    assert needs_prepare("---\nagent:\n  backend: script\nsetup:\n  run: [npm ci]\n---\n")

