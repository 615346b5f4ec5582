"""Claude Code's `--output-format stream-json`, read one line at a time.

`StreamJsonParser.feed` is called for every stdout line while the CLI runs, so it
must be cheap: one `json.loads`, a few dict lookups, no regexes and no models per
line. Text matching (claims, `runner.backends.common.claims`) runs once, on the bounded final text, when the
signals are built. A malformed line is counted and skipped; nothing here raises
for bad input.

What counts, and why:
* usage and cost come from the final `result` message only: assistant lines repeat
  the usage of the API message they belong to (one line per content block);
* the live token count (for the budget meter) is per API message id, deduplicated,
  taking the largest usage seen for each id;
* a `result` with `is_error: true` is a failure whatever its `subtype` says
  (`"subtype":"success","is_error":true,"api_error_status":429` is a rate limit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from runner.adapters import clock as wallclock
from runner.backends.common.claims import parse_claims
from runner.backends.common.endpoint import UNREACHABLE
from runner.backends.common.limits import read_signal
from runner.backends.common.meter import anthropic_cost, budget_tokens, token_count
from runner.backends.common.signals import session_signals
from runner.core.bounds import FLOAT_MAX
from runner.core.evidence import ExitKind, Hints, SessionSignals
from runner.core.fingerprint import normalise_error
from runner.backends.common import jsonline

FINAL_TEXT_CHARS = 2000
ERROR_CHARS = 300
STOP_TOKEN_BUDGET = "token budget"  # Controller.stop detail used by the backend
STOP_AUTH = "auth"  # the backend stops a CLI that retries an authentication failure
STOP_RATE_LIMIT = "rate limit"  # the backend stops a CLI that waits out a rate limit in its own retries
STOP_UNREACHABLE = UNREACHABLE  # retries that never got an HTTP answer
# API retries without any HTTP answer (no status) after which the endpoint counts as unreachable
UNREACHABLE_RETRIES = 2
# A rate-limit retry the CLI schedules this far out (or the Nth in a row) means it is waiting out a
# limit inside the session's time: plan-runner stops it and backs off until the reset instead.
LONG_RETRY_S = 20.0
MAX_LIMIT_RETRIES = 3

# The CLI's normalised `error` codes (assistant `error`, api_retry `error`).
_RATE_LIMIT_CODES = frozenset({"rate_limit"})
_AUTH_CODES = frozenset({"authentication_failed", "billing_error", "oauth_org_not_allowed", "permission_error"})
_TRANSIENT_CODES = frozenset({"server_error", "overloaded", "overloaded_error", "api_error", "connection_error"})

def classify_api_error(status: int | None, code: str | None) -> ExitKind | None:
    """What an API failure means for the session; None when it is not a recognised API failure."""
    if status == 429 or code in _RATE_LIMIT_CODES:
        return ExitKind.RATE_LIMIT
    if status in (401, 403) or code in _AUTH_CODES:
        return ExitKind.AUTH
    if (status is not None and status >= 500) or code in _TRANSIENT_CODES:
        return ExitKind.TRANSIENT
    return None


def usage_tokens(usage: Any) -> tuple[int, int]:
    """(input incl. cache creation and cache reads, output) from an API usage object."""
    if not isinstance(usage, dict):
        return 0, 0
    get = usage.get
    inp = sum(token_count(get(key)) for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    return inp, token_count(get("output_tokens"))


def usage_parts(usage: Any) -> tuple[int, int, int, int]:
    """(fresh input, cache writes, cache reads, output) from an API usage object."""
    if not isinstance(usage, dict):
        return 0, 0, 0, 0
    get = usage.get
    return (token_count(get("input_tokens")), token_count(get("cache_creation_input_tokens")),
            token_count(get("cache_read_input_tokens")), token_count(get("output_tokens")))


def _utc(epoch: Any) -> datetime | None:
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or epoch <= 0:
        return None
    if epoch > 1e11:  # milliseconds
        epoch = epoch / 1000
    try:
        return datetime.fromtimestamp(epoch, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


class StreamJsonParser:
    """Accumulates what a session's stream says. `clock` dates api_retry lines (the CLI gives a delay, not a time)."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or wallclock.now
        self.now = lambda: self._clock().astimezone()  # CLIs print reset clock times in the local zone
        self.lines = 0
        self.malformed = 0
        self.session_id: str | None = None
        self.model: str | None = None
        self.live_tokens = 0  # deduplicated per API message id
        self._usage_by_message: dict[str, int] = {}
        # per API message id: (fresh input, cache writes, cache reads, output), the largest seen
        self._parts_by_message: dict[str, tuple[int, int, int, int]] = {}
        # bytes of the agent's work: model messages, tool results, partial messages; not the CLI's own
        # system lines (init, api_retry), its rate-limit events or its synthetic error messages
        self.work_bytes = 0
        self._tool_ids: set[str] = set()
        self.tool_calls = 0
        self.tool_failures = 0
        self.last_tool: str | None = None
        self.last_tool_input: Any = None  # the agent's input to its last tool (shown while it runs, bounded)
        self.last_text = ""
        self.result: dict[str, Any] | None = None  # the last `result` message
        self.results = 0
        # the latest API failure the CLI reported (synthetic assistant message or error result),
        # cleared by a real model message after it
        self.api_error_status: int | None = None
        self.api_error_code: str | None = None
        self.api_error_text: str | None = None
        self.retry_status: int | None = None  # latest api_retry, cleared likewise
        self.retry_code: str | None = None
        self.retry_attempts = 0
        self.unanswered_retries = 0  # api retries in a row that got no HTTP answer (no status, no known code)
        self.retry_delay_s: float | None = None  # the delay of the CLI's last API retry
        self.reset_at: datetime | None = None
        self.rate_limit_status: str | None = None

    # -- per line --

    def feed(self, line: str) -> tuple[tuple[str, str], ...]:
        """Take one stdout line; return progress events ((kind, detail), ...) for the live display."""
        if not line or line.isspace():
            return ()
        self.lines += 1
        try:
            msg = jsonline.loads(line)
        except ValueError:
            self.malformed += 1
            return ()
        if not isinstance(msg, dict):
            self.malformed += 1
            return ()
        kind = msg.get("type")
        if kind == "assistant":
            events = self._assistant(msg)
            if not events or events[0][0] != "error":
                self.work_bytes += len(line)
            return events
        if kind == "user":
            self.work_bytes += len(line)
            self._user(msg)
            return ()
        if kind == "stream_event":
            self.work_bytes += len(line)
            return ()
        if kind == "result":
            return self._result(msg)
        if kind == "system":
            return self._system(msg)
        if kind == "rate_limit_event":
            return self._rate_limit(msg)
        return ()

    def _assistant(self, msg: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        sid = msg.get("session_id")
        if self.session_id is None and isinstance(sid, str):  # malformed ids (a list, a number) are not ids
            self.session_id = sid
        message = msg.get("message")
        if not isinstance(message, dict):
            self.malformed += 1
            return ()
        events: tuple[tuple[str, str], ...] = ()
        error = msg.get("error")
        if error is not None or message.get("model") == "<synthetic>":
            if error is not None or msg.get("api_error_status") is not None:
                self.api_error_code = error if isinstance(error, str) else None
                status = msg.get("api_error_status")
                self.api_error_status = status if isinstance(status, int) else None
                self.api_error_text = _first_text(message.get("content"))
                return (("error", str(error or status)),)
        else:
            self.api_error_status = self.api_error_code = self.api_error_text = None
            self.retry_status = self.retry_code = None
            self.unanswered_retries = 0
            self.rate_limit_status = None
        msg_id = message.get("id")
        inp, out = usage_tokens(message.get("usage"))
        tokens = inp + out
        if tokens and isinstance(msg_id, str):
            seen = self._usage_by_message.get(msg_id, 0)
            if tokens > seen:
                self._usage_by_message[msg_id] = tokens
                self._parts_by_message[msg_id] = usage_parts(message.get("usage"))
                self.live_tokens += tokens - seen
                events = (("tokens", str(self.live_tokens)),)
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                btype = block.get("type")
                if btype == "text":
                    value = block.get("text")
                    if isinstance(value, str) and value.strip():
                        self.last_text = value[-FINAL_TEXT_CHARS:]
                elif btype == "tool_use":
                    tool_id = block.get("id")
                    if isinstance(tool_id, str):
                        if tool_id in self._tool_ids:
                            continue
                        self._tool_ids.add(tool_id)
                    name = block.get("name")
                    self.last_tool = name if isinstance(name, str) else "?"
                    self.last_tool_input = block.get("input")
                    self.tool_calls += 1
                    events = (*events, ("tool", self.last_tool))
        return events

    def _user(self, msg: dict[str, Any]) -> None:
        message = msg.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error") is True:
                    self.tool_failures += 1

    def _result(self, msg: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        self.result = msg
        self.results += 1
        sid = msg.get("session_id")
        if isinstance(sid, str):
            self.session_id = self.session_id or sid
        if msg.get("is_error") is True:
            status = msg.get("api_error_status")
            if isinstance(status, int):
                self.api_error_status = status
            text = msg.get("result")
            if isinstance(text, str) and not self.api_error_text:
                self.api_error_text = text
        return (("result", str(msg.get("subtype"))),)

    def _system(self, msg: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        subtype = msg.get("subtype")
        if subtype == "init":
            sid = msg.get("session_id")
            if isinstance(sid, str):
                self.session_id = sid
            model = msg.get("model")
            self.model = model if isinstance(model, str) else self.model
            return (("agent_session", str(sid)),)
        if subtype == "api_retry":
            status = msg.get("error_status")
            self.retry_status = status if isinstance(status, int) else None
            code = msg.get("error")
            self.retry_code = code if isinstance(code, str) else None
            self.retry_attempts += 1
            unanswered = self.retry_status is None and self.retry_code in (None, "unknown", "connection_error")
            self.unanswered_retries = self.unanswered_retries + 1 if unanswered else 0
            delay = msg.get("retry_delay_ms")
            self.retry_delay_s = delay / 1000 if isinstance(delay, (int, float)) and not isinstance(delay, bool) else None
            if classify_api_error(self.retry_status, self.retry_code) is ExitKind.RATE_LIMIT and self.retry_delay_s is not None:
                self.reset_at = self._clock() + timedelta(seconds=self.retry_delay_s)
            attempt, most = msg.get("attempt"), msg.get("max_retries")
            detail = "no answer from the API (no connection)" if unanswered else f"{status} {code}"
            if isinstance(attempt, int):
                detail += f", attempt {attempt}" + (f"/{most}" if isinstance(most, int) else "")
            if self.retry_delay_s is not None:
                detail += f", next try in {self.retry_delay_s:.0f}s"
            return (("retry", detail),)
        return ()

    def _rate_limit(self, msg: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        info = msg.get("rate_limit_info")
        if not isinstance(info, dict):
            self.malformed += 1
            return ()
        status = info.get("status")
        self.rate_limit_status = status if isinstance(status, str) else None
        if status == "rejected":
            reset = _utc(info.get("resetsAt"))
            if reset is not None:
                self.reset_at = reset
            return (("rate_limit", str(status)),)
        return ()

    # -- after the process ended --

    def api_failure(self, *, include_retry: bool) -> ExitKind | None:
        """The API failure that ended the session, if any. `include_retry`: the process was
        killed while the CLI was still retrying, so its last retry reason counts."""
        if self.result is not None and self.result.get("is_error") is True or self.api_error_code or self.api_error_status:
            kind = classify_api_error(self.api_error_status, self.api_error_code)
            if kind is not None:
                return kind
        if self.rate_limit_status == "rejected":
            return ExitKind.RATE_LIMIT
        if include_retry and (self.retry_status is not None or self.retry_code is not None):
            return classify_api_error(self.retry_status, self.retry_code)
        return None

    def _parts(self) -> tuple[int, int, int, int]:
        """(fresh input, cache writes, cache reads, output): the result's usage, else the live sum."""
        if self.result is not None and isinstance(self.result.get("usage"), dict):
            return usage_parts(self.result.get("usage"))
        parts = list(self._parts_by_message.values())
        return tuple(sum(p[i] for p in parts) for i in range(4))  # type: ignore[return-value]

    @property
    def budget_tokens(self) -> int:
        """The live count as the session budget weighs it (cache reads at a tenth: runner.backends.common.meter)."""
        fresh, write, read, out = (sum(p[i] for p in self._parts_by_message.values()) for i in range(4))
        return budget_tokens(fresh, out, read, write)

    def cost(self) -> tuple[float | None, bool, bool]:
        """(cost, estimated, lower bound): the CLI's `total_cost_usd` from its result, else a list-price
        estimate of the usage seen, which misses the call in flight when there is no result."""
        cost = self.result.get("total_cost_usd") if self.result else None
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0:
            # Infinity, 1e308, an int of 400 digits: bounded and noted where the account is built (common.signals)
            return (float(cost) if cost <= FLOAT_MAX else math.inf), False, False
        fresh, write, read, out = self._parts()
        estimate = anthropic_cost(self.model, fresh + write + read, out, read, write)
        return estimate, estimate is not None, self.result is None

    def cost_notes(self) -> tuple[str, ...]:
        """What the record says of a `total_cost_usd` that is a number but no amount (NaN, a negative): the
        list-price estimate stands for it (`cost`)."""
        cost = self.result.get("total_cost_usd") if self.result else None
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and not cost >= 0:
            return (f"Claude Code reported total_cost_usd {cost!r}, not an amount spent: the list-price estimate "
                    "of its usage is recorded",)
        return ()

    def usage(self) -> tuple[int, int]:
        """(input, output) tokens: from the result message; the live count if the CLI never sent one."""
        if self.result is not None:
            return usage_tokens(self.result.get("usage"))
        return self.live_tokens, 0

    def hints(self) -> Hints:
        result = self.result or {}
        text = result.get("result")
        final = (text if isinstance(text, str) else self.last_text)[-FINAL_TEXT_CHARS:]
        claims, claimed_done = parse_claims([final])  # the shared wording, same for every backend
        subtype = result.get("subtype")
        stop = result.get("stop_reason")
        is_error = result.get("is_error")
        return Hints(
            claimed_done=claimed_done,
            stop_reason=stop if isinstance(stop, str) else None,
            result_subtype=subtype if isinstance(subtype, str) else None,
            is_error=is_error if isinstance(is_error, bool) else None,
            empty_output=self.lines == 0,
            final_text=final,
            claims=claims,
        )


def _first_text(content: Any) -> str | None:
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                return block["text"]
    return None


def decide_exit(
    parser: StreamJsonParser, *, reason: str, returncode: int | None, stop_detail: str = "", stderr_tail: str = ""
) -> tuple[ExitKind, str | None]:
    """How the session ended, from the supervisor's reason and what the stream said. Pure."""
    if reason == "stopped" and stop_detail == STOP_TOKEN_BUDGET:
        return ExitKind.TOKEN_BUDGET, None
    if reason == "stopped" and stop_detail == STOP_RATE_LIMIT:
        waited = f", next try in {parser.retry_delay_s:.0f}s" if parser.retry_delay_s is not None else ""
        return ExitKind.RATE_LIMIT, (f"rate limited: claude was retrying ({parser.retry_attempts} retries{waited}); "
                                     "stopped to back off until the reset")[:ERROR_CHARS]
    api = parser.api_failure(include_retry=reason != "exited")
    if api is None and parser.api_error_text and (parser.result is None or parser.result.get("is_error") is True):
        signal = read_signal(parser.api_error_text, parser.now())  # a synthetic message the CLI did not code
        if signal is not None:
            api = signal.exit_kind
            if signal.kind == "rate_limit" and signal.reset_at is not None:
                parser.reset_at = signal.reset_at
    if api is not None:
        status = parser.api_error_status or parser.retry_status
        code = parser.api_error_code or parser.retry_code
        text = parser.api_error_text or ""
        return api, f"api error {status or ''} {code or ''}: {text}".replace("  ", " ")[:ERROR_CHARS]
    if reason == "stalled":
        return ExitKind.STALLED, "no output from claude within the stall limit"
    if reason == "time_limit":
        return ExitKind.TIME_LIMIT, "session time limit reached"
    if reason == "stopped" and stop_detail.startswith(STOP_UNREACHABLE):
        return ExitKind.TRANSIENT, stop_detail[:2 * ERROR_CHARS]
    if reason == "stopped":
        return ExitKind.CRASHED, f"stopped: {stop_detail}"[:ERROR_CHARS]
    result = parser.result
    if result is None:
        tail = stderr_tail.strip().splitlines()[-1:] or [""]
        signal = read_signal(stderr_tail[-2000:], parser.now())
        if signal is not None:
            return signal.exit_kind, f"claude exited {returncode}: {tail[0]}".strip()[:ERROR_CHARS]
        return ExitKind.CRASHED, f"claude exited {returncode} without a result message {tail[0]}".strip()[:ERROR_CHARS]
    if result.get("is_error") is True or result.get("subtype") != "success":
        said = result.get("result")
        detail = said if isinstance(said, str) else ""
        # no structured error the CLI named: its words ("Credit balance is too low", "You've hit your
        # weekly limit · resets ...") are read by the shared reader
        signal = read_signal((parser.api_error_text or "") + "\n" + detail, parser.now())
        if signal is not None:
            if signal.kind == "rate_limit" and signal.reset_at is not None:
                parser.reset_at = signal.reset_at
            return signal.exit_kind, f"{signal.kind.replace('_', ' ')}: {detail}"[:ERROR_CHARS]
        return ExitKind.CRASHED, f"error result {result.get('subtype')}: {detail}"[:ERROR_CHARS]
    if returncode != 0:
        return ExitKind.CRASHED, f"claude exited {returncode}"
    return ExitKind.FINISHED, None


def build_signals(
    parser: StreamJsonParser,
    *,
    backend: str,
    reason: str,
    returncode: int | None,
    stop_detail: str = "",
    stderr_tail: str = "",
    output_bytes: int = 0,
    duration_s: float = 0.0,
    nudges: int = 0,
) -> SessionSignals:
    kind, error = decide_exit(parser, reason=reason, returncode=returncode, stop_detail=stop_detail, stderr_tail=stderr_tail)
    inp, out = parser.usage()
    cost, estimated, lower_bound = parser.cost()
    return session_signals(
        backend, kind,
        exit_code=returncode,
        session_id=parser.session_id,
        input_tokens=inp,
        output_tokens=out,
        cost_usd=cost,
        cost_estimated=estimated,
        cost_lower_bound=lower_bound or (cost is not None and reason != "exited"),
        usage_notes=parser.cost_notes(),
        reset_at=parser.reset_at,
        # plan-runner's own words for an unreachable endpoint keep the URL as it is (the fix needs its port)
        error=(error if error and error.startswith(STOP_UNREACHABLE) else
               normalise_error(error, max_chars=ERROR_CHARS) if error else None),
        output_bytes=parser.work_bytes,
        nudges=nudges,
        tool_calls=parser.tool_calls,
        tool_failures=parser.tool_failures,
        last_tool=parser.last_tool,
        duration_s=duration_s,
        hints=parser.hints(),
    )


def parse_stream(lines: Any, **signal_kw: Any) -> SessionSignals:
    """Parse a whole stream (an iterable of lines) into signals; for fixtures and tests."""
    parser = StreamJsonParser()
    for line in lines:
        parser.feed(line)
    signal_kw.setdefault("backend", "claude-code")
    signal_kw.setdefault("reason", "exited")
    signal_kw.setdefault("returncode", 0)
    return build_signals(parser, **signal_kw)
