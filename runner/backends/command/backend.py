"""The `command` backend: any agent CLI, supervised, its limits read from its text.

`agent.executable` + `agent.args` is run in the work tree with the allow-listed
environment. The prompt goes to stdin, or (`prompt_via: file`) into a file whose
path replaces `{prompt_file}` in the args (appended when no arg names it). The
CLI's exit code and its last words decide the exit kind: a non-zero exit is a
rate limit, an auth failure, a transient error or a crash, by pattern; an exit
0 is a finish unless its last line announces a limit. Token usage is unknown (0).
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from runner.adapters import clock as wallclock
from runner.backends.common.base import SessionRequest
from runner.backends.common.endpoint import UNREACHABLE
from runner.backends.common.limits import TextSignal, parse_hints, parse_reset_with_pattern, read_signal
from runner.backends.common.signals import session_signals
from runner.core.errors import PlanRunnerError
from runner.core.evidence import ExitKind, SessionSignals
from runner.core.plan import AgentConfig
from runner.adapters.sandbox.supervise import Controller, ProcessExit, supervise

_TAIL_LINES = 50
_TRANSCRIPT_LIMIT = 5 * 2**20
_ERROR_LIMIT = 2000


@dataclass(frozen=True)
class CommandExit:
    """The classification of one CLI run (pure result of `classify_command_exit`)."""

    kind: ExitKind
    error: str | None = None
    reset_at: datetime | None = None


def _check_patterns(agent: AgentConfig) -> None:
    for pattern in (*agent.limit_patterns, *((agent.reset_pattern,) if agent.reset_pattern else ())):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PlanRunnerError(
                what=f"`agent` pattern {pattern!r} is not a valid regular expression",
                why=str(exc),
                fix="fix `limit_patterns` / `reset_pattern` in the plan's front matter (Python regex syntax)",
            ) from None


def _limit(signal: TextSignal, text: str, agent: AgentConfig, now: datetime) -> datetime | None:
    if agent.reset_pattern:
        return parse_reset_with_pattern(text, agent.reset_pattern, now) or signal.reset_at
    return signal.reset_at


def classify_command_exit(result: ProcessExit, stdout_tail: list[str], agent: AgentConfig,
                          now: datetime) -> CommandExit:
    """Exit kind from the supervisor's account and the CLI's last output. Pure.

    The CLI's words are read by the one shared reader (`limits.read_signal`: billing, auth, limits with their
    reset, unreachable endpoint, overload); `agent.limit_patterns` add to its limit patterns."""
    if result.reason == "stalled":
        return CommandExit(ExitKind.STALLED, f"no output for {agent.stall_s:g}s")
    if result.reason == "time_limit":
        return CommandExit(ExitKind.TIME_LIMIT, f"time limit of {agent.time_limit_s:g}s reached")
    if result.reason == "stopped":
        return CommandExit(ExitKind.CRASHED, result.stop_detail or "stopped")
    err_lines = [ln for ln in result.stderr_tail.splitlines() if ln.strip()]
    out_lines = [ln for ln in stdout_tail if ln.strip()]
    text = "\n".join(err_lines + out_lines)
    if result.returncode == 0:
        # a successful exit is only a limit if the CLI's very last words say so
        last = "\n".join(x[-1] for x in (out_lines, err_lines) if x)
        signal = read_signal(last, now, limit_patterns=agent.limit_patterns)
        if signal is not None and signal.kind == "rate_limit":
            return CommandExit(ExitKind.RATE_LIMIT, last[-_ERROR_LIMIT:], _limit(signal, last, agent, now))
        return CommandExit(ExitKind.FINISHED)
    error = ("\n".join(err_lines[-10:]) or "\n".join(out_lines[-5:]) or f"exited with code {result.returncode}")
    error = error[-_ERROR_LIMIT:]
    signal = read_signal(text, now, limit_patterns=agent.limit_patterns)
    if signal is None:
        return CommandExit(ExitKind.CRASHED, error)
    if signal.kind == "unreachable":
        error = f"{UNREACHABLE} ({signal.matched}): {error}"[:_ERROR_LIMIT]
    return CommandExit(signal.exit_kind, error, _limit(signal, text, agent, now) if signal.kind == "rate_limit" else None)


def _resolve_executable(request: SessionRequest) -> str:
    exe = request.agent.executable
    if not exe:
        raise PlanRunnerError(
            what="the command backend needs `agent.executable`",
            why="no agent CLI is named in the plan's front matter",
            fix="add under `agent:`\n  executable: my-agent   # a name on PATH, or a path relative to the repository",
        )
    if "/" in exe and not Path(exe).is_absolute():
        return str((request.workdir / exe).resolve())  # relative to the repository, not to plan-runner's cwd
    return exe


def _placeholders(request: SessionRequest, prompt_file: Path | None) -> dict[str, str]:
    def tree(p: Path | None) -> str:
        return "" if p is None else str(p if p.is_absolute() else (request.workdir / p).resolve())

    return {
        "{prompt_file}": str(prompt_file or ""),
        "{plan_file}": tree(request.plan_path),
        "{handoff_file}": tree(request.handoff_path),
        "{workdir}": str(request.workdir.resolve()),
        "{model}": request.agent.model or "",
        "{session_id}": request.resume_session_id or "",
    }


def build_argv(request: SessionRequest, prompt_file: Path | None) -> list[str]:
    values = _placeholders(request, prompt_file)
    args = []
    for arg in request.agent.args:
        for key, value in values.items():
            arg = arg.replace(key, value)
        args.append(arg)
    if prompt_file is not None and not any("{prompt_file}" in a for a in request.agent.args):
        args.append(str(prompt_file))
    return [_resolve_executable(request), *args]


# The line the transcript holds before each session's output (`plan-runner logs` reads one session's part by it).
SESSION_MARK = "=== plan-runner: a session started at "


class CommandBackend:
    name = "command"

    def run(self, request: SessionRequest) -> SessionSignals:
        agent = request.agent
        _check_patterns(agent)
        request.transcript_dir.mkdir(parents=True, exist_ok=True)
        prompt_file = None
        if agent.prompt_via == "file":
            prompt_file = request.write_input("prompt.md", request.prompt)
        argv = build_argv(request, prompt_file)
        values = _placeholders(request, prompt_file)
        env = dict(request.env)
        env.update({"PLAN_RUNNER_PROMPT_FILE": values["{prompt_file}"], "PLAN_RUNNER_PLAN": values["{plan_file}"],
                    "PLAN_RUNNER_HANDOFF": values["{handoff_file}"], "PLAN_RUNNER_WORKDIR": values["{workdir}"]})

        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        written = 0
        with (request.transcript_dir / "command-output.log").open("a", encoding="utf-8") as transcript:
            transcript.write(f"{SESSION_MARK}{wallclock.now().astimezone().isoformat()}\n")

            def on_line(line: str, ctl: Controller) -> None:
                nonlocal written
                tail.append(line[-4096:])
                if written < _TRANSCRIPT_LIMIT:
                    transcript.write(line + "\n")
                    written += len(line) + 1
                if line.strip():
                    request.on_event("text", line[:200])

            result = supervise(
                argv, cwd=request.workdir, env=env,
                stall_s=agent.stall_s, time_limit_s=agent.time_limit_s, on_line=on_line,
                stdin_text=request.prompt if agent.prompt_via == "stdin" else None,
                pid_file=request.pid_file, identity=request.identity,
            )
        # CLIs print reset clock times in the machine's local zone
        verdict = classify_command_exit(result, list(tail), agent, wallclock.now().astimezone())
        texts = [line for line in tail if line.strip()]
        return session_signals(
            self.name, verdict.kind,
            process=result,
            reset_at=verdict.reset_at,
            error=verdict.error,
            hints=parse_hints(["\n".join(texts[-20:])] if texts else [], result.output_bytes),
        )
