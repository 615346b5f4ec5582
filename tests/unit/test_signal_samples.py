"""The one failure-text reader (`limits.read_signal`) against what the CLIs and APIs really print.

Every sample in tests/data/signals/*.json names where it was read (a URL, or a repository and path); each is a
test of its own, its id naming the file and the source. The same reader serves the command backend (its
`agent.limit_patterns` add to the defaults) and Codex, so a sample passing here passes there.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.backends.codex.codexjson import classify_codex_error
from runner.backends.command.backend import classify_command_exit
from runner.backends.common.limits import read_signal, status_codes
from runner.core.evidence import ExitKind
from runner.core.plan import AgentConfig
from runner.adapters.sandbox.supervise import ProcessExit

NOW = datetime(2025, 6, 3, 14, 0, 0, tzinfo=UTC)
DATA = Path(__file__).parents[1] / "data" / "signals"
KINDS = {"billing": ExitKind.AUTH, "auth": ExitKind.AUTH, "rate_limit": ExitKind.RATE_LIMIT,
         "unreachable": ExitKind.TRANSIENT, "transient": ExitKind.TRANSIENT}


def _samples():
    for path in sorted(DATA.glob("*.json")):
        for i, s in enumerate(json.loads(path.read_text(encoding="utf-8"))["samples"]):
            assert s["source"], f"{path.name} sample {i} names no source"
            yield pytest.param(s, id=f"{path.stem}[{i}] {s['source'][:90]}")


SAMPLES = list(_samples())


def test_every_source_file_has_samples_of_each_kind():
    """The collection covers every kind of text, from more than one tool."""
    kinds = {p.values[0]["kind"] for p in SAMPLES}
    assert kinds >= {"billing", "auth", "rate_limit", "unreachable", "transient", None}
    assert len({p.id.split("[")[0] for p in SAMPLES}) >= 5


@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_reads_as_its_kind_with_its_reset(sample):
    """The reader names the sample's kind and, for a limit, the reset time the text gives (None when it gives none)."""
    got = read_signal(sample["text"], NOW)
    assert (got.kind if got else None) == sample["kind"], got
    if sample["kind"] == "rate_limit":
        expected = datetime.fromisoformat(sample["reset"]) if sample["reset"] else None
        assert got.reset_at == expected


def _exit(text: str) -> ProcessExit:
    return ProcessExit(returncode=1, reason="exited", stop_detail="", output_bytes=len(text), stdout_lines=0,
                       stderr_tail=text, duration_s=1.0)


@pytest.mark.parametrize("sample", SAMPLES)
def test_command_backend_and_codex_read_the_sample_alike(sample):
    """A `command` agent that prints the sample and fails, and Codex's error text, end as its kind says."""
    want = KINDS.get(sample["kind"], ExitKind.CRASHED)
    verdict = classify_command_exit(_exit(sample["text"]), [], AgentConfig(backend="command", executable="x"), NOW)
    assert verdict.kind is want
    assert classify_codex_error(sample["text"], NOW)[0] is want
    if want is ExitKind.RATE_LIMIT:
        assert verdict.reset_at == (datetime.fromisoformat(sample["reset"]) if sample["reset"] else None)


def test_a_weekly_limit_from_a_command_agent_is_a_limit_not_an_error():
    """Issue 24: a weekly-limit message burned an attempt; it is a limit with its reset time."""
    verdict = classify_command_exit(_exit("You've hit your weekly limit · resets Jul 31, 2am (UTC)"), [],
                                    AgentConfig(backend="command", executable="x"), NOW)
    assert verdict.kind is ExitKind.RATE_LIMIT
    assert verdict.reset_at == datetime(2025, 7, 31, 2, 0, tzinfo=UTC)


def test_plan_limit_patterns_add_to_the_defaults():
    """`agent.limit_patterns` add words of the plan's own CLI; the default readers still apply."""
    agent = AgentConfig(backend="command", executable="x", limit_patterns=(r"\bcooling down\b",))
    assert classify_command_exit(_exit("cooling down for 2 minutes"), [], agent, NOW).reset_at == NOW + timedelta(minutes=2)
    assert classify_command_exit(_exit("You've hit your usage limit. Try again later."), [], agent, NOW).kind \
        is ExitKind.RATE_LIMIT
    assert classify_command_exit(_exit("API Error: 401 Invalid bearer token"), [], agent, NOW).kind is ExitKind.AUTH


@pytest.mark.parametrize(("text", "codes"), [
    ("API Error: 401 {...}", [401]), ("status 429", [429]), ("HTTP 503", [503]), ("HTTP/1.1 502 Bad Gateway", [502]),
    ('{"api_error_status":429}', [429]), ("429 Too Many Requests", [429]), ("Request rejected (429)", [429]),
    ("built in 401 ms", []), ("ran 5030 tests", []), ("error: 3 files", []), ("POST /x 500 in 10ms", []),
    ("exit code 401 lines", []),
])
def test_a_status_code_is_one_only_where_the_text_says_so(text, codes):
    """A number is a status only beside a word that makes it one ("API Error:", "status", "HTTP", a reason phrase)."""
    assert status_codes(text) == codes


def test_unreachable_endpoint_says_so_in_the_command_error():
    """A refused connection is named as an unreachable endpoint, so the park reason says what to fix."""
    verdict = classify_command_exit(_exit("Error: connect ECONNREFUSED 127.0.0.1:9"), [],
                                    AgentConfig(backend="command", executable="x"), NOW)
    assert verdict.kind is ExitKind.TRANSIENT
    assert "cannot be reached" in (verdict.error or "")
