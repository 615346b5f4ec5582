"""The `script` backend: deterministic scripted sessions, played by a real child process.

A script (YAML, `agent.script`) is a list of sessions, consumed in order across a
plan's sessions (a cursor file in the transcript directory). Each session is
played by `runner.backends.script.agent` under the same supervision as a real
agent CLI: stall watchdog, time limit, token meter with nudges on stdin. The
format is documented in docs/script-backend.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from runner.adapters import clock as wallclock
from runner.backends.script import agent as script_agent
from runner.backends.common.base import SessionRequest
from runner.backends.common.limits import parse_hints
from runner.backends.common.meter import token_count
from runner.backends.common.signals import session_signals
from runner.core.errors import PlanRunnerError
from runner.core.evidence import ExitKind, Hints, SessionSignals
from runner.core.progress import tool_input_text
from runner.adapters.sandbox.proc import capture
from runner.adapters.sandbox.supervise import NUDGE_TEXT, Controller, ProcessExit, TokenMeter, supervise
from runner.backends.common import jsonline

CURSOR_FILE = "script-cursor.json"
_TRANSCRIPT_LIMIT = 5 * 2**20


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def _is_str(v: object) -> bool:
    return isinstance(v, str)


def _is_id(v: object) -> bool:
    return isinstance(v, (str, int)) and not isinstance(v, bool)


def _opt_str(v: object) -> bool:
    return v is None or isinstance(v, str)


def _mapping(*required: str, **checks: Callable[[object], bool]) -> Callable[[object], bool]:
    def check(v: object) -> bool:
        return (isinstance(v, dict) and all(k in v for k in required) and set(v) <= set(required) | set(checks)
                and all(checks[k](v[k]) for k in v if k in checks))
    return check


def _either(*checks: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: any(c(v) for c in checks)


# step kind -> (argument check, how to write it)
STEPS: dict[str, tuple[Callable[[object], bool], str]] = {
    "write": (_mapping("path", "content", path=_is_str, content=_is_str), "{path: src/x.py, content: '...'}"),
    "append": (_mapping("path", "content", path=_is_str, content=_is_str), "{path: notes.md, content: '...'}"),
    "delete": (_is_str, "path/to/file"),
    "run": (_is_str, '"shell command"'),
    "commit": (_is_str, '"commit message"'),
    "check": (_is_id, '"1.1" (quote ids)'),
    "uncheck": (_is_id, '"1.1" (quote ids)'),
    "block": (_mapping("id", "reason", id=_is_id, reason=_is_str), '{id: "2.2", reason: "needs a decision"}'),
    "say": (_is_str, '"All tests pass, done"'),
    "tokens": (_either(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                       _mapping(input=_is_num, output=_is_num)), "1234, or {input: 1000, output: 234}"),
    "rate_limit": (_either(lambda v: v is None, _mapping(reset_in=_is_num, reset_at=_is_str, message=_is_str)),
                   "{reset_in: 3} (seconds) or {reset_at: '2025-06-03T18:00:00Z'}"),
    "transient": (_opt_str, '"overloaded"'),
    "auth_error": (_opt_str, '"invalid api key"'),
    "silent": (_is_num, "seconds without any output"),
    "sleep": (_is_num, "seconds of busy work (prints, so no stall)"),
    "wait_nudge": (_is_num, "seconds to wait for a token-budget nudge"),
    "exit": (_either(lambda v: isinstance(v, int) and not isinstance(v, bool),
                     _mapping(code=lambda v: isinstance(v, int), error=_is_str)), '{code: 1, error: "..."}'),
    "handoff": (_is_str, '"what is done, what is next"'),
    "edit_front_matter": (_either(_is_str, _mapping("replace", "with", replace=_is_str, **{"with": _is_str})),
                          '"gates: []" or {replace: "old", with: "new"}'),
    "env_dump": (_is_str, "path/to/env.json"),
}


@dataclass(frozen=True)
class ScriptSession:
    id: str
    steps: tuple[dict, ...]


def _script_error(source: str, what: str, fix: str) -> PlanRunnerError:
    return PlanRunnerError(what=f"{source}: {what}", why="the agent script does not match docs/script-backend.md",
                           fix=fix)


def _normalise_step(step: object, where: str, source: str) -> dict:
    if isinstance(step, str) and step in ("auth_error", "transient", "rate_limit"):
        step = {step: None}
    if not isinstance(step, dict) or len(step) != 1:
        raise _script_error(source, f"{where} is not a single `kind: argument` step",
                            "write each step as one mapping, e.g. `- say: \"hello\"`")
    (kind, arg), = step.items()
    if kind not in STEPS:
        raise _script_error(source, f"{where}: unknown step {kind!r}", "use one of: " + ", ".join(STEPS))
    check, example = STEPS[kind]
    if not check(arg):
        raise _script_error(source, f"{where}: bad argument for `{kind}`: {arg!r}", f"write it as `{kind}: {example}`")
    if kind in ("check", "uncheck"):
        arg = str(arg)
    if kind == "block":
        arg = {**arg, "id": str(arg["id"])}
    return {kind: arg}


def parse_script(text: str, source: str = "script") -> tuple[ScriptSession, ...]:
    """Script text -> sessions. A bad script is a PlanRunnerError naming the session and step."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _script_error(source, f"not valid YAML ({exc})", "fix the YAML syntax") from None
    if isinstance(data, dict) and set(data) == {"sessions"}:
        data = data["sessions"]
    if not isinstance(data, list) or not data:
        raise _script_error(source, "expected a non-empty list of sessions",
                            "write `sessions:` followed by one list of steps per session")
    sessions = []
    for n, entry in enumerate(data, start=1):
        sid = f"script-{n}"
        if isinstance(entry, dict) and "steps" in entry and set(entry) <= {"id", "steps"}:
            sid = str(entry.get("id") or sid)
            entry = entry["steps"]
        if not isinstance(entry, list):
            raise _script_error(source, f"session {n} is not a list of steps",
                                "write each session as a list, or as `{id: name, steps: [...]}`")
        steps = tuple(_normalise_step(s, f"session {n}, step {i}", source) for i, s in enumerate(entry, start=1))
        sessions.append(ScriptSession(id=sid, steps=steps))
    return tuple(sessions)


def load_script(request: SessionRequest) -> tuple[Path, tuple[ScriptSession, ...]]:
    raw = request.agent.script
    if not raw:
        raise PlanRunnerError(what="the script backend needs `agent.script`",
                              why="no script file is named in the plan's front matter",
                              fix="add `script: path/to/session-script.yaml` under `agent:`")
    path = Path(raw) if Path(raw).is_absolute() else request.workdir / raw
    try:
        text = _read_in_tree(request, path) if not Path(raw).is_absolute() else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanRunnerError(what=f"cannot read the agent script {path}", why=str(exc),
                              fix="check `agent.script` (relative to the repository root, or absolute)") from None
    return path, parse_script(text, str(raw))


def _read_in_tree(request: SessionRequest, path: Path) -> str:
    """A file of the agent's tree as the agent sees it: in a room the tree is an overlay only the room shows
    (runner.adapters.sandbox.agent_clone), so it is read there, by `cat` as the agent, bounded."""
    if request.identity.room is None:
        return path.read_text(encoding="utf-8")
    done = capture(["cat", "--", str(path)], cwd=request.workdir, env={"PATH": "/usr/bin:/bin"}, time_limit_s=30,
                   identity=request.identity, limit=4 * 2**20)
    if done.finished.returncode != 0:
        raise OSError(done.stderr.decode("utf-8", "replace").strip() or "cat failed")
    return done.stdout.decode("utf-8")


def _take_session(transcript_dir: Path, script_path: Path) -> int:
    """The index of the next unplayed session, advanced before it runs so a killed job does not replay it."""
    transcript_dir.mkdir(parents=True, exist_ok=True)
    cursor_path = transcript_dir / CURSOR_FILE
    try:
        index = int(json.loads(cursor_path.read_text(encoding="utf-8")).get("next", 0))
    except (OSError, ValueError, AttributeError):
        index = 0
    cursor_path.write_text(json.dumps({"script": str(script_path), "next": index + 1}), encoding="utf-8")
    return index


class _Session:
    """Folds the child's JSON lines into the facts SessionSignals needs."""

    def __init__(self, request: SessionRequest, transcript: Path) -> None:
        self.request = request
        self.meter = TokenMeter(request.agent.session_tokens)
        self.input_tokens = self.output_tokens = 0
        self.texts: list[str] = []
        self.tool_calls = self.tool_failures = 0
        self.last_tool: str | None = None
        self.limit_reset: datetime | None = None
        self.limit_seen = False
        self.error_kind: str | None = None
        self.error: str | None = None
        self.budget_hit = False
        self.transcript = transcript.open("a", encoding="utf-8")
        self.transcript_bytes = 0

    def on_line(self, line: str, ctl: Controller) -> None:
        if self.transcript_bytes < _TRANSCRIPT_LIMIT:
            self.transcript.write(line + "\n")
            self.transcript_bytes += len(line) + 1
        try:
            msg = jsonline.loads(line)
        except ValueError:
            msg = {"type": "text", "text": line}  # plain prints from a run step's tool
        if not isinstance(msg, dict):
            return
        kind = msg.get("type")
        event = self.request.on_event
        if kind == "text":
            text = str(msg.get("text", ""))
            self.texts.append(text)
            event("text", text[:200])
        elif kind == "tool":
            self.tool_calls += 1
            self.last_tool = str(msg.get("name"))
            if not msg.get("ok", True):
                self.tool_failures += 1
            event("tool", self.last_tool)
            if msg.get("detail"):
                event("tool_input", tool_input_text(msg.get("detail")))
        elif kind == "tokens":
            added_in, added_out = token_count(msg.get("input_tokens", 0)), token_count(msg.get("output_tokens", 0))
            self.input_tokens += added_in
            self.output_tokens += added_out
            event("tokens", str(self.input_tokens + self.output_tokens))
            verdict = self.meter.add(added_in + added_out)
            if verdict == "nudge":
                ctl.send(json.dumps({"type": "nudge", "text": NUDGE_TEXT}) + "\n")
                event("nudge", str(self.meter.nudges))
            elif verdict == "stop":
                self.budget_hit = True
                ctl.stop("token budget")
        elif kind == "limit":
            self.limit_seen = True
            self.error = str(msg.get("message") or "rate limit")
            try:
                if "reset_in" in msg:  # seconds from now, on plan-runner's clock (runner/adapters/clock.py)
                    self.limit_reset = wallclock.now() + timedelta(seconds=float(msg["reset_in"]))
                else:
                    self.limit_reset = datetime.fromisoformat(str(msg.get("reset_at")))
            except (TypeError, ValueError, OverflowError):
                self.limit_reset = None
        elif kind == "error":
            self.error_kind = str(msg.get("kind") or "crash")
            self.error = str(msg.get("message") or "")

    def signals(self, result: ProcessExit, session_id: str) -> SessionSignals:
        self.transcript.close()
        kind, error = self._exit_kind(result)
        return session_signals(
            "script", kind,
            process=result,
            session_id=session_id,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_estimated=False,
            reset_at=self.limit_reset,
            error=error,
            nudges=self.meter.nudges,
            tool_calls=self.tool_calls,
            tool_failures=self.tool_failures,
            last_tool=self.last_tool,
            hints=parse_hints(self.texts, result.output_bytes),
        )

    def _exit_kind(self, result: ProcessExit) -> tuple[ExitKind, str | None]:
        if self.limit_seen:
            return ExitKind.RATE_LIMIT, self.error
        if self.error_kind == "auth":
            return ExitKind.AUTH, self.error
        if self.error_kind == "transient":
            return ExitKind.TRANSIENT, self.error
        if self.budget_hit:
            return ExitKind.TOKEN_BUDGET, f"token budget of {self.meter.budget} reached"
        if result.reason == "stalled":
            return ExitKind.STALLED, f"no output for {self.request.agent.stall_s:g}s"
        if result.reason == "time_limit":
            return ExitKind.TIME_LIMIT, f"time limit of {self.request.agent.time_limit_s:g}s reached"
        if result.reason == "stopped":
            return ExitKind.CRASHED, result.stop_detail or "stopped"
        if result.returncode != 0 or self.error_kind is not None:
            tail = result.stderr_tail.strip().splitlines()
            return ExitKind.CRASHED, self.error or (tail[-1] if tail else f"exited with code {result.returncode}")
        return ExitKind.FINISHED, None


class ScriptBackend:
    name = "script"

    def run(self, request: SessionRequest) -> SessionSignals:
        script_path, sessions = load_script(request)
        index = _take_session(request.transcript_dir, script_path)
        if index >= len(sessions):
            return session_signals(
                self.name, ExitKind.CRASHED,
                error=f"script exhausted: {request.agent.script} has {len(sessions)} session(s), all played",
                hints=Hints(empty_output=True),
            )
        entry = sessions[index]
        session_id = request.resume_session_id or entry.id
        steps_file = request.write_input(f"script-{index + 1}.steps.json", json.dumps(list(entry.steps)))
        argv = [sys.executable, "-P", str(Path(script_agent.__file__).resolve()),
                "--steps", str(steps_file.resolve()), "--workdir", str(request.workdir.resolve()),
                "--session-id", session_id]
        if request.resume_session_id:
            argv.append("--resumed")
        if request.plan_path is not None:
            argv += ["--plan", str(self._in_tree(request, request.plan_path))]
        if request.handoff_path is not None:
            argv += ["--handoff", str(self._in_tree(request, request.handoff_path))]
        state = _Session(request, request.transcript_dir / f"script-{index + 1}.jsonl")
        try:
            result = supervise(
                argv, cwd=request.workdir, env=dict(request.env),
                stall_s=request.agent.stall_s, time_limit_s=request.agent.time_limit_s,
                on_line=state.on_line, keep_stdin_open=True,
                stdin_text=json.dumps({"type": "prompt", "text": request.prompt}) + "\n",
                kill_grace_s=1.0,
                pid_file=request.pid_file, identity=request.identity,
            )
        except BaseException:
            state.transcript.close()
            raise
        return state.signals(result, session_id)

    @staticmethod
    def _in_tree(request: SessionRequest, path: Path) -> Path:
        return (path if path.is_absolute() else request.workdir / path).resolve()
