"""The built-in `anthropic` agent over real HTTP: the real anthropic SDK against the scripted Messages server."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import git
import pytest

from runner.backends.anthropic.tools import OUTPUT_LIMIT, Workspace, bound_output
from runner.backends.anthropic.backend import LOOP_TEXT, AnthropicAgentBackend, resume_messages
from runner.backends.anthropic.errors import parse_rate_limit_reset
from runner.backends.common.base import get_backend
from runner.core.evidence import ExitKind
from runner.adapters.sandbox.supervise import NUDGE_TEXT
from tests.agent_helpers import fast_backend, make_request, tool_results, user_texts
from tests.servers.messages import (
    MessagesServer,
    cut,
    error_turn,
    hang,
    overloaded,
    rate_limited,
    reply,
    server_error,
    tool_use,
    unauthorized,
)

# ---- tools, without a server ---------------------------------------------------------------------


def test_paths_outside_the_work_tree_are_refused(tmp_path: Path) -> None:
    """`..`, absolute paths and symlinks pointing out of the tree are refused and nothing is touched."""
    root = tmp_path / "tree"
    root.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (root / "link").symlink_to(outside)
    (root / "dirlink").symlink_to(tmp_path)
    ws = Workspace(root, {"PATH": os.environ["PATH"]})
    for name, args in [
        ("read_file", {"path": "../secret.txt"}),
        ("read_file", {"path": str(outside)}),
        ("read_file", {"path": "link"}),
        ("write_file", {"path": "dirlink/secret.txt", "content": "pwned"}),
        ("write_file", {"path": "../new.txt", "content": "x"}),
        ("edit_file", {"path": "link", "old_string": "secret", "new_string": "pwned"}),
        ("list_files", {"path": ".."}),
    ]:
        outcome = ws.run(name, args)
        assert not outcome.ok and "outside the work tree" in outcome.text, (name, args)
    assert outside.read_text() == "secret"
    assert not (tmp_path / "new.txt").exists()


def test_tools_work_inside_the_tree(tmp_path: Path) -> None:
    """write, edit (exactly one match), read, list and shell work on files inside the tree."""
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"]})
    assert ws.run("write_file", {"path": "a/b.txt", "content": "one two one"}).ok
    assert ws.run("edit_file", {"path": "a/b.txt", "old_string": "two", "new_string": "2"}).ok
    twice = ws.run("edit_file", {"path": "a/b.txt", "old_string": "one", "new_string": "1"})
    assert not twice.ok and "2 times" in twice.text
    assert ws.run("read_file", {"path": "a/b.txt"}).text == "one 2 one"
    assert ws.run("list_files", {}).text == "a/b.txt"
    shell = ws.run("run_shell", {"command": "cat a/b.txt; exit 3"})
    assert not shell.ok and "exit code 3" in shell.text and "one 2 one" in shell.text
    assert not ws.run("frobnicate", {}).ok


def test_shell_timeout_kills_the_command(tmp_path: Path) -> None:
    """A command over its timeout is killed (with what it started) and reported as a failed call."""
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"]}, shell_timeout_s=0.5)
    t0 = time.monotonic()
    outcome = ws.run("run_shell", {"command": "echo start; sleep 30"})
    assert time.monotonic() - t0 < 10
    assert not outcome.ok and "timeout" in outcome.text and "start" in outcome.text


def test_tool_output_is_bounded_head_and_tail() -> None:
    """Long output keeps its beginning and end within the limit."""
    text = "HEAD" + "x" * 100_000 + "TAIL"
    bounded = bound_output(text)
    assert len(bounded.encode()) < OUTPUT_LIMIT + 100
    assert bounded.startswith("HEAD") and bounded.endswith("TAIL") and "omitted" in bounded


def test_rate_limit_reset_is_the_latest_exhausted_bucket() -> None:
    """retry-after and exhausted buckets' reset stamps give the reset time; a fresh bucket does not."""
    now = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    headers = {
        "retry-after": "30",
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": "2026-01-01T12:05:00Z",
        "anthropic-ratelimit-requests-remaining": "10",
        "anthropic-ratelimit-requests-reset": "2026-01-01T13:00:00Z",
    }
    assert parse_rate_limit_reset(headers, "", now) == datetime(2026, 1, 1, 12, 5, tzinfo=timezone.utc)
    assert parse_rate_limit_reset({"retry-after": "90"}, "", now) == now + timedelta(seconds=90)
    assert parse_rate_limit_reset({}, "limit reached, try again in 2 hours", now) == now + timedelta(hours=2)
    assert parse_rate_limit_reset({}, "slow down", now) is None


def test_resume_repairs_an_interrupted_conversation() -> None:
    """A saved tool_use without a result gets an error result, then the new prompt, in one user turn."""
    saved = [
        {"role": "user", "content": [{"type": "text", "text": "first"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "run_shell", "input": {}}]},
    ]
    out = resume_messages(saved, "go on")
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[2]["content"][0]["tool_use_id"] == "t1" and out[2]["content"][0]["is_error"] is True
    assert out[2]["content"][1] == {"type": "text", "text": "go on"}
    merged = resume_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": []}], "b")
    assert merged == [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]


def test_backend_is_registered_under_its_name() -> None:
    """get_backend('anthropic') builds the built-in agent through the registry."""
    assert isinstance(get_backend("anthropic"), AnthropicAgentBackend)


# ---- over HTTP -----------------------------------------------------------------------------------

integration = pytest.mark.integration


@integration
def test_session_writes_commits_and_flips_a_checkbox(tmp_path: Path) -> None:
    """Scripted turns write a file, flip the checkbox and commit with git; the loop ends at end_turn."""
    events: list[tuple[str, str]] = []
    with MessagesServer() as srv:
        srv.enqueue(
            reply("Writing the module.", tool_use("write_file", {"path": "hello.py", "content": "print('hi')\n"})),
            reply(tool_use("edit_file", {"path": "plan.md", "old_string": "- [ ] 1.1", "new_string": "- [x] 1.1"})),
            reply(tool_use("run_shell", {"command": "git add -A && git commit -qm 'Add hello.py' && git log --oneline | wc -l"})),
            reply("Done: hello.py added, all tests pass."),
        )
        request = make_request(tmp_path, srv.url, events=events)
        signals = fast_backend().run(request)
        bodies = [r.json for r in srv.message_requests]
    repo = git.Repo(request.workdir)
    assert repo.head.commit.message.strip() == "Add hello.py"
    assert set(repo.head.commit.stats.files) == {"hello.py", "plan.md"}
    assert "- [x] 1.1" in (request.workdir / "plan.md").read_text()
    assert signals.exit_kind is ExitKind.FINISHED and signals.exit_code == 0
    assert (signals.tool_calls, signals.tool_failures, signals.last_tool) == (3, 0, "run_shell")
    assert signals.hints.stop_reason == "end_turn" and signals.hints.claimed_done is True
    assert "all tests pass" in signals.hints.claims
    assert signals.input_tokens > 0 and signals.output_tokens > 0
    assert signals.total_tokens == signals.input_tokens + signals.output_tokens
    assert signals.output_bytes > 0
    assert len(bodies) == 4
    shell_result = tool_results(bodies[3])[-1]
    assert shell_result["is_error"] is False and "exit code 0" in shell_result["content"]
    assert {t["name"] for t in bodies[0]["tools"]} == {"list_files", "read_file", "write_file", "edit_file", "mark_done", "run_shell"}
    assert ("tool", "write_file") in events and any(e == "tokens" for e, _ in events)
    saved = json.loads((request.transcript_dir / f"{signals.agent_session_id}.json").read_text())
    assert len(saved["messages"]) == 8  # prompt, then 3 x (tool call, result), then the final answer


@integration
def test_rate_limit_gives_reset_time(tmp_path: Path) -> None:
    """A 429 with reset headers ends the session as RATE_LIMIT with reset_at from the headers, unretried."""
    reset = (datetime.now(timezone.utc) + timedelta(minutes=7)).replace(microsecond=0)
    with MessagesServer() as srv:
        srv.enqueue(rate_limited(retry_after_s=420, reset_at=reset))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        assert len(srv.message_requests) == 1
    assert signals.exit_kind is ExitKind.RATE_LIMIT
    # within 30 s: the backend may read retry-after (relative) when the reply arrives, seconds later on a loaded machine
    assert signals.reset_at is not None and abs((signals.reset_at - reset).total_seconds()) <= 30
    assert "rate_limit_error" in (signals.error or "")


@integration
def test_overloaded_then_success_is_retried(tmp_path: Path) -> None:
    """529 and a cut stream are retried with backoff; the session then finishes normally."""
    slept: list[float] = []
    with MessagesServer() as srv:
        srv.enqueue(overloaded(), cut(reply("partial answer"), 3), reply("Finished."))
        signals = AnthropicAgentBackend(backoff_s=0.01, sleep=slept.append).run(make_request(tmp_path, srv.url))
        assert len(srv.message_requests) == 3
    assert signals.exit_kind is ExitKind.FINISHED
    assert slept == [0.01, 0.02]
    assert signals.hints.final_text == "Finished."


@integration
def test_persistent_server_errors_end_as_transient(tmp_path: Path) -> None:
    """5xx on every attempt ends the session TRANSIENT after max_retries + 1 requests."""
    with MessagesServer() as srv:
        srv.enqueue(server_error(), server_error(), server_error(), reply("never reached"))
        signals = fast_backend(max_retries=2).run(make_request(tmp_path, srv.url))
        assert len(srv.message_requests) == 3
    assert signals.exit_kind is ExitKind.TRANSIENT and "after 3 attempts" in (signals.error or "")


@integration
@pytest.mark.parametrize("turn", [
    unauthorized(),
    error_turn(403, "permission_error", "Your API key does not have permission"),
    error_turn(400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
])
def test_auth_and_billing_failures_end_as_auth(tmp_path: Path, turn) -> None:  # type: ignore[no-untyped-def]
    """401, 403 and a billing refusal end the session as AUTH at once (no retry)."""
    with MessagesServer() as srv:
        srv.enqueue(turn)
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        assert len(srv.message_requests) == 1
    assert signals.exit_kind is ExitKind.AUTH and signals.error


def test_missing_api_key_is_auth(tmp_path: Path) -> None:
    """No API key in the agent's environment is an AUTH failure, not a crash."""
    request = make_request(tmp_path, "http://127.0.0.1:9")
    del request.env["ANTHROPIC_API_KEY"]
    signals = fast_backend().run(request)
    assert signals.exit_kind is ExitKind.AUTH and "ANTHROPIC_API_KEY" in (signals.error or "")


@integration
@pytest.mark.parametrize("after_events", [None, 3])
def test_hanging_server_is_a_stall(tmp_path: Path, after_events: int | None) -> None:
    """No bytes from the API for stall_minutes (before or mid-stream) ends the session STALLED."""
    with MessagesServer() as srv:
        srv.enqueue(hang(after_events=after_events))
        t0 = time.monotonic()
        signals = fast_backend().run(make_request(tmp_path, srv.url, stall_minutes="0.5s"))
        elapsed = time.monotonic() - t0
    assert signals.exit_kind is ExitKind.STALLED
    assert 0.4 < elapsed < 5


@integration
def test_time_limit_bounds_a_hang(tmp_path: Path) -> None:
    """When the time limit comes before the stall timeout, a hang ends as TIME_LIMIT."""
    with MessagesServer() as srv:
        srv.enqueue(hang())
        signals = fast_backend().run(make_request(tmp_path, srv.url, stall_minutes="30s", time_limit_minutes="0.6s"))
    assert signals.exit_kind is ExitKind.TIME_LIMIT


@integration
def test_budget_nudges_then_stops(tmp_path: Path) -> None:
    """At 80 % of the token budget a nudge is appended as a user turn; at 100 % the session stops."""
    big = {"input_tokens": 450, "output_tokens": 0}
    with MessagesServer() as srv:
        srv.enqueue(
            reply(tool_use("list_files", {}), usage={"input_tokens": 100, "output_tokens": 10}),
            reply(tool_use("read_file", {"path": "plan.md"}), usage={"input_tokens": 700, "output_tokens": 10}),
            reply(tool_use("list_files", {"path": "."}), usage=big),
            reply("never reached"),
        )
        signals = fast_backend().run(make_request(tmp_path, srv.url, session_tokens=1000))
        bodies = [r.json for r in srv.message_requests]
    assert len(bodies) == 3
    assert NUDGE_TEXT not in user_texts(bodies[1])
    assert user_texts(bodies[2])[-1] == NUDGE_TEXT
    assert signals.nudges == 1
    assert signals.exit_kind is ExitKind.TOKEN_BUDGET and signals.total_tokens >= 1000


@integration
def test_outside_path_is_refused_to_the_model(tmp_path: Path) -> None:
    """A tool call on a path outside the tree comes back to the model as an error result."""
    (tmp_path / "outside.txt").write_text("do not read")
    with MessagesServer() as srv:
        srv.enqueue(reply(tool_use("read_file", {"path": "../outside.txt"})), reply("I could not read it."))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        result = tool_results(srv.message_requests[1].json)[0]
    assert result["is_error"] is True and "outside the work tree" in result["content"]
    assert "do not read" not in result["content"]
    assert (signals.tool_calls, signals.tool_failures) == (1, 1)


@integration
def test_same_failing_call_three_times_is_named_once_then_ends_the_session(tmp_path: Path) -> None:
    """The same tool call with the same error three times, nothing changed between: the loop is named to the model
    once with the result (greedy decoding of the same context gives the same call; a new context may not), the rules
    count anew, and the second loop is a stop: CRASHED with the rule named, no seventh request."""
    call = tool_use("run_shell", {"command": "python -c 'import missing_mod'"})
    with MessagesServer() as srv:
        srv.enqueue(reply(call), reply("Retrying.", call), reply(call), *(reply(call) for _ in range(3)), reply("never"))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        assert len(srv.message_requests) == 6
        named = [t for t in user_texts(srv.message_requests[3].json) if t.startswith("You are going round in circles")]
        assert named == [LOOP_TEXT.format(loop=named[0].split(": ", 1)[1].split(". The same calls")[0])]
        assert "the same call failed 3 times" in named[0] and "ModuleNotFoundError" in named[0]
        assert not any(t.startswith("You are going round") for t in user_texts(srv.message_requests[2].json))
    assert signals.exit_kind is ExitKind.CRASHED
    assert (signals.error or "").startswith("stuck (repeated_error): the same call failed 3 times")
    assert "ModuleNotFoundError" in (signals.error or "")
    assert (signals.tool_calls, signals.tool_failures) == (6, 6)


@integration
def test_a_failing_gate_rerun_after_each_edit_is_iteration_not_a_stop(tmp_path: Path) -> None:
    """Edit, run the failing test, edit, run it again...: each edit changed the work tree, so the session goes on
    until the model stops, however often the same command failed."""
    gate = tool_use("run_shell", {"command": "python -c 'import calc; assert calc.add(2, 3) == 5'"})
    turns = []
    for n in range(4):
        turns += [reply(gate), reply(tool_use("write_file", {"path": "calc.py", "content": f"def add(a, b):\n    return a - b + {n} * 0\n"}))]
    with MessagesServer() as srv:
        srv.enqueue(*turns, reply(gate), reply("I could not fix it."))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        assert srv.pending == 0
    assert signals.exit_kind is ExitKind.FINISHED and signals.error is None
    assert (signals.tool_calls, signals.tool_failures) == (9, 5)


@integration
def test_a_failing_command_that_changes_the_work_tree_each_time_is_not_a_repeat(tmp_path: Path) -> None:
    """The same command, the same error, five times, but each run changed a file's content (git's status line for
    it stays `?? notes.txt`): nothing counts across a change, so the session goes on."""
    call = tool_use("run_shell", {"command": "echo x >> notes.txt; exit 1"})
    with MessagesServer() as srv:
        srv.enqueue(*(reply(call) for _ in range(5)), reply("It keeps failing."))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        assert srv.pending == 0
    assert signals.exit_kind is ExitKind.FINISHED and signals.error is None
    assert (signals.tool_calls, signals.tool_failures) == (5, 5)


@integration
def test_the_same_call_with_the_same_result_four_times_is_a_stop(tmp_path: Path) -> None:
    """`git status` again and again, each identical and nothing changed: stopped at the fourth, the rule named."""
    call = tool_use("run_shell", {"command": "git status --short"})
    with MessagesServer() as srv:
        srv.enqueue(*(reply(call) for _ in range(13)))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        assert len(srv.message_requests) == 8  # named once at the fourth, stopped at the next fourth
    assert signals.exit_kind is ExitKind.CRASHED and signals.tool_failures == 0
    assert (signals.error or "").startswith("stuck (repeated_result): the same call gave the same result 4 times")


@integration
def test_two_calls_taking_turns_with_nothing_changed_is_a_stop(tmp_path: Path) -> None:
    """read, run, read, run, read, run with the same results: alternation."""
    read = tool_use("read_file", {"path": "calc.py"})
    run = tool_use("run_shell", {"command": "grep -q 'a + b' calc.py"})
    with MessagesServer() as srv:
        request = make_request(tmp_path, srv.url)
        (request.workdir / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        srv.enqueue(*(reply(c) for c in (read, run) * 7))
        signals = fast_backend().run(request)
        assert len(srv.message_requests) == 12  # named once at the sixth, stopped at the next sixth
    assert signals.exit_kind is ExitKind.CRASHED
    assert (signals.error or "").startswith("stuck (alternation): ")


@integration
def test_resume_continues_the_saved_conversation(tmp_path: Path) -> None:
    """A new backend instance resumes by session id: the server sees the earlier turns, then the new prompt."""
    with MessagesServer() as srv:
        srv.enqueue(reply(tool_use("write_file", {"path": "a.txt", "content": "A"})), hang())
        first = fast_backend().run(make_request(tmp_path, srv.url, prompt="first prompt", stall_minutes="0.5s"))
        assert first.exit_kind is ExitKind.STALLED
        srv.enqueue(reply("Resumed and finished."))
        second = fast_backend().run(make_request(tmp_path, srv.url, prompt="go on", resume=first.agent_session_id))
        body = srv.message_requests[-1].json
    assert second.exit_kind is ExitKind.FINISHED and second.agent_session_id == first.agent_session_id
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert user_texts(body) == ["first prompt", "go on"]
    assert tool_results(body)[0]["is_error"] is False  # the write ran in the first session
    assert body["messages"][1]["content"][0]["name"] == "write_file"


def test_resume_of_unknown_session_is_a_clear_crash(tmp_path: Path) -> None:
    """Resuming a session with no saved conversation fails with the reason, not an exception."""
    signals = fast_backend().run(make_request(tmp_path, "http://127.0.0.1:9", resume="nosuchsession"))
    assert signals.exit_kind is ExitKind.CRASHED and "no saved conversation" in (signals.error or "")
    signals = fast_backend().run(make_request(tmp_path, "http://127.0.0.1:9", resume="../../etc/passwd"))
    assert signals.exit_kind is ExitKind.CRASHED and "not a session id" in (signals.error or "")
