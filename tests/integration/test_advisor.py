"""The advisor answers from a closed vocabulary or it answers `human`, with the reason why."""

from __future__ import annotations

import json

import anthropic
import pytest

from runner.core.actions import Blame, Outcome
from runner.adapters.advisor import AdvisorAnswer, consult_advisor, parse_advice, render_history
from runner.core.evidence import Hints
from runner.core.ledger import GateSummary
from tests.core_builders import record
from tests.servers.messages import (
    MessagesServer,
    error_turn,
    reply,
    server_error,
    unauthorized,
)

QUESTION = "stage 1 has spent its 4 attempts on checkpoint 1.2"


def _env(srv: MessagesServer) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": srv.url}


@pytest.mark.parametrize("answer", ["retry", "resume", "skip", "human"])
def test_each_word_of_the_vocabulary_is_valid(answer: str) -> None:
    """Every word of the vocabulary with a reason is a valid answer."""
    got = parse_advice(json.dumps({"answer": answer, "reason": "because"}), "m")
    assert got == AdvisorAnswer(answer=answer, reason="because", valid=True, model="m")  # type: ignore[arg-type]


@pytest.mark.parametrize("text, why", [
    ('{"answer": "restart", "reason": "x"}', "answer"),
    ('{"answer": "RETRY", "reason": "x"}', "answer"),
    ('{"answer": "retry"}', "reason"),
    ('{"answer": "retry", "reason": ""}', "reason"),
    ('{"reason": "x"}', "answer"),
    ('{"answer": ["retry"], "reason": "x"}', "answer"),
    ('["retry"]', "not valid"),
    ("retry, because it is flaky", "did not answer JSON"),
    ('{"answer": "retry", "reason": "x"', "did not answer JSON"),
    ("", "did not answer JSON"),
])
def test_anything_else_is_human(text: str, why: str) -> None:
    """A word outside the vocabulary, a missing key or malformed JSON becomes human, invalid, with why."""
    got = parse_advice(text, "m")
    assert got.answer == "human" and got.valid is False
    assert why in got.reason


def test_fenced_json_is_read() -> None:
    """A JSON object inside a markdown code fence is still the answer."""
    got = parse_advice('```json\n{"answer": "skip", "reason": "optional docs"}\n```')
    assert (got.answer, got.valid) == ("skip", True)


@pytest.mark.integration
def test_consult_over_http_sends_history_and_validates() -> None:
    """The advisor model gets the history and the question over real HTTP; its valid answer is returned."""
    with MessagesServer() as srv:
        srv.enqueue(reply('{"answer": "resume", "reason": "the last session was close"}'))
        got = consult_advisor("#1 delivery -> Stalled", QUESTION, model="claude-haiku-4-5", env=_env(srv))
        (req,) = srv.message_requests
    assert got == AdvisorAnswer(answer="resume", reason="the last session was close", valid=True, model="claude-haiku-4-5")
    assert req.json["model"] == "claude-haiku-4-5"
    prompt = req.json["messages"][0]["content"]
    assert "#1 delivery -> Stalled" in prompt and QUESTION in prompt
    assert "retry" in req.json["system"] and "human" in req.json["system"]


@pytest.mark.integration
@pytest.mark.parametrize("turn, why", [
    (reply('{"answer": "rewrite everything", "reason": "bold"}'), "not valid"),
    (reply("I think you should retry."), "did not answer JSON"),
    (reply('{"answer": "retry"}'), "reason"),
    (unauthorized(), "HTTP 401"),
    (error_turn(400, "invalid_request_error", "model: not found"), "HTTP 400"),
])
def test_consult_failures_mean_human(turn, why: str) -> None:  # type: ignore[no-untyped-def]
    """An invalid answer or a failed call over HTTP becomes human with the reason."""
    with MessagesServer() as srv:
        srv.enqueue(turn)
        got = consult_advisor("history", QUESTION, model="claude-haiku-4-5", env=_env(srv))
    assert (got.answer, got.valid) == ("human", False)
    assert why in got.reason


@pytest.mark.integration
def test_unreachable_advisor_means_human() -> None:
    """Persistent 5xx (after the client's few retries) becomes human, not an exception."""
    with MessagesServer() as srv:
        srv.enqueue(*[server_error()] * 3)
        got = consult_advisor("h", QUESTION, model="claude-haiku-4-5", env=_env(srv),
                              client_factory=lambda **kw: anthropic.Anthropic(**{**kw, "max_retries": 0}))
    assert (got.answer, got.valid) == ("human", False) and "HTTP 500" in got.reason


@pytest.mark.parametrize("model, env, why", [
    ("", {"ANTHROPIC_API_KEY": "k"}, "no advisor configured"),
    ("claude-haiku-4-5", {}, "ANTHROPIC_API_KEY"),
])
def test_no_advisor_configured_means_human(model: str, env: dict[str, str], why: str) -> None:
    """Without a model or an API key nothing is called and the answer is human."""
    got = consult_advisor("h", QUESTION, model=model, env=env,
                          client_factory=lambda **kw: pytest.fail("no client may be built"))
    assert (got.answer, got.valid) == ("human", False) and why in got.reason


def test_render_history_lists_sessions_and_stays_bounded() -> None:
    """Each session is one line with its outcome and evidence; old sessions drop out first."""
    records = [
        record(n=1, outcome=Outcome.GATES_RED, blame=Blame.AGENT, fingerprint="abc123", reasons=("gate tests red",),
               gates=(GateSummary(name="tests", required=True, passed=False),)),
        record(n=2, outcome=Outcome.NO_PROGRESS, blame=Blame.AGENT, hints=Hints(claimed_done=True),
               instructions="try the other library"),
    ]
    text = render_history(records)
    first, second = text.splitlines()
    assert first.startswith("#1 delivery") and "GatesRed" in first and "red gates: tests" in first
    assert "abc123" in first and "gate tests red" in first
    assert "NoProgress" in second and "claimed it was done" in second and "try the other library" in second
    many = [record(n=i, reasons=("x" * 300,)) for i in range(1, 101)]
    bounded = render_history(many, limit=2000)
    assert len(bounded) <= 2100
    assert bounded.splitlines()[0].endswith("earlier session(s) not shown)")
    assert bounded.splitlines()[-1].startswith("#100 ")
