"""The Actions cache for what a session job installs: plan-runner's venv, uv, and the agent's CLI.

Hosted runners are fresh for every job, so without it every session job installs them again (about 8 s and
7-12 s, docs/performance.md section 5). The composite action (action.yml) persists them with
`actions/cache/restore` and `actions/cache/save`, steps that get the runner's cache token (a `run:` step gets
none), around this module:

* `key` (stdlib only: it runs on the runner's python3 before any venv exists) prints the cache key: what the
  install depends on and nothing else: the runner's OS and architecture, the Python version, plan-runner's
  pyproject.toml and sources (which pin uv and the CLIs' versions), and the plan's backend;
* `actions/cache/restore` puts an entry, if one exists, in a staging folder of the job's user (`RUNNER_TEMP`);
* the install step adopts a staged venv and uv only as root-owned copies in the install directory, checked to run;
  `prepare` does the same for the agent's CLI (or installs it) and, on a miss, copies what was installed into the
  staging folder and says `save=true`;
* `actions/cache/save` stores it, **before the session's step**: nothing an agent, a gate or the plan's `setup:`
  runs has run in this job yet, so an entry holds only what plan-runner's own install produced (the rule of the
  set-up cache, runner/adapters/judge/setup.py). A cache key, once saved, is never overwritten; a hit saves
  nothing.

Caches saved on the default branch are readable from every branch (GitHub: "a workflow run can restore caches
created in either the current branch or the default branch"): the entry holds no secret (binaries and a venv
built before any credential is used), and the key names plan-runner's sources, so another version's job gets
another entry. What a plan's `setup:` builds has entries of its own, verified against a record the agent cannot
write (runner/drivers/actions/setup_cache.py).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

PREFIX = "plan-runner-install-v1"
_BACKEND = re.compile(r"^\s*backend:\s*['\"]?([A-Za-z0-9_-]+)", re.MULTILINE)


def plan_backend(plan_text: str) -> str:
    """The `agent.backend` a plan file names (the front matter's first `backend:`), or `default`. Only the key
    depends on it: a wrong guess is a miss, or a hit without the CLI, which `prepare` then installs."""
    front = plan_text[3:].split("\n---", 1)[0] if plan_text.startswith("---") and "\n---" in plan_text[3:] else ""
    match = _BACKEND.search(front)
    return match[1].lower() if match else "default"


# Backends whose sessions need no agent CLI installed (runner/drivers/actions/install.py CLIS names the others).
NO_CLI_BACKENDS = frozenset({"script", "command", "anthropic"})
_SETUP = re.compile(r"^setup\s*:", re.MULTILINE)


def needs_prepare(plan_text: str) -> bool:
    """Whether `prepare` has work beyond staging a miss: an agent CLI to install, or a `setup:` whose cache keys
    it reads. False lets a job whose install is already in place (a cache hit, or a runner's earlier job) skip
    that second plan-runner process (about 2.5 s). A wrong `true` costs that time; a wrong `false` only a CLI
    the session step then installs itself, so every doubt is `true`."""
    front = plan_text[3:].split("\n---", 1)[0] if plan_text.startswith("---") and "\n---" in plan_text[3:] else ""
    return plan_backend(plan_text) not in NO_CLI_BACKENDS or bool(_SETUP.search(front))


def source_digest(action_path: Path, python_version: str) -> str:
    """What the install depends on, hashed: the same inputs as the venv's key in action.yml."""
    h = hashlib.sha256()
    h.update(python_version.encode() + b"\0")
    h.update((action_path / "pyproject.toml").read_bytes())
    files = sorted(p for p in (action_path / "runner").rglob("*")
                   if p.is_file() and p.suffix in (".py", ".j2") and "__pycache__" not in p.parts)
    for path in files:
        h.update(path.relative_to(action_path).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:24]


def cache_key(action_path: Path, plan_text: str, *, system: str | None = None, machine: str | None = None,
              python_version: str | None = None) -> str:
    system = (system or platform.system()).lower()
    machine = (machine or platform.machine()).lower()
    backend = plan_backend(plan_text)
    digest = source_digest(action_path, python_version or sys.version)
    return f"{PREFIX}-{system}-{machine}-{backend}-{digest}"


def should_save(mode: str, cache_hit: str, installed: list[str]) -> bool:
    """Save only a session job's install, only on a miss (a saved key is immutable: a hit has nothing new), and
    only when something was installed."""
    return mode == "session" and cache_hit != "true" and bool(installed)


def stage(install_root: Path, names: list[str], staging: Path) -> list[str]:
    """Copy the named folders of the install directory into a fresh staging folder for `actions/cache/save`."""
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    staged = []
    for name in names:
        src = install_root / name
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, staging / name, symlinks=True)
            staged.append(name)
    return staged


def adopt(staging: Path, name: str, install_root: Path, place) -> bool:
    """A staged folder becomes a root-owned copy in the install directory (`place`), unless one is there."""
    src = staging / name
    if (install_root / name).exists() or not src.is_dir() or src.is_symlink():
        return False
    place(src, install_root / name)
    return True


def step_outputs(env: Mapping[str, str], **values: str) -> None:
    """Plain `name=value` lines (values without newlines) appended to `$GITHUB_OUTPUT`, or printed without it.
    Written here: `key` runs as a file on the runner's python3, with nothing of plan-runner installed, so this
    module imports the standard library only at its top (tests/unit/test_action_cache_key.py)."""
    path = env.get("GITHUB_OUTPUT")
    lines = "".join(f"{k}={v}\n" for k, v in values.items())
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(lines)
    else:
        sys.stdout.write(lines)


def cmd_key(env: Mapping[str, str]) -> int:
    action = Path(env["ACTION_PATH"])
    plan = env.get("PLAN_RUNNER_PLAN", "")
    workspace = Path(env.get("GITHUB_WORKSPACE") or ".")
    try:
        text = (workspace / plan).read_text(encoding="utf-8", errors="replace") if plan else ""
    except OSError:
        text = ""
    staging = Path(env.get("RUNNER_TEMP") or "/tmp") / "plan-runner-cache"
    step_outputs(env, key=cache_key(action, text), dir=str(staging),
                 prepare="true" if needs_prepare(text) else "false")
    return 0


def cmd_prepare(env: dict[str, str]) -> int:
    """In plan-runner's venv, after its install: the agent's CLI from the staged entry or npm, then the staging
    of a miss. Prints `save=true|false` and `cli=<path>` to GITHUB_OUTPUT, and the set-up cache's keys
    (runner/drivers/actions/setup_cache.py `key_outputs`)."""
    from runner.adapters.plan_io import load_plan
    from runner.core.errors import PlanRunnerError
    from runner.drivers.actions.install import install_cli, install_root, needed_cli, place_as_root

    root = install_root(env)
    staging = Path(env["PLAN_RUNNER_CACHE_DIR"])
    installed = [n for n in (env.get("PLAN_RUNNER_INSTALLED") or "").split() if n]
    cli_path = ""
    try:
        workspace = Path(env.get("GITHUB_WORKSPACE") or ".")
        plan = load_plan(workspace / env.get("PLAN_RUNNER_PLAN", ""), workspace)
        cli = needed_cli(plan, env)
    except Exception:  # noqa: BLE001 - the session step reports a bad plan; the cache only misses the CLI
        cli = None
    if cli is not None:
        adopt(staging, cli.key, root, place_as_root)
        try:
            cli_path = str(install_cli(cli, env, print))
            installed.append(cli.key)
        except PlanRunnerError as err:
            print(f"plan-runner cache: the agent's CLI is left to the session step: {err.what}")
    save = should_save(env.get("PLAN_RUNNER_MODE", ""), env.get("PLAN_RUNNER_CACHE_HIT", ""), installed)
    if save:
        staged = stage(root, installed, staging)
        print(f"plan-runner cache: staged {', '.join(staged)} for the cache")
    setup_keys: dict[str, str] = {}
    if env.get("PLAN_RUNNER_DRY_RUN", "").strip().lower() != "true":  # a dry run sets nothing up
        from runner.drivers.actions.setup_cache import key_outputs

        setup_keys = key_outputs(env)  # the plan's `setup:` results: runner/drivers/actions/setup_cache.py
    step_outputs(env, save="true" if save else "false", cli=cli_path, **setup_keys)
    return 0


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    if argv[1:] == ["key"]:
        return cmd_key(env)
    if argv[1:] == ["prepare"]:
        return cmd_prepare(env)
    print("usage: action_cache.py key|prepare", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
