"""The built-in agent keeps its conversation within the model's context window (runner.backends.anthropic.compact).

Issue 47, fifth round (docs/real-model.md): 4 of the 9 long sessions of the fourth round ended on the benchmark
server's "prompt is too long: 8257 tokens > 8191 maximum". Now that answer shortens the conversation (older tool
results left out, then the oldest exchanges; never the task, the latest turns or a user's words) and the same call
goes again, no attempt burned; a conversation that cannot be shortened still ends the session as before. The pure
function on built conversations, and the loop with the real SDK against the scripted Messages server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.backends.anthropic.compact import KEEP_LAST, LEFT_OUT, compact, too_long
from runner.core.evidence import ExitKind
from tests.agent_helpers import fast_backend, make_request, tool_results, user_texts
from tests.servers.messages import MessagesServer, Turn, error_turn, reply, stream_error, tool_use

TASK = {"role": "user", "content": [{"type": "text", "text": "Do checkpoint 1.1: fix report.py"}]}


def _exchange(n: int, result: str, words: str | None = None) -> list[dict[str, Any]]:
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{n}", "name": "run_shell",
                                              "input": {"command": f"step {n}"}}]}
    answer: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": result,
                                     "is_error": True}]
    if words:
        answer.append({"type": "text", "text": words})
    return [call, {"role": "user", "content": answer}]


def _conversation(exchanges: int, result_chars: int = 3000) -> list[dict[str, Any]]:
    messages = [TASK]
    for n in range(exchanges):
        messages += _exchange(n, f"exit code 1 (step {n})\n" + "x" * result_chars)
    return messages


def _chars(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages, ensure_ascii=False))


def _well_formed(messages: list[dict[str, Any]]) -> None:
    """As the Messages API wants them: user first, roles taking turns, each tool result answering a call of the
    assistant turn just before it."""
    assert messages[0]["role"] == "user"
    for before, msg in zip(messages, messages[1:]):
        assert before["role"] != msg["role"]
        if msg["role"] == "user":
            calls = {b["id"] for b in before["content"] if b["type"] == "tool_use"}
            assert all(b["tool_use_id"] in calls for b in msg["content"] if b["type"] == "tool_result")


def test_the_endpoints_words_give_the_size_and_the_window() -> None:
    assert too_long("400 invalid_request_error: prompt is too long: 8257 tokens > 8191 maximum") == (8257, 8191)
    assert too_long("prompt is too long: 212345 tokens > 200000 maximum") == (212345, 200000)
    assert too_long("temperature: Extra inputs are not permitted") is None
    assert too_long("prompt is too long: 100 tokens > 8191 maximum") is None  # not over: not this


def test_older_tool_results_are_left_out_first_the_task_and_the_latest_turns_kept() -> None:
    messages = _conversation(8)
    tokens = _chars(messages) // 3  # three characters a token, as the estimate will find
    shorter, left = compact(messages, tokens, maximum=int(tokens * 0.9))
    _well_formed(shorter)
    assert left > 0 and _chars(shorter) // 3 <= int(tokens * 0.9) * 0.5
    assert shorter[0] == TASK and shorter[-KEEP_LAST:] == messages[-KEEP_LAST:]
    assert len(shorter) == len(messages)  # leaving out the results was enough: every call is still there
    old = tool_results({"messages": shorter[1:-KEEP_LAST]})
    assert old and all(r["content"].startswith(LEFT_OUT[:20]) for r in old[:left])
    assert "exit code 1 (step 0)" in old[0]["content"] and old[0]["is_error"] is True  # how it began, and its flag
    assert messages[2]["content"][0]["content"].startswith("exit code 1 (step 0)\nxxx")  # the input is untouched


def test_when_that_is_not_enough_the_oldest_exchanges_go_whole_a_users_words_stay() -> None:
    messages = [TASK]
    for n in range(10):  # small results (nothing worth leaving out) but a long conversation
        messages += _exchange(n, f"exit code 1 (step {n})", words="You are going round in circles" if n == 2 else None)
    tokens = _chars(messages) // 3
    shorter, left = compact(messages, tokens, maximum=int(tokens * 0.6))
    _well_formed(shorter)
    assert left > 0 and len(shorter) < len(messages)
    assert shorter[0]["content"][0] == TASK["content"][0] and shorter[-KEEP_LAST:] == messages[-KEEP_LAST:]
    assert "You are going round in circles" in user_texts({"messages": shorter})
    calls = [b["input"]["command"] for m in shorter for b in m["content"] if b["type"] == "tool_use"]
    assert calls[-2:] == ["step 8", "step 9"] and "step 0" not in calls  # the oldest went first


def test_nothing_to_leave_out_is_said_so() -> None:
    messages = [TASK, *_exchange(0, "x" * 5000)]  # the latest turns only
    assert compact(messages, 9000, 8191) == (messages, 0)


def _big_file(tmp_path: Path) -> None:
    request = make_request(tmp_path, "http://127.0.0.1:1")
    (request.workdir / "big.txt").write_text("line of a long file\n" * 400)


TOO_LONG = "prompt is too long: 9000 tokens > 8191 maximum"


@pytest.mark.parametrize("full", [error_turn(400, "invalid_request_error", TOO_LONG),
                                  stream_error("invalid_request_error", TOO_LONG)], ids=["400", "in-stream"])
def test_the_loop_shortens_the_conversation_and_asks_again(tmp_path: Path, full: Turn) -> None:
    """Two reads of a big file and two small calls, then the endpoint's "prompt is too long" (a 400 from Anthropic's
    API; an error event in a begun stream, HTTP 200, from the llama server): the same call again with the older
    results left out, and the session goes on to its end (it ended there, CRASHED, before)."""
    _big_file(tmp_path)
    events: list[tuple[str, str]] = []
    read = tool_use("read_file", {"path": "big.txt"})
    with MessagesServer() as srv:
        srv.enqueue(reply(read), reply(read), reply(tool_use("list_files", {"path": "."})),
                    reply(tool_use("run_shell", {"command": "git status"})), full,
                    reply("I read it."))
        signals = fast_backend(max_retries=0).run(make_request(tmp_path, srv.url, events=events))
        bodies = [r.json for r in srv.message_requests]
    assert signals.exit_kind is ExitKind.FINISHED and signals.error is None
    assert len(bodies) == 6
    before, after = bodies[4]["messages"], bodies[5]["messages"]
    assert after[0] == before[0] and after[-KEEP_LAST:] == before[-KEEP_LAST:]
    assert _chars(after) < _chars(before) / 2
    assert any(r["content"].startswith(LEFT_OUT[:20]) for r in tool_results(bodies[5]))
    assert [e for e, _ in events].count("compacted") == 1


def test_a_conversation_that_cannot_be_shortened_still_ends_the_session(tmp_path: Path) -> None:
    full = error_turn(400, "invalid_request_error", "prompt is too long: 9000 tokens > 8191 maximum")
    with MessagesServer() as srv:
        srv.enqueue(full)
        signals = fast_backend(max_retries=0).run(make_request(tmp_path, srv.url))
        assert len(srv.message_requests) == 1
    assert signals.exit_kind is ExitKind.CRASHED and "prompt is too long" in (signals.error or "")
