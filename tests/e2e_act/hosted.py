"""The GitHub-hosted runner as it is, for tests: its image's world-writable folders, and its way of running a
composite action's steps and of stopping them.

Read from the sources, not guessed:

* actions/runner-images `images/ubuntu/scripts/build/configure-system.sh`: `chmod -R 777 /opt` (no sticky bit;
  `/opt/hostedtoolcache` is `RUNNER_TOOL_CACHE`); `install-python.sh`: `PIPX_BIN_DIR=/opt/pipx_bin`, prepended to
  PATH; `install-nodejs.sh`: `chmod -R 777 /usr/local/bin`. `HostedImage` builds the same under a test folder.
* actions/runner `src/Runner.Worker/Handlers/ScriptHandler.cs` and `ScriptHandlerHelpers.cs`: a `run:` step's
  script is written to a file and run as `bash --noprofile --norc -e -o pipefail {0}`, `bash` found through PATH
  (`WhichUtil.Which`: an absolute shell is used as it is); a custom `shell:` is `COMMAND [ARGS with {0}]`.
* `src/Runner.Sdk/ProcessInvoker.cs` (`CancelAndKillProcessTree`, `killProcessOnCancel: false` for scripts):
  on cancellation the runner sends SIGINT to the step's own process (that pid only), waits 7.5 s for it to exit,
  sends SIGTERM, waits 2.5 s, then kills that process (`Process.Kill()`: the pid, not its tree). When the process
  has exited but its output pipe is still open (children hold it), the runner waits 5 s more and goes on.
* `src/Runner.Worker/Handlers/CompositeActionHandler.cs`: after a cancellation the remaining steps of the
  composite are skipped unless their `if:` holds with `cancelled()` true (no status function means `success()`).
* `src/Runner.Worker/JobExtension.cs`: at the job's end the runner kills "orphan" processes, those whose
  environment carries the job's `RUNNER_TRACKING_ID` and that it can read: its own user's (another user's or a
  setuid root process's environment is closed to it).
* `src/Runner.Worker/ActionRunner.cs`: a step's `$GITHUB_OUTPUT` is read in a `finally`, so a cancelled step's
  outputs count; the last value of a name wins.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SIGINT_WAIT_S = 7.5  # ProcessInvoker._sigintTimeout
SIGTERM_WAIT_S = 2.5  # ProcessInvoker._sigtermTimeout
STREAM_WAIT_S = 5.0  # ProcessExitedHandler: output still open after the process exited
BASH_FORMAT = "--noprofile --norc -e -o pipefail {0}"  # ScriptHandlerHelpers._defaultArguments["bash"]


@functools.cache
def system_python3() -> str:
    """A Python 3.11+ outside the test run's venv that cannot import plan-runner, as the hosted image's python3:
    the machine's /usr/bin/python3 when it is one (it lacks plan-runner's dependencies too), else the interpreter
    the venv was made from."""
    for candidate in ("/usr/bin/python3", os.path.realpath(getattr(sys, "_base_executable", sys.executable))):
        if os.access(candidate, os.X_OK) and subprocess.run(
                [candidate, "-I", "-c", "import sys; assert sys.version_info >= (3, 11)\n"
                 "import importlib.util as u; assert u.find_spec('runner') is None"],
                capture_output=True, cwd="/").returncode == 0:
            return candidate
    raise RuntimeError("no Python 3.11+ without plan-runner on this machine for the hosted image's python3")


class HostedImage:
    """The hosted image's folders under `root`: `/opt` 0777 with `hostedtoolcache` and `pipx_bin` (0777, no sticky
    bit), `/usr/local/bin` 0777, both first on PATH as on the image; plus the root-owned 0755 folder the action
    installs plan-runner in (PLAN_RUNNER_INSTALL_ROOT; on the image: /usr/local/lib/plan-runner)."""

    def __init__(self, root: Path, install_root: Path | None = None) -> None:
        self.root = root
        self.opt = root / "opt"
        self.tool_cache = self.opt / "hostedtoolcache"
        self.pipx_bin = self.opt / "pipx_bin"
        self.usr_local_bin = root / "usr-local-bin"
        for folder in (self.opt, self.tool_cache, self.pipx_bin, self.usr_local_bin):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)  # chmod -R 777: no sticky bit
        self.install_root = install_root or root / "usr-local-lib" / "plan-runner"
        self.install_root.parent.mkdir(parents=True, exist_ok=True)
        self.install_root.parent.chmod(0o755)
        self.temp = root / "runner-temp"  # RUNNER_TEMP: /home/runner/work/_temp, under the runner's 0750 home
        self.temp.mkdir(exist_ok=True)
        self.temp.chmod(0o700)
        # The image's python3 (/usr/bin/python3) has nothing of plan-runner: not the test run's venv, which is
        # first on this process's PATH and holds plan-runner and all its dependencies.
        self.usr_bin = root / "usr-bin"
        self.usr_bin.mkdir(exist_ok=True)
        self.usr_bin.chmod(0o755)
        if not (self.usr_bin / "python3").is_symlink():
            (self.usr_bin / "python3").symlink_to(system_python3())

    @property
    def path(self) -> str:
        return f"{self.pipx_bin}:{self.usr_local_bin}:{self.usr_bin}:{os.environ['PATH']}"

    def env(self) -> dict[str, str]:
        return {"PATH": self.path, "RUNNER_TOOL_CACHE": str(self.tool_cache), "PIPX_BIN_DIR": str(self.pipx_bin),
                "RUNNER_TEMP": str(self.temp), "PLAN_RUNNER_INSTALL_ROOT": str(self.install_root),
                "RUNNER_OS": "Linux", "RUNNER_ARCH": "X64"}


# --- the runner's expressions, as far as action.yml uses them --------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||!|\(|\)|,)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*))")
STATUS_FUNCTIONS = ("success", "failure", "cancelled", "always")


class Expression:
    """GitHub's expression language for `if:` and `${{ }}`: literals, context paths, `!`, `==`, `!=` (strings
    compared case-insensitively), `&&` and `||` (returning an operand, as GitHub does), status functions."""

    def __init__(self, text: str, contexts: dict[str, Any], status: str) -> None:
        self.tokens, pos = [], 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"cannot parse expression {text!r} at {pos}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i, self.contexts, self.status = 0, contexts, status

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        self.i += 1
        return self.tokens[self.i - 1]

    def value(self) -> Any:
        out = self.or_()
        assert self.i == len(self.tokens), f"trailing tokens in {self.tokens}"
        return out

    def or_(self) -> Any:
        left = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            left = left if truthy(left) else right
        return left

    def and_(self) -> Any:
        left = self.cmp()
        while self.peek() == "&&":
            self.take()
            right = self.cmp()
            left = right if truthy(left) else left
        return left

    def cmp(self) -> Any:
        left = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.unary()
            same = str_of(left).lower() == str_of(right).lower() if not isinstance(left, bool) else left == right
            left = same if op == "==" else not same
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        if self.peek() == "(":
            self.take()
            inner = self.or_()
            assert self.take()[1] == ")"
            return inner
        kind, text = self.take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if self.peek() == "(":  # a function
            self.take()
            args = []
            while self.peek() != ")":
                args.append(self.or_())
                if self.peek() == ",":
                    self.take()
            self.take()
            return self.call(text, args)
        node: Any = self.contexts
        for part in text.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def call(self, name: str, args: list[Any]) -> Any:
        if name == "success":
            return self.status == "success"
        if name == "failure":
            return self.status == "failure"
        if name == "cancelled":
            return self.status == "cancelled"
        if name == "always":
            return True
        if name == "contains":
            return str_of(args[1]).lower() in str_of(args[0]).lower()
        raise ValueError(f"unknown function {name}()")


def truthy(value: Any) -> bool:
    return bool(value) and value != ""


def str_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def condition_holds(text: str | None, contexts: dict[str, Any], status: str) -> bool:
    text = (text or "").strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    if not text:
        text = "success()"
    elif not any(re.search(rf"\b{f}\s*\(", text) for f in STATUS_FUNCTIONS):
        text = f"success() && ({text})"
    return truthy(Expression(text, contexts, status).value())


def interpolate(text: Any, contexts: dict[str, Any], status: str) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str_of(Expression(m.group(1), contexts, status).value()), str_of(text))


# --- running the composite action as the runner does --------------------------------------------------------------


@dataclass
class StepRun:
    id: str
    name: str
    ran: bool
    exit_code: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    signals: list[tuple[str, float]] = field(default_factory=list)  # (signal, seconds after the stop)
    exited_after_stop_s: float | None = None
    summary: str = ""
    seconds: float = 0.0  # how long the step ran


@dataclass
class JobRun:
    status: str
    steps: list[StepRun]
    log: list[str]
    orphans_killed: list[int]

    def step(self, step_id: str) -> StepRun:
        return next(s for s in self.steps if s.id == step_id)

    @property
    def text(self) -> str:
        return "".join(self.log)

    @property
    def summary(self) -> str:
        return "".join(s.summary for s in self.steps)


def parse_outputs(text: str) -> dict[str, str]:
    from tests.e2e_act.world import parse_outputs as parse

    return parse(text)


def which(command: str, path: str) -> str:
    """WhichUtil.Which: an absolute path as it is, else the first match on PATH."""
    if os.path.isabs(command) and os.path.isfile(command):
        return command
    found = shutil.which(command, path=path)
    if not found:
        raise FileNotFoundError(command)
    return found


class ActionsCache:
    """What `actions/cache/restore` and `actions/cache/save` do, as their action.yml and GitHub document them, over
    a folder instead of the cache service: restore copies the entry saved under exactly `key` to `path` (output
    `cache-hit`), save stores `path` under `key` unless an entry has that key (a key is never overwritten). No
    `restore-keys` (the action passes none). Files come back owned by the job's user, as tar extracts them.
    `root` None: no cache service (as under act, or a server without one): restore misses, save stores nothing,
    and neither fails the job (the actions warn and go on)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        self.saved: list[str] = []
        self.restored: list[str] = []

    def run(self, sid: str, step: dict, given: dict[str, str]) -> StepRun:
        key, path = given["key"], Path(given["path"])
        if self.root is None:
            return StepRun(sid, step.get("name", sid), ran=True, exit_code=0,
                           outputs={"cache-hit": "false"} if "restore" in step["uses"] else {})
        entry = self.root / hashlib.sha256(key.encode()).hexdigest()
        if step["uses"].startswith("actions/cache/restore@"):
            hit = entry.is_dir()
            if hit:
                if path.exists():
                    shutil.rmtree(path)
                shutil.copytree(entry, path, symlinks=True)
                self.restored.append(key)
            return StepRun(sid, step.get("name", sid), ran=True, exit_code=0,
                           outputs={"cache-hit": "true" if hit else "false", "cache-primary-key": key,
                                    "cache-matched-key": key if hit else ""})
        if not entry.exists():
            shutil.copytree(path, entry, symlinks=True)
            self.saved.append(key)
        return StepRun(sid, step.get("name", sid), ran=True, exit_code=0, outputs={})


class CompositeRunner:
    """Runs the steps of a composite action.yml in order with `if:` evaluated, each `run:` as the runner runs it,
    and stops the step running when `stop` is set, on the runner's schedule (SIGINT, 7.5 s, SIGTERM, 2.5 s, kill)."""

    def __init__(self, action_dir: Path, image: HostedImage, job_env: dict[str, str], inputs: dict[str, str],
                 github: dict[str, str], on_line: Callable[[str], None] | None = None) -> None:
        self.action_dir, self.image = action_dir, image
        self.manifest = yaml.safe_load((action_dir / "action.yml").read_text())
        self.job_env = {**job_env, **image.env(), "RUNNER_TRACKING_ID": f"github_{uuid.uuid4()}"}
        self.github = {"action_path": str(action_dir), **github}
        given = {k: v for k, v in inputs.items()}
        self.inputs_raw = given
        self.on_line = on_line or (lambda line: None)
        self.stop = threading.Event()
        self.stop_at: float | None = None
        self.log: list[str] = []
        self.cache = ActionsCache(None)  # the cache service's stand-in; by default, a service that is not there
        self.artifacts: dict[str, bytes] = {}  # what actions/upload-artifact kept, by artifact name

    def contexts(self, steps: dict[str, Any]) -> dict[str, Any]:
        ctx: dict[str, Any] = {"github": self.github, "steps": steps, "runner": {"temp": str(self.image.temp)}}
        inputs = {}
        for name, spec in (self.manifest.get("inputs") or {}).items():
            inputs[name] = self.inputs_raw.get(name, interpolate((spec or {}).get("default", ""), ctx, "success"))
        ctx["inputs"] = inputs
        return ctx

    def cancel(self) -> None:
        """The job is cancelled (or timed out) now."""
        self.stop_at = time.monotonic()
        self.stop.set()

    def run(self) -> JobRun:
        status = "success"
        steps_ctx: dict[str, Any] = {}
        runs: list[StepRun] = []
        for index, step in enumerate(self.manifest["runs"]["steps"]):
            if self.stop.is_set() and status == "success":
                status = "cancelled"
            ctx = self.contexts(steps_ctx)
            sid = step.get("id") or f"__{index}"
            if not condition_holds(step.get("if"), ctx, status):
                runs.append(StepRun(sid, step.get("name", sid), ran=False))
                steps_ctx[sid] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                continue
            if "uses" in step and step["uses"].startswith(("actions/cache/restore@", "actions/cache/save@")):
                result = self.cache.run(sid, step, {k: interpolate(v, ctx, status)
                                                    for k, v in (step.get("with") or {}).items()})
                self.log.append(f"[{sid}] {result.outputs}")
            elif "uses" in step and step["uses"].startswith("actions/upload-artifact@"):
                result = self.upload(sid, step, {k: interpolate(v, ctx, status)
                                                 for k, v in (step.get("with") or {}).items()})
                self.log.append(f"[{sid}] uploaded {sorted(self.artifacts)}")
            elif "uses" in step:
                raise AssertionError(f"step {step.get('name')!r} ({step['uses']}) would run: this world has no network "
                                     "for actions")
            else:
                began = time.monotonic()
                result = self.run_script(sid, step, ctx, status)
                result.seconds = time.monotonic() - began
            runs.append(result)
            outcome = "success" if result.exit_code == 0 else "failure"
            if self.stop.is_set() and result.signals:
                outcome = "cancelled"
            steps_ctx[sid] = {"outputs": result.outputs, "outcome": outcome, "conclusion": outcome}
            if self.stop.is_set():
                status = "cancelled"
            elif result.exit_code != 0 and status == "success":
                status = "failure"
        orphans = self.kill_orphans()
        return JobRun(status, runs, self.log, orphans)

    def upload(self, sid: str, step: dict, given: dict[str, str]) -> StepRun:
        """actions/upload-artifact's stand-in: the file kept under its name in `self.artifacts` (the runner's artifact
        service is not in this world); a missing file is no artifact (`if-no-files-found: ignore`)."""
        path = Path(given.get("path", ""))
        if path.is_file():
            self.artifacts[given["name"]] = path.read_bytes()
        elif given.get("if-no-files-found", "warn") == "error":
            return StepRun(sid, step.get("name", sid), ran=True, exit_code=1)
        return StepRun(sid, step.get("name", sid), ran=True, exit_code=0,
                       outputs={"artifact-id": str(len(self.artifacts))} if path.is_file() else {})

    def run_script(self, sid: str, step: dict, ctx: dict[str, Any], status: str) -> StepRun:
        env = {**self.job_env}
        for name, value in (step.get("env") or {}).items():
            env[name] = interpolate(value, ctx, status)
        out_file = self.image.temp / f"output-{uuid.uuid4()}"
        summary_file = self.image.temp / f"summary-{uuid.uuid4()}"
        out_file.write_text("")
        summary_file.write_text("")
        env["GITHUB_OUTPUT"], env["GITHUB_STEP_SUMMARY"] = str(out_file), str(summary_file)
        env["GITHUB_ACTION_PATH"] = str(self.action_dir)
        script = self.image.temp / f"{uuid.uuid4()}.sh"
        script.write_text(interpolate(step["run"], ctx, status) if "${{" in step["run"] else step["run"])
        shell = step.get("shell", "bash")
        command, _, args = shell.partition(" ")
        if not args:
            args = BASH_FORMAT if command == "bash" else "{0}"
        argv = [which(command, env["PATH"]), *shlex.split(args.replace("{0}", shlex.quote(str(script))))]
        proc = subprocess.Popen(argv, env=env, cwd=env.get("GITHUB_WORKSPACE") or None, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        reader.start()
        run = StepRun(sid, step.get("name", sid), ran=True)
        if self.stop.is_set():  # a step run after the stop (an `if: cancelled()` step) is not stopped again
            proc.wait()
        else:
            while proc.poll() is None and not self.stop.wait(0.05):
                pass
            if proc.poll() is None:
                self._stop(proc, run)
        reader.join(STREAM_WAIT_S)
        if not reader.is_alive() and proc.stdout is not None:
            proc.stdout.close()
        run.exit_code = proc.returncode
        run.outputs = parse_outputs(out_file.read_text())
        run.summary = summary_file.read_text()
        return run

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log.append(line)
            self.on_line(line)

    def _stop(self, proc: subprocess.Popen, run: StepRun) -> None:
        assert self.stop_at is not None
        for sig, wait in ((signal.SIGINT, SIGINT_WAIT_S), (signal.SIGTERM, SIGTERM_WAIT_S)):
            os.kill(proc.pid, sig)
            run.signals.append((sig.name, time.monotonic() - self.stop_at))
            try:
                proc.wait(timeout=wait)
                run.exited_after_stop_s = time.monotonic() - self.stop_at
                return
            except subprocess.TimeoutExpired:
                continue
        proc.kill()
        run.signals.append(("SIGKILL", time.monotonic() - self.stop_at))
        proc.wait()
        run.exited_after_stop_s = time.monotonic() - self.stop_at

    def kill_orphans(self) -> list[int]:
        """The job's end: kill the processes carrying this job's RUNNER_TRACKING_ID that the job's user can read."""
        me, tag, killed = os.getuid(), f"RUNNER_TRACKING_ID={self.job_env['RUNNER_TRACKING_ID']}".encode(), []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != me or tag not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                if me == 0 and (entry / "comm").read_text().strip() == "sudo":
                    continue  # setuid root: its environment is closed to the runner's own (unprivileged) user
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except (OSError, ProcessLookupError):
                continue
        return killed
