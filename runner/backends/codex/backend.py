"""The `codex` backend: `codex exec --json` under supervision; resume with `codex exec resume <thread id>`.

Codex keeps its sessions (rollouts) under `CODEX_HOME`; it is pointed into the
transcript directory so the state keeps them and a later job can resume. With
`OPENAI_API_KEY` in the agent's environment a provider is configured on the
command line (`OPENAI_BASE_URL` or the public endpoint, Responses wire API), so
no login or config file is needed. Codex reports usage only when a turn ends, so
no token nudge can reach it mid-turn; the stall watchdog and time limit bound it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from runner.adapters import clock as wallclock
from runner.backends.common.signals import session_signals
from runner.backends.common.base import SessionRequest, executable_of
from runner.backends.common.claims import parse_claims
from runner.backends.codex.codexjson import CodexFold, classify_codex_error, estimate_cost
from runner.backends.common.meter import write_meter
from runner.adapters.sandbox import fsafe
from runner.core.backend_spec import BACKENDS
from runner.core.errors import PlanRunnerError
from runner.core.evidence import ExitKind, Hints, SessionSignals
from runner.core.fingerprint import normalise_error
from runner.core.plan import AgentConfig
from runner.adapters.sandbox.supervise import Controller, supervise

PROVIDER = "plan_runner"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
_FINAL_TEXT_LIMIT = 2000
_THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# Options that choose Codex's own sandbox; without one the job itself is the sandbox (see docs/backends.md).
_SANDBOX_FLAGS = ("-s", "--sandbox", "--full-auto", "--dangerously-bypass-approvals-and-sandbox")


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a valid TOML basic string


def build_codex_argv(
    executable: str,
    *,
    model: str | None,
    workdir: Path,
    env: dict[str, str],
    resume_thread_id: str | None,
    extra_args: tuple[str, ...] = (),
    request_max_retries: int = 2,
    stream_max_retries: int = 2,
    agent: AgentConfig | None = None,
) -> list[str]:
    """The command line; the prompt goes on stdin (`-`), so its size never meets an argv limit."""
    options = ["--json", "--skip-git-repo-check", "-C", str(workdir)]
    if model:
        options += ["-m", model]
    if env.get("OPENAI_API_KEY"):
        base_url = env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        provider = f"model_providers.{PROVIDER}"
        options += [
            "-c", f"model_provider={_toml_string(PROVIDER)}",
            "-c", f"{provider}.name={_toml_string('plan-runner')}",
            "-c", f"{provider}.base_url={_toml_string(base_url)}",
            "-c", f"{provider}.env_key={_toml_string('OPENAI_API_KEY')}",
            "-c", f"{provider}.wire_api={_toml_string('responses')}",
            "-c", f"{provider}.request_max_retries={int(request_max_retries)}",
            "-c", f"{provider}.stream_max_retries={int(stream_max_retries)}",
        ]
    if agent is not None:
        options += mcp_options(agent)
    if not any(a in _SANDBOX_FLAGS or a.startswith("--sandbox=") for a in extra_args):
        options.append("--dangerously-bypass-approvals-and-sandbox")
    options += list(extra_args)
    if resume_thread_id:
        # `resume` takes its own options after the subcommand; the shared ones are accepted before it
        return [executable, "exec", *options, "resume", resume_thread_id, "-"]
    return [executable, "exec", *options, "-"]


LOGIN_FILE = "auth.json"  # a ChatGPT login (`codex login`), under CODEX_HOME


def link_login(request: SessionRequest, home: Path, login: Path) -> None:
    """CODEX_HOME/auth.json -> the agent's private copy of the login (runner.adapters.sandbox.agent_creds): made
    as the agent's user in its own folder; the saved state copies regular files only, never a link."""
    from runner.adapters.sandbox import proc

    target = home / LOGIN_FILE
    done = proc.run(["ln", "-sfn", str(login), str(target)], cwd="/", env={"PATH": "/usr/bin:/bin"}, time_limit_s=60,
                    identity=request.identity)
    if done.returncode != 0:
        raise PlanRunnerError(what="could not give Codex its login", why=f"`ln -s` into {home} failed",
                              fix="check that the agent's state folder is writable by the agent's user")


def mcp_options(agent: AgentConfig) -> list[str]:
    """The plan's MCP servers as Codex's own config (`-c mcp_servers.<name>.…`, TOML values): a stdio server's
    command, args and `env_vars` (the names Codex forwards from the agent's environment: no value on the command
    line), an HTTP server's url; `mcp__<server>__<tool>` of allowed/disallowed_tools as its enabled/disabled_tools."""
    options: list[str] = []

    def tools(rules: tuple[str, ...], name: str) -> list[str]:
        return [r.split("__", 2)[2] for r in rules if r.startswith(f"mcp__{name}__") and len(r.split("__", 2)) == 3]

    for name, server in agent.mcp_servers.items():
        key = f"mcp_servers.{name}"
        if server.url is not None:
            options += ["-c", f"{key}.url={_toml_string(server.url)}"]
        elif server.command is not None:  # always, when there is no url (McpServer's validator)
            options += ["-c", f"{key}.command={_toml_string(server.command)}",
                        "-c", f"{key}.args={json.dumps(list(server.args))}"]
            if server.env:
                options += ["-c", f"{key}.env_vars={json.dumps(list(server.env))}"]
        enabled, disabled = tools(agent.allowed_tools, name), tools(agent.disallowed_tools, name)
        if enabled:
            options += ["-c", f"{key}.enabled_tools={json.dumps(enabled)}"]
        if disabled:
            options += ["-c", f"{key}.disabled_tools={json.dumps(disabled)}"]
    return options


def find_codex(request: SessionRequest) -> str:
    """`agent.executable`, else PLAN_RUNNER_CODEX, else `codex` on the agent's PATH (the spec's executable)."""
    return executable_of("codex", request.agent)



EVENT_LOG = BACKENDS["codex"].transcripts[0]  # codex-events.jsonl, what `logs` reads
EVENT_LOG_LIMIT = 5 * 2**20  # bytes of the event log kept per session

class CodexBackend:
    name = "codex"

    def __init__(self, *, request_max_retries: int = 2, stream_max_retries: int = 2, kill_grace_s: float = 2.0) -> None:
        self.request_max_retries = request_max_retries
        self.stream_max_retries = stream_max_retries
        self.kill_grace_s = kill_grace_s

    def run(self, request: SessionRequest) -> SessionSignals:
        agent = request.agent
        resume = request.resume_session_id
        if resume is not None and not _THREAD_ID.match(resume):
            return session_signals(self.name, ExitKind.CRASHED, error=f"cannot resume: {resume!r} is not a Codex thread id")
        env = dict(request.env)
        login = request.credential_files.get(LOGIN_FILE)
        if "CODEX_HOME" not in env:
            home = request.state_subdir("codex-home")
            env["CODEX_HOME"] = str(home)
            if login is not None:
                link_login(request, home, login)
        argv = build_codex_argv(
            find_codex(request), model=agent.model, workdir=request.workdir, env=env, resume_thread_id=resume,
            extra_args=agent.args, request_max_retries=self.request_max_retries,
            stream_max_retries=self.stream_max_retries, agent=agent,
        )
        fold = CodexFold()
        transcript = Path(request.transcript_dir) / EVENT_LOG
        transcript.parent.mkdir(parents=True, exist_ok=True)

        logged = 0

        with transcript.open("a", encoding="utf-8") as log:
            def on_line(line: str, ctl: Controller) -> None:
                nonlocal logged
                # Kept with the state for humans: bounded per session like Claude Code's stream log (the
                # state bounds the directory in total); resuming uses Codex's own session files.
                if logged < EVENT_LOG_LIMIT:
                    log.write(line[: EVENT_LOG_LIMIT - logged] + "\n")
                    logged += len(line) + 1
                event = fold.feed(line)
                if event is None:
                    return
                kind = event["type"]
                if kind == "item.started" and fold.last_tool:
                    request.on_event("tool", fold.last_tool)
                elif kind in ("turn.completed", "turn.failed"):
                    request.on_event("tokens", str(fold.input_tokens + fold.output_tokens))
                    write_meter(request.transcript_dir, fold.input_tokens + fold.output_tokens,
                                estimate_cost(agent.model, fold.input_tokens, fold.cached_input_tokens,
                                              fold.output_tokens), True)

            try:
                exit_ = supervise(
                    argv, cwd=request.workdir, env=env, stall_s=agent.stall_s,
                    time_limit_s=agent.time_limit_s, on_line=on_line, stdin_text=request.prompt,
                    kill_grace_s=self.kill_grace_s, pid_file=request.pid_file, identity=request.identity,
                )
            finally:
                if login is not None and env["CODEX_HOME"] == str(request.state_dir.resolve() / "codex-home"):
                    # the login (or the copy Codex refreshed in its place) never reaches the saved state; walked
                    # from the state folder's parent, plan-runner's own (fsafe descends without following a link);
                    # nothing of the agent runs now: its room's PID namespace ended with it
                    fsafe.remove(Path(env["CODEX_HOME"]) / LOGIN_FILE, below=request.state_dir.resolve().parent)

        kind, error, reset_at = ExitKind.FINISHED, None, None
        if exit_.reason == "stalled":
            kind, error = ExitKind.STALLED, f"no output for {agent.stall_s:g}s"
        elif exit_.reason == "time_limit":
            kind, error = ExitKind.TIME_LIMIT, f"time limit of {agent.time_limit_s:g}s reached"
        elif fold.error is not None:
            kind, reset_at = classify_codex_error(fold.error, wallclock.now().astimezone())
            error = normalise_error(fold.error)
        elif exit_.returncode != 0:
            stderr = exit_.stderr_tail.strip()
            kind, reset_at = classify_codex_error(stderr, wallclock.now().astimezone()) if stderr else (ExitKind.CRASHED, None)
            error = normalise_error(stderr or f"codex exited with code {exit_.returncode}")
        elif fold.events == 0 or fold.turns_completed == 0:
            kind, error = ExitKind.CRASHED, "codex printed no completed turn (is this `codex exec --json` output?)"

        claims, claimed_done = parse_claims(fold.messages[-1:])
        cost = estimate_cost(agent.model, fold.input_tokens, fold.cached_input_tokens, fold.output_tokens)
        return session_signals(
            self.name, kind,
            process=exit_,
            session_id=fold.thread_id or resume,
            input_tokens=fold.input_tokens,
            output_tokens=fold.output_tokens,
            cost_usd=cost,
            # usage comes only with a turn's end: a turn cut short (killed, stalled) spent more than this
            cost_lower_bound=fold.turns_started > fold.turns_completed + int(fold.turn_failed),
            reset_at=reset_at,
            error=error,
            output_bytes=fold.work_bytes,
            tool_calls=fold.tool_calls,
            tool_failures=fold.tool_failures,
            last_tool=fold.last_tool,
            hints=Hints(
                claimed_done=claimed_done,
                stop_reason="turn.failed" if fold.turn_failed else ("turn.completed" if fold.turns_completed else None),
                is_error=True if fold.turn_failed else None,
                final_text=fold.final_text[-_FINAL_TEXT_LIMIT:],
                claims=claims,
                empty_output=not fold.messages and fold.tool_calls == 0,
                empty_plan=fold.plan_items == 0 or fold.tool_calls == 0,
            ),
        )
