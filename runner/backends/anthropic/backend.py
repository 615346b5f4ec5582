"""The `anthropic` backend: a compact agent loop on the Messages API, in-process.

The loop owns the end of a session: it stops when the model calls no more tools,
on a refusal, on a bound (turns, tokens, time, stall), or when the model is stuck
(runner.backends.anthropic.stuck: the same failing call, the same result again and again,
two calls taking turns, with no change to the work tree between; the first loop is
named to the model once, the calls after it are sampled with a temperature (greedy decoding
repeats itself) and the rules count anew; the second ends the session and the record's error
says which rule). A conversation the model's context window cannot hold ("prompt is too long") is shortened
(runner.backends.anthropic.compact: older tool results, then the oldest exchanges) and sent again. What the model says
about its work (stop reason, "done", "all tests pass") is normalised into
`Hints` and decides nothing. The conversation is written to
`<transcript_dir>/<session id>.json` after every turn so a later job resumes it.

Retries: the SDK's own retries are off (`max_retries=0` on the client) and this
loop retries transient failures itself, `max_retries` times with exponential
backoff honouring `retry-after`, so the bound is one number and a hanging
server costs one stall timeout, not one per SDK retry.
"""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anthropic

from runner.adapters import clock as wallclock
from runner.backends.anthropic.compact import compact, too_long
from runner.backends.anthropic.tools import TOOL_SPECS, Workspace
from runner.backends.anthropic.errors import ApiFailure, classify_api_error
from runner.backends.common.base import SessionRequest
from runner.backends.common.claims import parse_claims
from runner.backends.common.endpoint import probe, shown, unreachable_reason
from runner.backends.common.meter import anthropic_cost, budget_tokens, token_count, write_meter
from runner.backends.common.signals import session_signals
from runner.backends.anthropic.stuck import Step, step, stuck
from runner.core.evidence import ExitKind, Hints, SessionSignals
from runner.core.progress import tool_input_text
from runner.adapters.sandbox.supervise import NUDGE_TEXT, Controller, TokenMeter, supervise
from runner.backends.common import jsonline

if TYPE_CHECKING:
    from runner.core.plan import AgentConfig

DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_BASE_URL = "https://api.anthropic.com"
_FINAL_TEXT_LIMIT = 2000
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_STOP_REASONS = ("end_turn", "max_tokens", "tool_use", "pause_turn", "refusal", "stop_sequence")

# The method lives here, in the built-in agent's own prompt, so a user's plan need not spell it out and nothing
# of it reaches Claude Code's or Codex's prompts (they bring their own). Small models did the tick before the work,
# overwrote files they had never read and stopped at the first red run of the gate (docs/real-model.md).
SYSTEM_PROMPT = (
    "You are a coding agent working unattended in a git work tree. Use the tools to read, change and run "
    "things; paths are relative to the work tree and cannot leave it.\n"
    "Do a task in this order:\n"
    "1. read_file each file the task names, before you change it.\n"
    "2. Change it: edit_file to change a line or two (old_string: a whole line copied exactly from the file); "
    "edit_file with an empty old_string to add new code at the end of the file; or write_file with the whole new "
    "text, keeping everything that is already there.\n"
    "3. Run the gate command with run_shell. If it fails, read the error, fix the code and run it again, until "
    "it passes.\n"
    "4. Commit: run_shell `git add -A && git commit -m '<what you changed>'`.\n"
    "5. Only then tick the checkpoint with mark_done, and commit the tick: run_shell `git commit -am tick`.\n"
    "6. Stop calling tools and say briefly what you did."
)

# After the first loop is named, the session's later calls ask for sampling at this temperature (the Messages API's
# `temperature` field); nothing is sent before, so a session without a loop asks exactly what it always did. Greedy
# decoding of a small model gives the same call again however the loop is named: the 1.5B flipped `* 100` and
# `// 100` and wrote the same refused parameter after being told it goes round in circles (docs/real-model.md,
# issue 47, fourth round). Never sent to Anthropic's own API: Claude samples already (its default temperature is
# 1) and the API version the SDK sends since 2026-10-21 refuses the field; an other endpoint that refuses it (a 400
# naming it) gets the call again without it.
LOOP_TEMPERATURE = 1.0  # the model's own distribution, neither sharpened nor flattened (0.7 still gave the same calls)


def samples(request: SessionRequest) -> bool:
    """Whether the session's endpoint is asked for a temperature after a named loop: any but Anthropic's own API."""
    base_url = request.env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
    return (urlsplit(base_url).hostname or "").lower() != urlsplit(DEFAULT_BASE_URL).hostname


def refuses_sampling(exc: BaseException) -> bool:
    """A 400 that names the temperature field: the endpoint does not take it."""
    return (isinstance(exc, anthropic.BadRequestError) and exc.status_code == 400
            and "temperature" in str(exc.message).lower())

LOOP_TEXT = ("You are going round in circles: {loop}. The same calls will give the same results, and if they come "
             "round again the session ends. Do something different: read the last failure again, then change the "
             "code (not the tests) another way.")


def estimate_cost(model: str, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0) -> float | None:
    """A list-price estimate (runner.backends.common.meter); None for a model the table does not know."""
    return anthropic_cost(model, input_tokens, output_tokens, cache_read, cache_write)


# ---- the saved conversation ---------------------------------------------------------------------


def transcript_path(transcript_dir: Path, session_id: str) -> Path:
    return Path(transcript_dir) / f"{session_id}.json"


def load_transcript(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list):
        raise ValueError("no `messages` list")
    return messages


def write_transcript(path: Path, session_id: str, model: str, messages: list[dict[str, Any]]) -> None:
    """Atomically: a job killed mid-write must not leave half a conversation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    payload = {"version": 1, "session_id": session_id, "model": model, "messages": messages}
    tmp.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)


def resume_messages(saved: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The saved conversation made valid again, with `prompt` as the next user turn.

    A job killed after the model asked for tools left tool_use blocks without results;
    the API rejects that, so each gets a result saying it was not run. Empty assistant
    turns are dropped and consecutive user turns merged, for the same reason.
    """
    out: list[dict[str, Any]] = []
    for msg in saved:
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if not blocks:
            continue
        if out and out[-1]["role"] == msg["role"]:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": msg["role"], "content": blocks})
    new_turn: list[dict[str, Any]] = []
    if out and out[-1]["role"] == "assistant":
        for block in out[-1]["content"]:
            if block.get("type") == "tool_use":
                new_turn.append({"type": "tool_result", "tool_use_id": block["id"], "is_error": True,
                                 "content": "not run: the previous session ended before this tool call ran"})
    new_turn.append({"type": "text", "text": prompt})
    if out and out[-1]["role"] == "user":
        out[-1]["content"].extend(new_turn)
    else:
        out.append({"role": "user", "content": new_turn})
    return out


def _block_dict(block: Any) -> dict[str, Any]:
    """The minimal form of a response block that the API accepts back as input."""
    kind = getattr(block, "type", None)
    if kind == "text":  # the model's words, written to the transcript and the record: UTF-8-safe (jsonline)
        return {"type": "text", "text": jsonline.utf8_safe(block.text)}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": jsonline.utf8_safe(block.input)}
    return jsonline.utf8_safe(block.model_dump(mode="json", exclude_none=True))


# ---- the loop -----------------------------------------------------------------------------------


class _End(Exception):
    def __init__(self, kind: ExitKind, error: str | None = None, reset_at: datetime | None = None) -> None:
        super().__init__(error or kind.value)
        self.kind, self.error, self.reset_at = kind, error, reset_at


@dataclass
class _Tally:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output_bytes: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    nudges: int = 0
    last_tool: str | None = None
    stop_reason: str | None = None
    final_text: str = ""
    final_empty: bool = False
    texts: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)  # every tool call, as the stuck rules read it
    stuck_from: int = 0  # the stuck rules read the steps from here: after a loop was named, they count anew
    loop_named: bool = False
    temperature: float | None = None  # sent with every call once a loop was named (LOOP_TEMPERATURE), if ever
    compactions: int = 0  # times the conversation was shortened to fit the model's context window
    tree: str | None = None  # the work tree's digest after the last call that could change it


ClientFactory = Callable[..., anthropic.Anthropic]


def agent_payload(agent: AgentConfig) -> dict[str, Any]:
    """The agent's configuration as the child reads it back (`AgentConfig.model_validate`). Durations are stored in
    seconds but a bare number in a plan means minutes, so they travel with their unit: as plain numbers the child
    once read a 6 s stall as 6 minutes, its own stall never fired, and the supervisor's backstop killed it without
    its signals (the tokens it spent)."""
    payload = agent.model_dump(mode="json", by_alias=True)
    payload["stall_minutes"] = _seconds(agent.stall_s)
    payload["time_limit_minutes"] = _seconds(agent.time_limit_s)
    return payload


def _seconds(value: float) -> str:
    return format(value, ".17f").rstrip("0").rstrip(".") + "s"


class AnthropicAgentBackend:
    name = "anthropic"

    def __init__(
        self,
        *,
        max_retries: int = 2,
        backoff_s: float = 2.0,
        max_backoff_s: float = 60.0,
        max_turns: int = 200,
        max_tokens: int = 8192,
        shell_timeout_s: float = 300.0,
        client_factory: ClientFactory | None = None,
        sleep: Callable[[float], None] = time.sleep,
        new_session_id: str | None = None,
    ) -> None:
        self.new_session_id = new_session_id  # the id a fresh session takes (the isolated parent picks it)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.shell_timeout_s = shell_timeout_s
        self.client_factory = client_factory or anthropic.Anthropic
        self.sleep = sleep

    def run(self, request: SessionRequest) -> SessionSignals:
        if request.identity.isolated:
            return self._run_isolated(request)
        started = time.monotonic()
        model = request.agent.model or DEFAULT_MODEL
        tally = _Tally()
        session_id = request.resume_session_id or self.new_session_id or uuid.uuid4().hex
        kind, error, reset_at = ExitKind.FINISHED, None, None
        try:
            if not _SESSION_ID.match(session_id):
                raise _End(ExitKind.CRASHED, f"cannot resume: {session_id!r} is not a session id")
            path = transcript_path(request.transcript_dir, session_id)
            messages = self._start(request, path)
            write_transcript(path, session_id, model, messages)
            self._loop(request, model, session_id, path, messages, tally, started)
        except _End as end:
            kind, error, reset_at = end.kind, end.error, end.reset_at
        claims, claimed_done = parse_claims(tally.texts[-1:])
        total_in, cost = _spent(model, tally)
        return session_signals(
            self.name, kind,
            exit_code=0 if kind is ExitKind.FINISHED else None,
            session_id=session_id,
            input_tokens=total_in,
            output_tokens=tally.output_tokens,
            cost_usd=cost,
            # a call cut short (a stall, the time limit, a dropped stream) may have been billed: not in the tally
            cost_lower_bound=kind in (ExitKind.STALLED, ExitKind.TIME_LIMIT, ExitKind.TRANSIENT),
            reset_at=reset_at,
            error=error,
            output_bytes=tally.output_bytes,
            nudges=tally.nudges,
            tool_calls=tally.tool_calls,
            tool_failures=tally.tool_failures,
            last_tool=tally.last_tool,
            duration_s=time.monotonic() - started,
            hints=Hints(
                claimed_done=claimed_done,
                stop_reason=tally.stop_reason,
                final_text=tally.final_text[-_FINAL_TEXT_LIMIT:],
                claims=claims,
                empty_output=tally.final_empty,
                empty_plan=tally.tool_calls == 0,
            ),
        )

    def _run_isolated(self, request: SessionRequest) -> SessionSignals:
        """The same loop in a child process running as the agent's identity (runner.backends.anthropic.child)."""
        agent = request.agent
        session_id = request.resume_session_id or uuid.uuid4().hex  # known here even if the child dies mid-turn
        payload = {
            "workdir": str(request.workdir), "prompt": request.prompt, "agent": agent_payload(agent),
            "state_dir": str(request.state_dir), "resume_session_id": request.resume_session_id,
            "plan_path": str(request.plan_path) if request.plan_path else None,
            "handoff_path": str(request.handoff_path) if request.handoff_path else None,
            "options": {"max_turns": self.max_turns, "max_tokens": self.max_tokens,
                        "shell_timeout_s": self.shell_timeout_s, "max_retries": self.max_retries,
                        "backoff_s": self.backoff_s, "max_backoff_s": self.max_backoff_s,
                        "new_session_id": session_id},
        }
        found: dict[str, Any] = {}

        def on_line(line: str, ctl: Controller) -> None:
            try:
                msg = json.loads(line)
            except ValueError:
                return
            if not isinstance(msg, dict):
                return
            if "signals" in msg:
                found["signals"] = msg["signals"]
            elif isinstance(msg.get("event"), str) and isinstance(msg.get("detail"), str):
                request.on_event(msg["event"], msg["detail"])

        # The loop bounds itself (time, stalls per call, turns); the supervisor's limits are the backstop.
        exit_ = supervise(
            [sys.executable, "-I", "-m", "runner.backends.anthropic.child"], cwd=request.workdir,
            env=dict(request.env), stall_s=agent.stall_s * 2 + 10, time_limit_s=agent.time_limit_s + 30,
            on_line=on_line, stdin_text=json.dumps(payload) + "\n", pid_file=request.pid_file,
            identity=request.identity)
        if "signals" in found:
            try:
                return SessionSignals.model_validate(found["signals"])
            except ValueError:
                pass
        kind = {"stalled": ExitKind.STALLED, "time_limit": ExitKind.TIME_LIMIT}.get(exit_.reason, ExitKind.CRASHED)
        return session_signals(self.name, kind, process=exit_, session_id=session_id,
                               error=(exit_.stderr_tail.strip()[-_FINAL_TEXT_LIMIT:] or f"the agent process {exit_.reason}"))

    def _start(self, request: SessionRequest, path: Path) -> list[dict[str, Any]]:
        if request.resume_session_id is None:
            return [{"role": "user", "content": [{"type": "text", "text": request.prompt}]}]
        try:
            saved = load_transcript(path)
        except FileNotFoundError:
            raise _End(ExitKind.CRASHED, f"cannot resume session {request.resume_session_id}: no saved conversation at {path}") from None
        except (OSError, ValueError) as exc:
            raise _End(ExitKind.CRASHED, f"cannot resume session {request.resume_session_id}: {path} is unreadable ({exc})") from None
        return resume_messages(saved, request.prompt)

    def _client(self, request: SessionRequest) -> anthropic.Anthropic:
        key = request.env.get("ANTHROPIC_API_KEY")
        token = request.env.get("ANTHROPIC_AUTH_TOKEN")
        if not key and not token:
            raise _End(ExitKind.AUTH, "no ANTHROPIC_API_KEY in the agent's environment")
        return self.client_factory(
            api_key=key or None,
            auth_token=None if key else token,
            base_url=request.env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL,
            max_retries=0,
        )

    def _loop(self, request: SessionRequest, model: str, session_id: str, path: Path,
              messages: list[dict[str, Any]], tally: _Tally, started: float) -> None:
        agent = request.agent
        meter = TokenMeter(agent.session_tokens)
        workspace = Workspace(request.workdir, request.env, shell_timeout_s=min(self.shell_timeout_s, agent.stall_s),
                              plan_path=request.plan_path)

        def time_left() -> float:
            return agent.time_limit_s - (time.monotonic() - started)

        with self._client(request) as client:
            for _turn in range(self.max_turns):
                if time_left() <= 0:
                    raise _End(ExitKind.TIME_LIMIT, "the session's time limit was reached")
                message = self._call(client, model, messages, request, time_left, tally)
                blocks = [_block_dict(b) for b in message.content]
                self._observe(message, blocks, tally)
                if blocks:
                    messages.append({"role": "assistant", "content": blocks})
                    write_transcript(path, session_id, model, messages)
                usage = message.usage
                verdict = meter.add(budget_tokens(token_count(usage.input_tokens), token_count(usage.output_tokens),
                                                  token_count(usage.cache_read_input_tokens),
                                                  token_count(usage.cache_creation_input_tokens)))
                request.on_event("tokens", str(meter.used))
                total_in, cost = _spent(model, tally)
                write_meter(request.transcript_dir, total_in + tally.output_tokens, cost, cost is not None)
                if verdict == "stop":
                    raise _End(ExitKind.TOKEN_BUDGET, f"token budget reached ({meter.used} of {meter.budget})")
                calls = [b for b in blocks if b["type"] == "tool_use"]
                if message.stop_reason == "refusal":
                    return  # a refused step ends the session; the evidence says what it amounts to
                if not calls:
                    if message.stop_reason == "pause_turn" and blocks:
                        continue  # the API paused a long turn: sending it back lets the model go on
                    reminder = workspace.unfinished(tally.tool_calls) if blocks else None
                    if reminder is None:
                        return
                    # the work tree shows the work not begun or not committed: said once, and the model goes on
                    messages.append({"role": "user", "content": [{"type": "text", "text": reminder}]})
                    write_transcript(path, session_id, model, messages)
                    continue
                results, spin = self._run_tools(workspace, calls, tally, request, time_left)
                if verdict == "nudge":
                    results.append({"type": "text", "text": NUDGE_TEXT})
                    tally.nudges += 1
                if spin and not tally.loop_named:
                    # The first loop is named to the model, once, and the rules count anew: with greedy decoding the
                    # same context gives the same calls, and a result that says what repeats is a new context (the
                    # 1.5B's loops ended its sessions within minutes). The second loop ends the session.
                    # ... and the calls after it are sampled, not greedy: the same context no longer gives the same call
                    tally.loop_named, tally.stuck_from = True, len(tally.steps)
                    tally.temperature = LOOP_TEMPERATURE if samples(request) else None
                    named = LOOP_TEXT.format(loop=spin.partition("): ")[2] or spin)
                    # ... with where the work stands, run now: the 1.5B looped on refused writes and never ran the gate
                    where = workspace.gate_now(limit_s=max(0.1, time_left()))
                    results.append({"type": "text", "text": f"{named}\n\n{where}" if where else named})
                    request.on_event("stuck", spin)
                    spin = None
                messages.append({"role": "user", "content": results})
                write_transcript(path, session_id, model, messages)
                if spin:
                    raise _End(ExitKind.CRASHED, spin)
            raise _End(ExitKind.TIME_LIMIT, f"the agent loop reached its bound of {self.max_turns} turns")

    def _call(self, client: anthropic.Anthropic, model: str, messages: list[dict[str, Any]],
              request: SessionRequest, time_left: Callable[[], float], tally: _Tally | None = None) -> Any:
        stall_s = request.agent.stall_s
        last: ApiFailure | None = None
        attempt = 0
        shortened = 0
        while attempt <= self.max_retries:
            left = time_left()
            if left <= 0:
                raise _End(ExitKind.TIME_LIMIT, "the session's time limit was reached")
            wait = min(stall_s, left)
            temperature = tally.temperature if tally is not None else None
            # the SDK (1.0 on) has no `temperature` argument: the field goes in the body, as the API reads it
            sampling = {} if temperature is None else {"extra_body": {"temperature": temperature}}
            try:
                with client.messages.stream(
                    model=model, max_tokens=self.max_tokens, system=SYSTEM_PROMPT,
                    tools=TOOL_SPECS,  # type: ignore[arg-type]  # JSON dicts of the ToolParam shape
                    messages=messages,  # type: ignore[arg-type]  # JSON dicts of the MessageParam shape
                    timeout=anthropic.Timeout(wait, connect=min(wait, 30.0)), **sampling,  # type: ignore[arg-type]
                ) as stream:
                    return stream.get_final_message()
            except Exception as exc:
                if tally is not None and temperature is not None and refuses_sampling(exc):
                    # an endpoint that takes no temperature (newer Claude models, the API version of 2026-10-21):
                    # the same call again without it, no attempt burned, and none for the rest of the session
                    tally.temperature = None
                    request.on_event("sampling", "the endpoint takes no temperature: the calls stay as they were")
                    continue
                # a 400 before the stream (Anthropic's API), or an error event inside it (HTTP 200: the llama server)
                full = too_long(str(exc.message)) if isinstance(exc, anthropic.APIStatusError) else None
                if tally is not None and full is not None and shortened < _MAX_COMPACTIONS_PER_CALL:
                    # the conversation no longer fits the model's window: older results left out and the same call
                    # again, no attempt burned (it ended the session; the 1.5B's on an 8,192-token server)
                    shorter, left = compact(messages, *full, overhead_chars=_OVERHEAD_CHARS)
                    if left:
                        messages[:] = shorter
                        shortened += 1
                        tally.compactions += 1
                        request.on_event("compacted", f"{full[0]} tokens > {full[1]}: {left} older tool results "
                                                      f"or turns left out")
                        continue
                failure = classify_api_error(exc, wallclock.now())
                if failure is None:
                    raise
            if failure.action == "stall":
                if wait < stall_s:
                    raise _End(ExitKind.TIME_LIMIT, "the session's time limit was reached while waiting for the API")
                raise _End(ExitKind.STALLED, f"{failure.error} ({stall_s:g}s)")
            if failure.action == "end":
                raise _End(failure.kind, failure.error, failure.reset_at)
            if failure.no_answer:
                # no HTTP answer at all: if the endpoint cannot even be reached, retrying only burns the session
                base_url = request.env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
                why = probe(base_url)
                if why is not None:
                    request.on_event("unreachable", shown(base_url))
                    raise _End(ExitKind.TRANSIENT, unreachable_reason(base_url, "ANTHROPIC_API_KEY", found=why))
            last = failure
            if attempt < self.max_retries:
                delay = failure.retry_after_s if failure.retry_after_s is not None else self.backoff_s * 2**attempt
                self.sleep(max(0.0, min(delay, self.max_backoff_s, time_left())))
            attempt += 1
        assert last is not None
        raise _End(last.kind, f"{last.error} (after {self.max_retries + 1} attempts)")

    def _observe(self, message: Any, blocks: list[dict[str, Any]], tally: _Tally) -> None:
        usage = message.usage  # the server's figures: a count (10**400, -5) bounded as every usage report is
        tally.input_tokens += token_count(usage.input_tokens)
        tally.output_tokens += token_count(usage.output_tokens)
        tally.cache_read += token_count(usage.cache_read_input_tokens)
        tally.cache_write += token_count(usage.cache_creation_input_tokens)
        reason = message.stop_reason
        tally.stop_reason = reason if reason in _STOP_REASONS else (str(reason) if reason else None)
        text = "\n".join(b["text"] for b in blocks if b["type"] == "text").strip()
        produced = len(text.encode()) + sum(len(json.dumps(b.get("input", {}))) for b in blocks if b["type"] == "tool_use")
        tally.output_bytes += produced
        tally.final_text = text
        tally.final_empty = produced == 0
        if text:
            tally.texts.append(text)

    def _run_tools(self, workspace: Workspace, calls: list[dict[str, Any]], tally: _Tally,
                   request: SessionRequest, time_left: Callable[[], float]) -> tuple[list[dict[str, Any]], str | None]:
        results: list[dict[str, Any]] = []
        spin: str | None = None
        if tally.tree is None:
            tally.tree = workspace.tree_state()
        for call in calls:
            name, args = call["name"], call.get("input")
            tally.tool_calls += 1
            tally.last_tool = name
            request.on_event("tool", name)
            if args:
                request.on_event("tool_input", tool_input_text(args))
            if spin is not None:  # the session is ending; later calls of the same turn are not run
                outcome_ok, text = False, "not run: the session stopped (the agent is stuck)"
            else:
                outcome = workspace.run(name, args, time_left_s=max(0.1, time_left()))
                outcome_ok, text = outcome.ok, outcome.text
            results.append({"type": "tool_result", "tool_use_id": call["id"], "content": text, "is_error": not outcome_ok})
            if not outcome_ok:
                tally.tool_failures += 1
            if spin is not None:
                continue
            changed = False
            if name not in _READ_ONLY_TOOLS:
                tree = workspace.tree_state()
                changed, tally.tree = tree != tally.tree, tree
            content = workspace.content_state() if changed else ""
            tally.steps.append(step(name, args, outcome_ok, text, changed, content))
            found = stuck(tally.steps[tally.stuck_from:])
            if found is not None:
                spin = str(found)
        return results, spin


_READ_ONLY_TOOLS = frozenset({"list_files", "read_file"})
_MAX_COMPACTIONS_PER_CALL = 3  # each leaves out more; a conversation that still does not fit ends the session
_OVERHEAD_CHARS = len(SYSTEM_PROMPT) + len(json.dumps(TOOL_SPECS))  # what a request holds besides the messages


def _spent(model: str, tally: _Tally) -> tuple[int, float | None]:
    """(input tokens incl. cache reads and writes, estimated cost) of the responses so far."""
    total_in = tally.input_tokens + tally.cache_read + tally.cache_write
    return total_in, estimate_cost(model, total_in, tally.output_tokens, tally.cache_read, tally.cache_write)

