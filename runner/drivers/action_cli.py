"""The agent CLI a session's backend needs, installed by the action at a pinned version before any session
is recorded (hosted runners have neither Claude Code nor Codex).

Installed with npm under the runner's tool cache (`$RUNNER_TOOL_CACHE`, /opt/hostedtoolcache on hosted
runners), never under /home/runner (0750): the agent will run as another, unprivileged user, who must be
able to read and run the CLI but not change it, so the install is made read-only for everyone else.
A failure is a PlanRunnerError (what / why / fix) raised before the session starts.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import PlanRunnerError
from runner.core.plan import Plan


@dataclass(frozen=True)
class AgentCli:
    backend: str
    package: str  # npm package
    version: str  # pinned: the version plan-runner's stream parsers are tested against
    binary: str  # the executable's name in node_modules/.bin
    env: str  # the variable the backend reads the executable's path from

    @property
    def key(self) -> str:
        return f"{self.package.rsplit('/', 1)[-1]}-{self.version}"


# The same versions scripts/install-claude.sh and scripts/install-codex.sh give the tests.
CLIS = {
    "claude-code": AgentCli("claude-code", "@anthropic-ai/claude-code", "2.1.332", "claude", "PLAN_RUNNER_CLAUDE"),
    "codex": AgentCli("codex", "@openai/codex", "0.171.0", "codex", "PLAN_RUNNER_CODEX"),
}
INSTALL_TIMEOUT_S = 300


def needed_cli(plan: Plan, env: Mapping[str, str]) -> AgentCli | None:
    """The CLI to install for the plan's backend; None when the backend needs none, the plan names its own
    executable, or the job already points plan-runner at one (`PLAN_RUNNER_CLAUDE`, `PLAN_RUNNER_CODEX`)."""
    cli = CLIS.get(plan.config.agent.backend)
    if cli is None or plan.config.agent.executable or env.get(cli.env):
        return None
    return cli


def tool_root(env: Mapping[str, str]) -> Path:
    root = env.get("RUNNER_TOOL_CACHE") or "/opt/hostedtoolcache"
    return Path(root) / "plan-runner"


def _works(path: Path, version: str) -> bool:
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and version in proc.stdout


def _read_only_for_others(top: Path) -> None:
    """Others may read and run, never write: the agent's user must not be able to swap the CLI."""
    for folder, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            path.chmod((mode & ~(stat.S_IWGRP | stat.S_IWOTH)) | stat.S_IRGRP | stat.S_IROTH
                       | ((stat.S_IXGRP | stat.S_IXOTH) if mode & stat.S_IXUSR else 0))
    top.chmod(0o755)


def install_cli(cli: AgentCli, env: Mapping[str, str], log=lambda text: None) -> Path:
    """The path of a working `cli` at its pinned version, installed once per runner (tool cache)."""
    prefix = tool_root(env) / cli.key
    binary = prefix / "node_modules" / ".bin" / cli.binary
    if _works(binary, cli.version):
        return binary
    npm = shutil.which("npm", path=env.get("PATH") or os.environ.get("PATH"))
    if npm is None:
        raise PlanRunnerError(
            what=f"the plan's backend `{cli.backend}` needs {cli.package}@{cli.version}, and npm is not installed",
            why="plan-runner installs the agent's CLI with npm; this runner has no `npm` on its PATH",
            fix="add `- uses: actions/setup-node@<sha> # v4` (with `node-version: 22`) before the plan-runner step, "
                f"or install the CLI yourself and set `{cli.env}` to its path in the step's `env:`")
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlanRunnerError(
            what=f"cannot create {prefix} for the agent's CLI",
            why=f"{exc.strerror}: the tool cache must be writable by the job and readable by the agent's user",
            fix="set RUNNER_TOOL_CACHE to a directory the job may write and every user may read (not under "
                f"/home/runner), or install the CLI yourself and set `{cli.env}`") from None
    started = time.monotonic()
    try:
        proc = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund",
                               "--loglevel=error", f"{cli.package}@{cli.version}"],
                              capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=dict(env))
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None or proc.returncode != 0 or not _works(binary, cli.version):
        detail = "npm timed out" if proc is None else (proc.stderr or proc.stdout).strip()[-800:]
        raise PlanRunnerError(
            what=f"installing {cli.package}@{cli.version} for the `{cli.backend}` backend failed",
            why=detail or f"{binary} does not answer `--version` with {cli.version}",
            fix="re-run the job (a registry hiccup), or install the CLI in an earlier step and set "
                f"`{cli.env}` to its path; nothing of the plan was recorded")
    _read_only_for_others(prefix)
    log(f"plan-runner: installed {cli.package}@{cli.version} in {time.monotonic() - started:.1f} s")
    return binary


def ensure_agent_cli(plan: Plan, env: dict[str, str], log=lambda text: None) -> None:
    """Install the plan's agent CLI if the backend needs one, and point the backend at it."""
    cli = needed_cli(plan, env)
    if cli is None:
        return
    path = str(install_cli(cli, env, log))
    env[cli.env] = path
    os.environ[cli.env] = path  # the backends read it from plan-runner's own environment


# The runtime dependencies the action installs only when a plan needs them (pyproject.toml, `[tool.plan-runner]
# action-on-demand`): the module, the requirement as pyproject.toml states it, and what needs it.
ON_DEMAND = {"anthropic": "anthropic>=0.40"}


def needed_modules(plan: Plan) -> list[str]:
    """The on-demand modules the plan's sessions import: the SDK for the built-in backend or an advisor."""
    advisor = plan.config.advisor
    if plan.config.agent.backend == "anthropic" or (advisor is not None and advisor.enabled):
        return ["anthropic"]
    return []


def ensure_python_packages(plan: Plan, env: Mapping[str, str], log=lambda text: None) -> None:
    """Install into plan-runner's own venv what the plan needs and the action left out, before the session
    is recorded: with the action's uv (`PLAN_RUNNER_UV`), else with pip."""
    missing = [ON_DEMAND[m] for m in needed_modules(plan) if importlib.util.find_spec(m) is None]
    if not missing:
        return
    uv = env.get("PLAN_RUNNER_UV", "")
    argv = ([uv, "pip", "install", "--quiet", "--python", sys.executable, *missing] if uv and os.access(uv, os.X_OK)
            else [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *missing])
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=dict(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        proc, detail = None, f"{type(exc).__name__}: {exc}"
    if proc is None or proc.returncode != 0:
        detail = detail if proc is None else (proc.stderr or proc.stdout).strip()[-800:]
        raise PlanRunnerError(
            what=f"installing {', '.join(missing)} for the plan's `{plan.config.agent.backend}` backend or advisor failed",
            why=detail or "the installer gave no reason",
            fix="re-run the job (a registry hiccup); nothing of the plan was recorded")
    importlib.invalidate_caches()
    log(f"plan-runner: installed {', '.join(missing)} in {time.monotonic() - started:.1f} s")
