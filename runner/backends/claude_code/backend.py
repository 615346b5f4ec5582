"""The `claude-code` backend: the real Claude Code CLI in stream-json mode, under supervision.

`claude -p --input-format stream-json --output-format stream-json --verbose`: the
prompt goes in as a stream-json user message and stdin stays open, so the token
nudge can be written as another user message while the agent works. When a turn
ends (a `result` line) stdin is closed and the CLI exits.

Permissions: plan-runner runs as root in CI, where `--dangerously-skip-permissions`
(and `--permission-mode bypassPermissions`) are refused. We use
`--permission-mode dontAsk` with an explicit `--allowedTools` list: the listed tools
run without a prompt, anything else is denied at once instead of waiting for an
approval nobody can give. See docs/claude-code.md.

The CLI's configuration and transcripts live in `CLAUDE_CONFIG_DIR`, pointed into
`request.transcript_dir`, so the state keeps `projects/<cwd-slug>/<session-id>.jsonl`
and a later job (even in another checkout path) can `--resume <session-id>`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from runner.backends.common.signals import session_signals
from runner.backends.common.base import SessionRequest, executable_of
from runner.backends.common.endpoint import probe, shown, unreachable_reason
from runner.backends.common.meter import write_meter
from runner.backends.claude_code.streamjson import (
    LONG_RETRY_S, MAX_LIMIT_RETRIES, STOP_AUTH, STOP_RATE_LIMIT, STOP_TOKEN_BUDGET,
    UNREACHABLE_RETRIES, StreamJsonParser, build_signals, classify_api_error,
)
from runner.core.backend_spec import BACKENDS
from runner.core.evidence import ExitKind, SessionSignals
from runner.core.plan import AgentConfig
from runner.core.progress import tool_input_text
from runner.adapters.sandbox.supervise import NUDGE_TEXT, Controller, TokenMeter, supervise

NAME = "claude-code"
# Work-tree tools only: no web access unless the plan adds it through `agent.args`.
ALLOWED_TOOLS = ("Bash", "Edit", "MultiEdit", "Write", "Read", "Glob", "Grep", "LS", "NotebookEdit", "TodoWrite", "Task")
# Quiet, reproducible runs: no updater, no telemetry or error reports, no non-essential calls.
QUIET_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
CONFIG_SUBDIR = "claude-config"
DEFAULT_BASE_URL = "https://api.anthropic.com"
STREAM_LOG = BACKENDS[NAME].transcripts[0]  # claude-stream.jsonl, what `logs` reads
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def user_message(text: str) -> str:
    """One stream-json input line carrying a user message."""
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


def allowed_tools(agent: AgentConfig | None) -> tuple[str, ...]:
    """plan-runner's own tools, then the plan's `allowed_tools`, then each MCP server's (`mcp__<name>`): merged, so
    a plan adds to the list and never replaces it (`agent.args` may not set one: runner.core.plan)."""
    if agent is None:
        return ALLOWED_TOOLS
    return tuple(dict.fromkeys([*ALLOWED_TOOLS, *agent.allowed_tools, *(f"mcp__{n}" for n in agent.mcp_servers)]))


def mcp_config(agent: AgentConfig) -> dict:
    """`--mcp-config`'s JSON: a server's variables as `${NAME}`, expanded by the CLI from the agent's environment
    (the file holds no value)."""
    servers: dict[str, dict[str, object]] = {}
    for name, server in agent.mcp_servers.items():
        if server.url is not None:
            servers[name] = {"type": "http", "url": server.url}
        else:
            servers[name] = {"type": "stdio", "command": server.command, "args": list(server.args),
                             "env": {n: "${" + n + "}" for n in server.env}}
    return {"mcpServers": servers}


def build_claude_argv(
    executable: str, *, model: str | None, resume_session_id: str | None, extra_args: tuple[str, ...] = (),
    agent: AgentConfig | None = None, mcp_config_path: Path | None = None,
) -> list[str]:
    # No settings file is read (user: the config dir the agent could write last session and that is kept for the
    # next; project and local: `.claude/` in the work tree) and no MCP server but the plan's: what the agent may do
    # is set by this command line alone, never widened by a file it wrote.
    argv = [executable, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
            "--setting-sources", "", "--strict-mcp-config",
            "--permission-mode", "dontAsk", "--allowedTools", ",".join(allowed_tools(agent))]
    if agent is not None and agent.disallowed_tools:
        argv += ["--disallowedTools", ",".join(agent.disallowed_tools)]
    if mcp_config_path is not None:
        argv += ["--mcp-config", str(mcp_config_path)]
    if model:
        argv += ["--model", model]
    if resume_session_id:
        argv += ["--resume", resume_session_id]
    return argv + list(extra_args)


def build_claude_env(request: SessionRequest) -> dict[str, str]:
    """`request.env` as given (already allow-listed), plus the config dir and the quiet switches."""
    env = dict(request.env)
    config = request.state_subdir(CONFIG_SUBDIR)
    env["CLAUDE_CONFIG_DIR"] = str(config)
    env.setdefault("HOME", str(config))  # the CLI needs one; the allow-list normally passes the real HOME
    for name, value in QUIET_ENV.items():
        env.setdefault(name, value)
    return env


def find_claude(request: SessionRequest) -> str:
    """`agent.executable`, else PLAN_RUNNER_CLAUDE, else `claude` on the PATH (the spec's executable)."""
    return executable_of(NAME, request.agent)


def collect_transcript(transcript_dir: Path, session_id: str) -> Path | None:
    """Where the CLI saved a session's conversation (`projects/<cwd-slug>/<id>.jsonl`), if it did."""
    projects = Path(transcript_dir) / CONFIG_SUBDIR / "projects"
    found = sorted(projects.glob(f"*/{session_id}.jsonl")) if _SESSION_ID.match(session_id) else []
    return found[0] if found else None


STREAM_LOG_LIMIT = 5 * 2**20


class ClaudeCodeBackend:
    name = NAME

    def __init__(self, *, kill_grace_s: float = 2.0) -> None:
        self.kill_grace_s = kill_grace_s

    def run(self, request: SessionRequest) -> SessionSignals:
        agent = request.agent
        resume = request.resume_session_id
        if resume is not None and not _SESSION_ID.match(resume):
            return session_signals(NAME, ExitKind.CRASHED,
                                   error=f"cannot resume: {resume!r} is not a Claude Code session id")
        env = build_claude_env(request)
        config = request.write_input("mcp-config.json", json.dumps(mcp_config(agent), indent=2)) \
            if agent.mcp_servers else None
        argv = build_claude_argv(find_claude(request), model=agent.model, resume_session_id=resume, extra_args=agent.args,
                                 agent=agent, mcp_config_path=config)
        parser = StreamJsonParser()
        meter = TokenMeter(agent.session_tokens)
        nudges = 0
        metered = [0]  # the live token count last written to the meter file
        unreachable: list[str] = []  # the endpoint, once probed after the CLI's retries got no answer

        logged = 0

        def on_line(line: str, ctl: Controller) -> None:
            nonlocal nudges, logged
            # The log is for humans and is kept with the state: bounded, so a runaway stream
            # cannot grow the state branch (resuming uses the CLI's own session file).
            if logged < STREAM_LOG_LIMIT:
                log.write(line[: STREAM_LOG_LIMIT - logged] + "\n")
                logged += len(line) + 1
            for kind, detail in parser.feed(line):
                request.on_event(kind, detail)
                if kind == "tool" and parser.last_tool_input is not None:
                    request.on_event("tool_input", tool_input_text(parser.last_tool_input))
                if kind == "result":
                    ctl.close_stdin()  # the turn is over: let the CLI exit
                elif kind == "retry" and parser.unanswered_retries >= UNREACHABLE_RETRIES and not unreachable:
                    # no HTTP answer at all, twice: the CLI would retry for minutes (10 tries); say why, and stop
                    base_url = env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
                    unreachable.append(base_url)  # probed once per session
                    why = probe(base_url)  # None: it can be reached after all (a flaky link): the CLI retries on
                    if why is not None:
                        request.on_event("unreachable", shown(base_url))
                        ctl.stop(unreachable_reason(base_url, "ANTHROPIC_API_KEY", found=why))
                elif kind == "retry":
                    failure = classify_api_error(parser.retry_status, parser.retry_code)
                    if failure is ExitKind.AUTH:
                        ctl.stop(STOP_AUTH)  # retrying a rejected key only burns the session's time
                    elif failure is ExitKind.RATE_LIMIT and (
                            (parser.retry_delay_s or 0) >= LONG_RETRY_S or parser.retry_attempts >= MAX_LIMIT_RETRIES):
                        ctl.stop(STOP_RATE_LIMIT)  # it is waiting out a limit: back off until the reset instead
            if parser.live_tokens != metered[0]:
                metered[0] = parser.live_tokens
                cost, estimated, _ = parser.cost()
                write_meter(request.transcript_dir, parser.live_tokens, cost, estimated)
            verdict = meter.set_used(parser.budget_tokens)
            if verdict == "stop":
                ctl.stop(STOP_TOKEN_BUDGET)
            elif verdict == "nudge" and ctl.send(user_message(NUDGE_TEXT)):
                nudges += 1
                request.on_event("nudge", str(meter.used))

        log_path = Path(request.transcript_dir) / STREAM_LOG
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a", encoding="utf-8") as log:
            exit_ = supervise(
                argv,
                cwd=request.workdir,
                env=env,
                stall_s=agent.stall_s,
                time_limit_s=agent.time_limit_s,
                on_line=on_line,
                stdin_text=user_message(request.prompt),
                keep_stdin_open=True,
                kill_grace_s=self.kill_grace_s,
                pid_file=request.pid_file,
                identity=request.identity,
            )
        if parser.session_id is None and resume is not None:
            parser.session_id = resume  # killed before the init line: the session is still the resumed one
        signals = build_signals(
            parser,
            backend=NAME,
            reason=exit_.reason,
            returncode=exit_.returncode,
            stop_detail=exit_.stop_detail,
            stderr_tail=exit_.stderr_tail,
            output_bytes=exit_.output_bytes,
            duration_s=exit_.duration_s,
            nudges=nudges,
        )
        write_meter(request.transcript_dir, signals.total_tokens, signals.cost_usd, signals.cost_estimated)
        return signals
