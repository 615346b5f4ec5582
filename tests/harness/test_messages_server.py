"""The scripted Messages server speaks the real wire format: checked with the real anthropic SDK."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import anthropic
import httpx
import pytest

from tests.servers.messages import (
    MessagesServer,
    cut,
    hang,
    overloaded,
    rate_limited,
    reply,
    server_error,
    tool_use,
    unauthorized,
)

pytestmark = pytest.mark.integration


def _client(srv: MessagesServer, **kw: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key="sk-test", max_retries=0, **kw)  # type: ignore[arg-type]


def _ask(client: anthropic.Anthropic, **kw: object) -> anthropic.types.Message:
    return client.messages.create(
        model="claude-test-1", max_tokens=100, messages=[{"role": "user", "content": "hi"}], **kw  # type: ignore[arg-type]
    )


def test_create_returns_scripted_text_and_records_request() -> None:
    """A scripted text turn comes back through messages.create and the request is recorded."""
    with MessagesServer() as srv, _client(srv) as client:
        srv.enqueue(reply("hello there", usage={"input_tokens": 7, "output_tokens": 3}))
        msg = _ask(client, system="be brief")
        assert msg.content[0].text == "hello there"  # type: ignore[union-attr]
        assert msg.stop_reason == "end_turn"
        assert (msg.usage.input_tokens, msg.usage.output_tokens) == (7, 3)
        (req,) = srv.message_requests
        assert "sk-test" in (req.headers.get("x-api-key", "") + req.headers.get("authorization", ""))
        assert req.json["system"] == "be brief"
        assert req.json["messages"] == [{"role": "user", "content": "hi"}]


def test_stream_text_and_tool_use_blocks() -> None:
    """A streamed mixed turn reassembles into text plus a tool_use with its id and input."""
    with MessagesServer() as srv, _client(srv) as client:
        srv.enqueue(reply("running it", tool_use("Bash", {"command": "ls -la"}, id="toolu_x")))
        with client.messages.stream(
            model="claude-test-1", max_tokens=100, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            texts = list(stream.text_stream)
            final = stream.get_final_message()
        assert "".join(texts) == "running it"
        assert final.stop_reason == "tool_use"
        block = final.content[1]
        assert (block.type, block.id, block.name, block.input) == ("tool_use", "toolu_x", "Bash", {"command": "ls -la"})  # type: ignore[union-attr]
        assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0
        assert srv.message_requests[0].json["stream"] is True


def test_tool_ids_are_assigned_when_not_given() -> None:
    """A tool_use without an id gets a unique one."""
    with MessagesServer() as srv, _client(srv) as client:
        srv.enqueue(reply(tool_use("Read", {"path": "a"}), tool_use("Read", {"path": "b"})))
        msg = _ask(client)
        ids = [b.id for b in msg.content]  # type: ignore[union-attr]
        assert len(set(ids)) == 2 and all(i.startswith("toolu_") for i in ids)


def test_responder_sees_the_request() -> None:
    """A responder function answers from the request body."""
    with MessagesServer() as srv, _client(srv) as client:
        srv.responder = lambda body: reply(f"you said {body['messages'][-1]['content']}")
        msg = _ask(client)
        assert msg.content[0].text == "you said hi"  # type: ignore[union-attr]


def test_unscripted_requests_get_the_default_and_are_counted() -> None:
    """With nothing queued the server answers the default turn and counts it."""
    with MessagesServer() as srv, _client(srv) as client:
        _ask(client)
        assert srv.unscripted == 1


def test_rate_limit_raises_with_reset_headers() -> None:
    """A 429 turn raises RateLimitError whose response carries retry-after and RFC 3339 reset headers."""
    reset = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    with MessagesServer() as srv, _client(srv) as client:
        srv.enqueue(rate_limited(retry_after_s=42, reset_at=reset))
        with pytest.raises(anthropic.RateLimitError) as info:
            _ask(client)
        headers = info.value.response.headers
        assert headers["retry-after"] == "42"
        assert headers["anthropic-ratelimit-requests-reset"] == "2030-01-02T03:04:05Z"
        assert datetime.fromisoformat(headers["anthropic-ratelimit-tokens-reset"]) == reset
        assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


@pytest.mark.parametrize(
    ("turn", "exc", "status"),
    [
        (overloaded(), anthropic.InternalServerError, 529),
        (server_error(), anthropic.InternalServerError, 500),
        (unauthorized(), anthropic.AuthenticationError, 401),
    ],
)
def test_error_turns_raise_the_sdk_error(turn, exc, status) -> None:  # type: ignore[no-untyped-def]
    """Each failure turn maps to the SDK's error class with the real status code."""
    with MessagesServer() as srv, _client(srv) as client:
        srv.enqueue(turn)
        with pytest.raises(exc) as info:
            _ask(client)
        assert info.value.status_code == status


def test_cut_stream_breaks_the_client() -> None:
    """A stream cut after a few events surfaces as a connection error, not a complete message."""
    with MessagesServer() as srv, _client(srv) as client:
        srv.enqueue(cut(reply("a long answer that never finishes"), after_events=3))
        with pytest.raises(Exception, match="incomplete|Connection error|peer closed"):
            with client.messages.stream(
                model="claude-test-1", max_tokens=100, messages=[{"role": "user", "content": "go"}]
            ) as stream:
                stream.get_final_message()


def test_hang_blocks_until_released() -> None:
    """A hang turn sends nothing until release(); the client then sees the connection drop."""
    with MessagesServer() as srv, _client(srv, timeout=10) as client:
        srv.enqueue(hang())
        errors: list[BaseException] = []

        def call() -> None:
            try:
                _ask(client)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        worker = threading.Thread(target=call)
        started = time.monotonic()
        worker.start()
        worker.join(0.5)
        assert worker.is_alive()
        srv.release()
        worker.join(5)
        assert not worker.is_alive() and time.monotonic() - started < 5
        assert isinstance(errors[0], anthropic.APIConnectionError)


def test_hang_is_ended_by_close() -> None:
    """Closing the server ends a hanging response so no thread outlives it."""
    srv = MessagesServer()
    srv.enqueue(hang(after_events=2))
    client = _client(srv, timeout=10)
    with pytest.raises(Exception, match="incomplete|Connection error|peer closed"):
        with client.messages.stream(
            model="claude-test-1", max_tokens=100, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            threading.Timer(0.3, srv.close).start()
            stream.get_final_message()
    client.close()


def test_count_tokens_and_unknown_endpoints() -> None:
    """count_tokens answers a count; unknown paths answer a JSON 404."""
    with MessagesServer() as srv, _client(srv) as client:
        count = client.messages.count_tokens(model="claude-test-1", messages=[{"role": "user", "content": "hello"}])
        assert count.input_tokens > 0
        with httpx.Client() as http:
            resp = http.get(srv.url + "/v1/whatever")
        assert resp.status_code == 404 and resp.json()["error"]["type"] == "not_found_error"
        assert [r.path for r in srv.requests][-1] == "/v1/whatever"


def test_cut_without_stream_drops_the_connection() -> None:
    """A cut turn asked for without streaming closes the connection with no answer."""
    with MessagesServer() as srv, _client(srv) as client:
        srv.enqueue(cut(reply("never sent"), after_events=0))
        with pytest.raises(anthropic.APIConnectionError):
            _ask(client)
