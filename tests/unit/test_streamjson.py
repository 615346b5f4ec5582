"""The stream-json parser on real Claude Code output and on hostile input."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.backends.claude_code.streamjson import (
    STOP_AUTH,
    STOP_TOKEN_BUDGET,
    StreamJsonParser,
    build_signals,
    classify_api_error,
    decide_exit,
    parse_stream,
)
from runner.core.evidence import ExitKind
from tests.hypothesis_profiles import examples

FIXTURES = Path(__file__).parents[1] / "fixtures" / "claude-code"


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def _feed(lines: list[str], clock=None) -> StreamJsonParser:  # type: ignore[no-untyped-def]
    parser = StreamJsonParser(clock=clock)
    for line in lines:
        parser.feed(line)
    return parser


def test_tool_use_success_fixture() -> None:
    """The 2.1.197 success fixture: session id from init, usage and cost from the result only, one tool call."""
    sig = parse_stream(_lines("tool-use-success.jsonl"))
    assert sig.exit_kind is ExitKind.FINISHED
    assert sig.agent_session_id == "1a7ad00a-983e-46d2-ad06-7c80ff842a16"
    assert (sig.input_tokens, sig.output_tokens, sig.total_tokens) == (200, 40, 240)
    assert sig.cost_usd == 0.002
    assert (sig.tool_calls, sig.tool_failures, sig.last_tool) == (1, 0, "Bash")
    assert sig.hints.result_subtype == "success" and sig.hints.is_error is False
    assert sig.hints.stop_reason == "end_turn"
    assert sig.hints.final_text == "All done. HUMAN: nothing"
    assert sig.hints.claimed_done is True


def test_live_tokens_are_deduplicated_by_message_id() -> None:
    """Assistant lines that repeat one message's usage count once for the live meter."""
    parser = _feed(_lines("tool-use-success.jsonl"))
    assert parser.live_tokens == 120  # both assistant lines belong to msg_1 (100 + 20)


def test_rate_limited_429_fixture_is_a_rate_limit_despite_subtype_success() -> None:
    """`subtype: success` with `is_error: true` and `api_error_status: 429` is RATE_LIMIT."""
    sig = parse_stream(_lines("rate-limited-429.jsonl"), returncode=1)
    assert sig.exit_kind is ExitKind.RATE_LIMIT
    assert sig.agent_session_id == "1d108524-126e-4e27-a0a9-10f2ac188d45"
    assert sig.hints.result_subtype == "success" and sig.hints.is_error is True
    assert "429" in (sig.error or "") and "rate_limit" in (sig.error or "")
    assert sig.reset_at is None  # the CLI gave up at once: it printed no reset time


def test_rate_limit_after_retry_gets_reset_time_from_the_retry_delay() -> None:
    """An api_retry for a 429 dates the reset: the observation time plus the CLI's retry delay."""
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    parser = _feed(_lines("v2.1.332-rate-limited-retry.jsonl"), clock=lambda: now)
    sig = build_signals(parser, backend="claude-code", reason="exited", returncode=1)
    assert sig.exit_kind is ExitKind.RATE_LIMIT
    assert sig.reset_at == now + timedelta(milliseconds=1004)


def test_rate_limit_event_rejected_gives_reset_time() -> None:
    """A rejected rate_limit_event (subscription limits) sets reset_at from resetsAt."""
    event = {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": 1900000000, "rateLimitType": "five_hour"}, "session_id": "s"}
    allowed = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "resetsAt": 1800000000}}
    parser = _feed([json.dumps(allowed), json.dumps(event)])
    sig = build_signals(parser, backend="claude-code", reason="stalled", returncode=None)
    assert sig.exit_kind is ExitKind.RATE_LIMIT
    assert sig.reset_at == datetime.fromtimestamp(1900000000, tz=timezone.utc)


def test_auth_fixture() -> None:
    """A 401 reported by the CLI is AUTH."""
    sig = parse_stream(_lines("v2.1.332-auth-401.jsonl"), returncode=1)
    assert sig.exit_kind is ExitKind.AUTH
    assert sig.reset_at is None


def test_overloaded_fixture_is_transient() -> None:
    """A 529 overloaded reported by the CLI is TRANSIENT."""
    sig = parse_stream(_lines("v2.1.332-overloaded-529.jsonl"), returncode=1)
    assert sig.exit_kind is ExitKind.TRANSIENT


def test_current_cli_success_fixture_counts_tools_and_failures() -> None:
    """2.1.332: two Bash calls, one failing, usage from the result, claims found."""
    sig = parse_stream(_lines("v2.1.332-tool-use-success.jsonl"))
    assert sig.exit_kind is ExitKind.FINISHED
    assert (sig.tool_calls, sig.tool_failures) == (2, 1)
    result = json.loads(_lines("v2.1.332-tool-use-success.jsonl")[-1])
    assert sig.input_tokens == result["usage"]["input_tokens"] and sig.output_tokens == result["usage"]["output_tokens"]
    assert "all tests pass" in sig.hints.claims and sig.hints.claimed_done is True


def test_killed_while_retrying_auth_is_auth() -> None:
    """A CLI stopped while it retries a 401 ends as AUTH (the retry reason counts once killed)."""
    lines = _lines("v2.1.332-auth-401.jsonl")[:2]  # init + api_retry only
    parser = _feed(lines)
    assert decide_exit(parser, reason="stopped", returncode=None, stop_detail=STOP_AUTH)[0] is ExitKind.AUTH
    assert decide_exit(parser, reason="exited", returncode=1)[0] is ExitKind.CRASHED  # exited on its own: needs a result


def test_retry_followed_by_success_is_not_a_failure() -> None:
    """A transient api_retry that was followed by a real model message is forgotten."""
    lines = _lines("v2.1.332-overloaded-529.jsonl")[:2] + _lines("v2.1.332-tool-use-success.jsonl")[1:]
    assert parse_stream(lines).exit_kind is ExitKind.FINISHED


@pytest.mark.parametrize(
    ("reason", "detail", "kind"),
    [
        ("stopped", STOP_TOKEN_BUDGET, ExitKind.TOKEN_BUDGET),
        ("stalled", "", ExitKind.STALLED),
        ("time_limit", "", ExitKind.TIME_LIMIT),
        ("stopped", "something else", ExitKind.CRASHED),
    ],
)
def test_supervisor_reasons(reason: str, detail: str, kind: ExitKind) -> None:
    """The supervisor's reason decides when the stream reports no API failure."""
    parser = _feed(_lines("tool-use-success.jsonl")[:2])
    assert decide_exit(parser, reason=reason, returncode=None, stop_detail=detail)[0] is kind


def test_no_result_or_nonzero_exit_is_crashed() -> None:
    """No result message, an error result or a non-zero exit code is CRASHED."""
    init = _lines("tool-use-success.jsonl")[0]
    assert parse_stream([init], returncode=1, stderr_tail="boom\n").exit_kind is ExitKind.CRASHED
    assert "boom" in (parse_stream([init], returncode=1, stderr_tail="boom\n").error or "")
    ok = _lines("tool-use-success.jsonl")
    assert parse_stream(ok, returncode=2).exit_kind is ExitKind.CRASHED
    bad = json.loads(ok[-1]) | {"subtype": "error_max_turns", "is_error": True}
    assert parse_stream([*ok[:-1], json.dumps(bad)]).exit_kind is ExitKind.CRASHED


def test_malformed_lines_are_counted_and_ignored() -> None:
    """Garbage, truncated JSON, non-objects and wrong shapes never crash the parser."""
    junk = ["not json", '{"type":"assistant"', "[1,2]", '"str"', '{"type":"assistant","message":5}',
            '{"type":"rate_limit_event","rate_limit_info":null}', "", "   "]
    parser = _feed(junk + _lines("tool-use-success.jsonl"))
    assert parser.malformed == 6
    assert parser.session_id == "1a7ad00a-983e-46d2-ad06-7c80ff842a16"


@settings(max_examples=examples(ci=100, thorough=1000))
@given(st.lists(st.one_of(st.text(max_size=50), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "message", "content", "usage", "id", "subtype", "is_error", "result",
                         "api_error_status", "error", "session_id", "rate_limit_info", "resetsAt", "status"]),
        kids, max_size=5),
    max_leaves=12).map(json.dumps)), max_size=12))
def test_parser_never_raises(lines: list[str]) -> None:
    """Any sequence of lines, JSON or not, parses into signals without an exception."""
    sig = parse_stream(lines)
    assert sig.exit_kind in set(ExitKind)


def test_feed_reports_progress_events() -> None:
    """feed returns the session id, tool and token events for the live display."""
    parser = StreamJsonParser()
    lines = _lines("tool-use-success.jsonl")
    assert parser.feed(lines[0]) == (("agent_session", "1a7ad00a-983e-46d2-ad06-7c80ff842a16"),)
    assert parser.feed(lines[1]) == (("tokens", "120"), ("tool", "Bash"))


def test_classify_api_error_table() -> None:
    """Status codes and the CLI's error codes map to exit kinds."""
    assert classify_api_error(429, None) is ExitKind.RATE_LIMIT
    assert classify_api_error(None, "rate_limit") is ExitKind.RATE_LIMIT
    assert classify_api_error(401, None) is ExitKind.AUTH
    assert classify_api_error(403, None) is ExitKind.AUTH
    assert classify_api_error(None, "billing_error") is ExitKind.AUTH
    assert classify_api_error(529, None) is ExitKind.TRANSIENT
    assert classify_api_error(500, "server_error") is ExitKind.TRANSIENT
    assert classify_api_error(400, "invalid_request") is None
