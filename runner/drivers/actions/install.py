"""The agent CLI a session's backend needs, installed by the action at a pinned version before any session
is recorded (hosted runners have neither Claude Code nor Codex).

Installed with npm into plan-runner's install directory (`PLAN_RUNNER_INSTALL_ROOT`, /usr/local/lib/plan-runner: the
action's install step creates it root-owned, 0755), never under the tool cache: the hosted image makes /opt, and so
/opt/hostedtoolcache, world-writable without the sticky bit, where the agent's user could rename the CLI's folder and
plant another. npm runs as the job's user in a private folder; the result is copied in as root, read-only for
everyone else, and renamed into place in one step. The agent runs as another, unprivileged user, who may read and
run the CLI, never change, rename or replace it. A failure is a PlanRunnerError (what / why / fix) raised before the
session starts.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.core.backend_spec import BACKENDS
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


# From each backend's spec (runner.core.backend_spec): the same versions scripts/install-claude.sh and
# scripts/install-codex.sh give the tests (tests/integration/test_action_cli.py checks they agree).
CLIS = {spec.name: AgentCli(spec.name, spec.install.package, spec.install.version, spec.install.binary,
                            spec.executable.override_env)
        for spec in BACKENDS.values() if spec.install is not None and spec.executable is not None}
INSTALL_TIMEOUT_S = 300


def needed_cli(plan: Plan, env: Mapping[str, str]) -> AgentCli | None:
    """The CLI to install for the plan's backend; None when the backend needs none, the plan names its own
    executable, or the job already points plan-runner at one (`PLAN_RUNNER_CLAUDE`, `PLAN_RUNNER_CODEX`)."""
    cli = CLIS.get(plan.config.agent.backend)
    if cli is None or plan.config.agent.executable or env.get(cli.env):
        return None
    return cli


DEFAULT_INSTALL_ROOT = "/usr/local/lib/plan-runner"
SUDO = "/usr/bin/sudo"  # absolute: PATH's first entries on the hosted image are world-writable


def install_owner() -> int:
    """Who owns plan-runner's install: root (plan-runner is root, or may use passwordless sudo: GitHub's hosted
    runners), else plan-runner's own user (a self-hosted runner's ordinary user). Either way the agent's room shows
    the install read-only (runner.adapters.sandbox.room) and no other user may change it (`writable_by_others`)."""
    if os.geteuid() == 0:
        return 0
    try:
        sudo = subprocess.run([SUDO, "-n", "/bin/true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        sudo = False
    return 0 if sudo else os.geteuid()


def writable_by_others(path: Path, owner: int = 0) -> str | None:
    """The first component of `path`'s real path (from /) that a user other than root (and `owner`) could change or
    rename entries of: owned by another, or writable by group or others without the sticky bit. None when none."""
    real = Path(os.path.realpath(path))
    for part in (*reversed(real.parents), real):
        try:
            st = part.stat()
        except OSError:
            return None  # not created yet: it will be, by its owner, inside the components checked so far
        if st.st_uid not in (0, owner):
            return f"{part} (owner uid {st.st_uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return f"{part} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def default_install_root(owner: int, env: Mapping[str, str]) -> Path:
    if owner == 0:
        return Path(DEFAULT_INSTALL_ROOT)
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(cache) / "plan-runner" / "install"


def install_root(env: Mapping[str, str], owner: int | None = None) -> Path:
    """plan-runner's own install directory, refused when a user other than root (or its owner) could change it."""
    owner = install_owner() if owner is None else owner
    root = Path(env.get("PLAN_RUNNER_INSTALL_ROOT") or default_install_root(owner, env))
    weak = writable_by_others(root, owner) if root.is_absolute() else f"{root} (not an absolute path)"
    if weak:
        raise PlanRunnerError(
            what=f"plan-runner's install directory {root} is not safe from other users",
            why=f"{weak} lets a user other than root{'' if owner == 0 else ' or this one'} change or rename what is "
                "installed there",
            fix="set PLAN_RUNNER_INSTALL_ROOT to a directory whose every parent only root (or this job's user) may "
                f"write (the action's default, {DEFAULT_INSTALL_ROOT}, is one on GitHub's hosted runners)")
    return root


def place_as_root(src: Path, dest: Path, owner: int | None = None) -> None:
    """A copy of `src` at `dest` owned by the install's owner (root through sudo, or plan-runner's own user),
    read-only for everyone else, renamed into place in one step (a folder at `dest` is always complete; when
    another job placed it first, its copy stays)."""
    owner = install_owner() if owner is None else owner
    run_as = [] if owner != 0 or os.geteuid() == 0 else [SUDO, "-n"]
    new = dest.parent / f".new-{dest.name}-{os.getpid()}"
    make = ["/usr/bin/install", "-d", "-m", "0755", *(["-o", "0", "-g", "0"] if owner == 0 else []), str(dest.parent)]
    steps = [["/bin/rm", "-rf", str(new)], make, ["/bin/cp", "-R", "--no-preserve=ownership", "--", str(src), str(new)],
             *([["/bin/chown", "-R", "0:0", str(new)]] if owner == 0 else []), ["/bin/chmod", "-R", "go-w,a+rX", str(new)]]
    for argv in steps:
        proc = subprocess.run([*run_as, *argv], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        if proc.returncode != 0:
            raise PlanRunnerError(
                what=f"cannot place {dest.name} in plan-runner's install directory {dest.parent}",
                why=f"`{' '.join(argv)}`{' as root' if owner == 0 else ''} failed: "
                    f"{(proc.stderr or proc.stdout).strip()[-400:]}",
                fix="run the job as root or give its user passwordless sudo (GitHub's hosted runners do), or set "
                    "PLAN_RUNNER_INSTALL_ROOT to a directory of this job's user")
    if subprocess.run([*run_as, "/bin/mv", "-T", str(new), str(dest)], capture_output=True).returncode != 0:
        subprocess.run([*run_as, "/bin/rm", "-rf", str(new)], capture_output=True)  # another job won


def _works(path: Path, version: str) -> bool:
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and version in proc.stdout


def install_cli(cli: AgentCli, env: Mapping[str, str], log=lambda text: None) -> Path:
    """The path of a working `cli` at its pinned version, installed once per runner in plan-runner's install
    directory (`install_root`: root's, or plan-runner's own user's where it may not use sudo)."""
    owner = install_owner()
    prefix = install_root(env, owner) / cli.key
    binary = prefix / "node_modules" / ".bin" / cli.binary
    if _works(binary, cli.version) and not writable_by_others(binary.parent, owner):
        return binary
    npm = shutil.which("npm", path=env.get("PATH") or os.environ.get("PATH"))
    if npm is None:
        raise PlanRunnerError(
            what=f"the plan's backend `{cli.backend}` needs {cli.package}@{cli.version}, and npm is not installed",
            why="plan-runner installs the agent's CLI with npm; this runner has no `npm` on its PATH",
            fix="add `- uses: actions/setup-node@<sha> # v4` (with `node-version: 22`) before the plan-runner step, "
                f"or install the CLI yourself and set `{cli.env}` to its path in the step's `env:`")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="plan-runner-npm-", dir=env.get("RUNNER_TEMP") or None) as build:
        staged = Path(build) / cli.key
        try:
            proc = subprocess.run([npm, "install", "--prefix", str(staged), "--no-save", "--no-audit", "--no-fund",
                                   "--loglevel=error", f"{cli.package}@{cli.version}"],
                                  capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=dict(env))
        except subprocess.TimeoutExpired:
            proc = None
        staged_binary = staged / "node_modules" / ".bin" / cli.binary
        if proc is None or proc.returncode != 0 or not _works(staged_binary, cli.version):
            detail = "npm timed out" if proc is None else (proc.stderr or proc.stdout).strip()[-800:]
            raise PlanRunnerError(
                what=f"installing {cli.package}@{cli.version} for the `{cli.backend}` backend failed",
                why=detail or f"{staged_binary} does not answer `--version` with {cli.version}",
                fix="re-run the job (a registry hiccup), or install the CLI in an earlier step and set "
                    f"`{cli.env}` to its path; nothing of the plan was recorded")
        place_as_root(staged, prefix, owner)
    if not _works(binary, cli.version):
        raise PlanRunnerError(what=f"{binary} does not run after its install",
                              why=f"it does not answer `--version` with {cli.version}",
                              fix="re-run the job; nothing of the plan was recorded")
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
ON_DEMAND = {"anthropic": "anthropic>=0.40,<3"}


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
    # with its bytecode, as pip writes it: no later process may write into the root-owned venv (action.yml)
    argv = ([uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", sys.executable, *missing]
            if uv and os.access(uv, os.X_OK)
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
