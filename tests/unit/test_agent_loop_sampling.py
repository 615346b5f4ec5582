"""The built-in agent asks for sampling after it names a loop (runner.backends.anthropic.backend, LOOP_TEMPERATURE).

Greedy decoding of a small model gives the same call again however the loop is named (docs/real-model.md, issue
47, fourth round). So the requests before the first named loop carry no `temperature` at all (a session without a
loop asks what it always did, of any endpoint), and every request after it carries LOOP_TEMPERATURE in its body;
never to Anthropic's own API (Claude samples already, and its API version of 2026-10-21 refuses the field), and an
endpoint that answers a 400 naming the field gets the same call again without it. The real SDK against the
scripted Messages server: the SDK (1.0 on) has no `temperature` argument, so the field must travel in the body.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.backends.anthropic.backend import LOOP_TEMPERATURE, LOOP_TEXT, samples
from runner.core.evidence import ExitKind
from tests.agent_helpers import fast_backend, make_request, user_texts
from tests.servers.messages import MessagesServer, error_turn, reply, tool_use

FAIL = tool_use("run_shell", {"command": "python3 -c 'import missing_mod'"})


def _named(body: dict) -> bool:
    return any(t.startswith(LOOP_TEXT.split(":")[0]) for t in user_texts(body))


def test_the_requests_after_a_named_loop_ask_for_sampling_and_none_before(tmp_path: Path) -> None:
    """The same failing call three times: the loop is named with the third result, and from the fourth request on
    every body has `temperature`; the first three have none (not even 0)."""
    with MessagesServer() as srv:
        srv.enqueue(reply(FAIL), reply(FAIL), reply(FAIL), reply(tool_use("list_files", {"path": "."})),
                    reply(tool_use("read_file", {"path": "plan.md"})), reply("I could not do it."))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        bodies = [r.json for r in srv.message_requests]
    assert len(bodies) == 6 and [_named(b) for b in bodies] == [False] * 3 + [True] * 3
    assert ["temperature" in b for b in bodies[:3]] == [False] * 3
    assert [b.get("temperature") for b in bodies[3:]] == [LOOP_TEMPERATURE] * 3
    assert 0 < LOOP_TEMPERATURE <= 1  # the Messages API's range
    assert signals.exit_kind is ExitKind.FINISHED


def test_a_session_without_a_loop_never_asks_for_sampling(tmp_path: Path) -> None:
    with MessagesServer() as srv:
        srv.enqueue(reply(tool_use("list_files", {"path": "."})), reply(tool_use("read_file", {"path": "plan.md"})),
                    reply(tool_use("run_shell", {"command": "git status"})), reply("Nothing to do."))
        signals = fast_backend().run(make_request(tmp_path, srv.url))
        bodies = [r.json for r in srv.message_requests]
    assert len(bodies) == 4 and not any("temperature" in b for b in bodies)
    assert signals.exit_kind is ExitKind.FINISHED


def test_an_endpoint_that_refuses_the_field_gets_the_call_again_without_it(tmp_path: Path) -> None:
    """A 400 naming `temperature` (as Claude's API answers since 2026-10-21): the same call again at once, without
    the field and without burning a retry (the backend has none here), and no later request carries it."""
    refused = error_turn(400, "invalid_request_error", "temperature: Extra inputs are not permitted")
    events: list[tuple[str, str]] = []
    with MessagesServer() as srv:
        srv.enqueue(reply(FAIL), reply(FAIL), reply(FAIL), refused, reply(tool_use("list_files", {"path": "."})),
                    reply("I could not do it."))
        signals = fast_backend(max_retries=0).run(make_request(tmp_path, srv.url, events=events))
        bodies = [r.json for r in srv.message_requests]
    assert [b.get("temperature") for b in bodies] == [None, None, None, LOOP_TEMPERATURE, None, None]
    assert bodies[4]["messages"] == bodies[3]["messages"]  # the same call, again
    assert signals.exit_kind is ExitKind.FINISHED and signals.error is None
    assert [e for e, _ in events].count("sampling") == 1


@pytest.mark.parametrize(("url", "asked"), [
    (None, False), ("https://api.anthropic.com", False), ("https://API.anthropic.com/", False),
    ("http://127.0.0.1:8080", True), ("https://gateway.example.com/anthropic", True),
])
def test_anthropics_own_api_is_never_asked_for_sampling(tmp_path: Path, url: str | None, asked: bool) -> None:
    request = make_request(tmp_path, url or "")
    if url is None:
        request.env.pop("ANTHROPIC_BASE_URL")
    assert samples(request) is asked
