"""runner.core.bounds: whatever an agent writes, what the record keeps of it is bounded, with a count of what
was left out (issue 46)."""

from __future__ import annotations

import pytest
from core_builders import evidence, signals, work_commit

from runner.core.bounds import (
    COMMIT_LIMIT, FILE_LIMIT, HANDOFF_LIMIT, LIST_LIMIT, NAME_LIMIT, PLAN_GROWTH_BYTES, PLAN_GROWTH_LINES,
    TEXT_LIMIT, bound_evidence, bound_list, bound_tail, bound_text, plan_too_big,
)
from runner.core.evidence import CommitInfo, Hints
from runner.core.outcome import classify

BASE = "---\nagent: {backend: script}\n---\n# P\n\n## Stage 1: A\n- [ ] 1.1 One\n"


def test_a_short_text_is_kept_as_it_is():
    """Nothing is cut from a text within the bound."""
    assert bound_text("x" * TEXT_LIMIT) == "x" * TEXT_LIMIT


def test_a_long_text_is_cut_to_the_bound_and_says_how_much_was_left_out():
    """A megabyte of text keeps its start, at most TEXT_LIMIT characters, and the count of the rest."""
    out = bound_text("a" * 1_000_000)
    assert len(out) <= TEXT_LIMIT and out.startswith("a" * 100)
    kept = out.index(" [...")
    assert f"{1_000_000 - kept:,} more characters left out" in out


def test_a_tail_keeps_the_end():
    """An output's tail keeps its last characters and counts the earlier ones."""
    out = bound_tail("b" * 10_000 + "END", 500)
    assert len(out) <= 500 and out.endswith("END") and "earlier characters left out" in out


def test_a_long_list_keeps_its_first_items_and_counts_the_rest():
    """Ten thousand items: LIST_LIMIT kept, the last one counting what was left out; each item bounded."""
    out = bound_list([f"item {i} " + "z" * 5000 for i in range(10_000)], "reason(s)")
    assert len(out) == LIST_LIMIT
    assert out[-1] == f"... and {10_000 - LIST_LIMIT + 1:,} more reason(s) left out"
    assert all(len(i) <= TEXT_LIMIT for i in out)
    assert bound_list(["a", "b"]) == ("a", "b")


def test_a_plan_grown_past_the_bound_is_not_read():
    """A plan within PLAN_GROWTH_LINES/BYTES of its base is read; more lines or more bytes are not."""
    assert plan_too_big(BASE, BASE + "note\n" * (PLAN_GROWTH_LINES - 10)) is None
    assert "not read" in plan_too_big(BASE, BASE + "- [x] 9.1 x\n" * (PLAN_GROWTH_LINES + 1))
    assert "not read" in plan_too_big(BASE, BASE + "n" * (PLAN_GROWTH_BYTES + 1))


def test_every_part_of_the_evidence_the_agent_wrote_is_bounded():
    """Tampering lines, a handoff, commit messages, file lists, commits, an error and the hints are cut."""
    commits = tuple(CommitInfo(sha=f"{i:040x}", summary="s" * 50_000, files=tuple(f"f{j}" for j in range(5000)))
                    for i in range(COMMIT_LIMIT + 50))
    e = bound_evidence(evidence(
        commits=commits, tampering=tuple(f"t{i}" for i in range(100_000)), handoff="h" * 10_000_000,
        signals=signals(error="e" * 100_000, agent_session_id="i" * 10_000,
                        hints=Hints(final_text="f" * 100_000, claims=tuple(f"c{i}" for i in range(1000))))))
    assert len(e.tampering) == LIST_LIMIT and "more protected change(s) left out" in e.tampering[-1]
    assert len(e.handoff) <= HANDOFF_LIMIT
    assert len(e.commits) == COMMIT_LIMIT and e.commits_left_out == 50
    assert all(len(c.summary) <= TEXT_LIMIT and len(c.files) == FILE_LIMIT for c in e.commits)
    assert e.commits[0].files[-1] == f"... and {5000 - FILE_LIMIT + 1:,} more file(s)"
    assert len(e.signals.error) <= TEXT_LIMIT and len(e.signals.agent_session_id) <= NAME_LIMIT
    assert len(e.signals.hints.final_text) <= TEXT_LIMIT and len(e.signals.hints.claims) <= 10
    assert len(e.model_dump_json()) < 2_000_000


def test_the_work_commits_are_the_ones_kept():
    """Past COMMIT_LIMIT, the commits that count as work are listed first: a verdict counts them."""
    tracker = tuple(CommitInfo(sha=f"{i:040x}", summary="tick", counts_as_work=False) for i in range(COMMIT_LIMIT))
    e = bound_evidence(evidence(commits=tracker + (work_commit(),)))
    assert len(e.work_commits) == 1 and len(e.commits) == COMMIT_LIMIT


def test_a_verdicts_reasons_are_bounded_whatever_the_evidence_holds():
    """A hundred thousand protected changes (unbounded evidence, as a test may build it) still make at most
    LIST_LIMIT reasons, the last counting the rest."""
    v = classify(evidence(tampering=tuple(f"plans/p.md: checkpoint 9.{i} was added" for i in range(100_000))))
    assert len(v.reasons) <= LIST_LIMIT + 3
    assert any(r.endswith("more reason(s) left out") for r in v.reasons)


def test_a_set_up_problem_is_the_park_headline():
    """NeedsHuman for a set-up problem parks with the gate's failing line as the reason (the report's headline),
    not 'the session needs a human'; any other NeedsHuman keeps the generic headline."""
    from core_builders import gate, plan

    from runner.core.policy import decide_next, fold

    red = gate(passed=False, setup_problem="the gate is red on a fresh checkout of the base commit abc too "
                                           "(exit 1: ModuleNotFoundError: No module named 'pytest')")
    v = classify(evidence(gates=(red,)))
    park = decide_next(v, fold([]), plan())
    assert park.action == "park" and park.reason.startswith("set-up problem: tests: the gate is red")
    assert "No module named 'pytest'" in park.reason and len(park.reason) <= 420
    other = decide_next(classify(evidence(tampering=("x",))), fold([]), plan())
    assert other.reason == "the session needs a human"


FLOODS = {"two-byte": "é", "four-byte": "\U0001F600", "escaped": "\x01", "quote": '"'}


def worst_record(ch: str, n: int = 1):
    """The biggest record an agent can cause: every text of its own `ch` * 50,000 (a control character is six
    bytes of JSON, an emoji four), in every place a record quotes, the verdict's reasons quoted again by the park
    the policy decides; built as a session's record is (`session_record`)."""
    from core_builders import plan

    from runner.core.actions import SessionKind
    from runner.core.ledger import SessionStarted
    from runner.core.policy import decide_next, fold
    from runner.core.session_record import session_record

    huge = ch * 50_000
    e = bound_evidence(evidence(
        handoff="\n".join(f"HUMAN: {i} {huge}" for i in range(100)),
        tampering=tuple(f"{i} {huge}" for i in range(100)), deleted_tests=tuple(f"t{i}{huge}" for i in range(100)),
        signals=signals(error=huge, agent_session_id=huge, last_tool=huge,
                        hints=Hints(claimed_done=True, final_text=huge, claims=(huge,) * 50, stop_reason=huge,
                                    result_subtype=huge))))
    v = classify(e)
    park = decide_next(v, fold([]), plan())
    assert park.action == "park" and len(park.details) > LIST_LIMIT  # the flood reached the next action too
    started = SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=e.started_at,
                             base_sha="0" * 40)
    return session_record(started, v, plan(), backend=e.signals.backend, hints=e.signals.hints, next_action=park)


@pytest.mark.parametrize("flood", FLOODS)
def test_the_biggest_record_an_agent_can_cause_is_under_the_entry_limit(flood):
    """Every text of the agent's as big as it likes, of characters that take more bytes than one: the session's
    ledger entry stays under ENTRY_LIMIT (docs/reliability.md's per-session bound), and says what it left out.
    (Cut to characters alone, the escaped flood made a record of about 1 MB, the emoji one 690 KB, the two-byte
    one 350 KB.)"""
    from runner.core.bounds import ENTRY_LIMIT
    from runner.core.ledger import dump_entry

    record = worst_record(FLOODS[flood])
    size = len(dump_entry(record).encode())
    assert size > 20_000, size  # the flood reached the record, cut
    assert size < ENTRY_LIMIT, f"a record of {size:,} bytes"
    assert record.outcome.value == "NeedsHuman" and record.next_action.action == "park"
    assert any("left out" in r for r in record.reasons) and any("left out" in d for d in record.next_action.details)


def test_a_record_that_fits_is_not_touched():
    from runner.core.bounds import fit_record
    from tests.core_builders import record

    r = record(reasons=("é" * 1999,) * 40, hints=Hints(final_text="x" * 2000, claims=("y",) * 10))
    assert fit_record(r) is r


def test_a_lone_surrogate_becomes_a_replacement_character_everywhere_a_text_is_bounded():
    """JSON carries `\\ud800`, UTF-8 does not: every text bounded (and every line a backend reads) is writable."""
    import json

    from runner.backends.common import jsonline
    from runner.core.bounds import bound_tail, bound_text, utf8_safe

    assert bound_text("a\ud800b") == "a\ufffdb" and bound_tail("x" * 500 + "\udfff", 100).endswith("\ufffd")
    assert utf8_safe({"k\ud800": ["\udc00", 1, None]}) == {"k\ufffd": ["\ufffd", 1, None]}
    line = json.dumps({"type": "result", "result": "done \ud800 \U0001F600"})
    assert jsonline.loads(line) == {"type": "result", "result": "done \ufffd \U0001F600"}  # a pair stays a pair
    assert jsonline.loads('{"a": "plain"}') == {"a": "plain"}
    bound_text("\ud83d" * 3).encode("utf-8")  # never raises


@pytest.mark.parametrize("reported, recorded", [
    (float("inf"), 1_000_000.0), (1e308, 1_000_000.0), (10**400, 1_000_000.0), (float("nan"), None),
    (-1.0, None), (float("-inf"), None), ("12", None), (True, None), (0.5, 0.5), (None, None)])
def test_a_cost_is_recorded_finite_and_bounded_and_a_note_says_so(reported, recorded):
    """Whatever cost a backend reports (Claude Code's `total_cost_usd` of Infinity, NaN, 1e308), what is
    recorded is None or a finite amount of at most COST_LIMIT, with a note whenever it differs."""
    from runner.core.bounds import bound_cost
    cost, note = bound_cost(reported)
    assert cost == recorded
    assert (note is None) == (reported is None or reported == 0.5)
    if note is not None:
        assert len(note) < 300 and "recorded as" in note


@pytest.mark.parametrize("reported, recorded", [
    (10**400, 10**12), (float("inf"), 10**12), (float("nan"), 0), (-5, 0), ("7", 0), (1e15, 10**12), (42, 42)])
def test_a_token_count_is_recorded_whole_and_bounded(reported, recorded):
    from runner.core.bounds import bound_count
    count, note = bound_count(reported)
    assert count == recorded and isinstance(count, int) and (note is None) == (reported == 42)
    assert note is None or len(note) < 300


def test_an_absurd_usage_report_is_bounded_in_the_signals_and_quoted_in_the_verdict():
    """The one builder of every backend's account bounds cost, tokens and duration, and the verdict's notes say
    what was reported; the evidence and the record it makes are written as JSON and read back equal."""
    import json
    from runner.backends.common.signals import session_signals
    from runner.core.evidence import Evidence, ExitKind
    s = session_signals("claude-code", ExitKind.FINISHED, cost_usd=float("inf"), input_tokens=10**400,
                        output_tokens=-3, duration_s=float("nan"))
    assert s.cost_usd == 1_000_000.0 and s.input_tokens == 10**12 and s.output_tokens == 0 and s.duration_s == 0.0
    assert len(s.usage_notes) == 3 and "inf" in s.usage_notes[0]
    e = evidence(signals=s)
    dumped = e.model_dump_json()
    assert "Infinity" not in dumped and "NaN" not in dumped and Evidence.model_validate_json(dumped) == e
    verdict = classify(e)
    assert any(r.startswith("usage report bounded: the claude-code backend reported a cost of inf") for r in verdict.reasons)
    json.loads(dumped)  # strict JSON


def test_a_meter_reading_of_nan_or_infinity_is_bounded(tmp_path):
    """The meter a running session leaves (what the progress comment and a cut-short record read) is bounded."""
    from datetime import UTC, datetime, timedelta
    from runner.backends.common.meter import read_meter, write_meter
    since = datetime.now(UTC) - timedelta(seconds=5)
    for cost, seen in ((float("nan"), None), (float("inf"), 1_000_000.0), (1e308, 1_000_000.0)):
        write_meter(tmp_path, 10, cost, False)
        assert "NaN" not in (tmp_path / "meter.json").read_text() and "Infinity" not in (tmp_path / "meter.json").read_text()
        assert read_meter(tmp_path, since).cost_usd == seen
    (tmp_path / "meter.json").write_text(json_text := '{"tokens": 5, "cost_usd": Infinity, "estimated": false, '
                                         f'"written_at": "{datetime.now(UTC).isoformat()}"}}')
    assert "Infinity" in json_text and read_meter(tmp_path, since).cost_usd == 1_000_000.0


def test_a_summary_of_records_whose_costs_overflow_is_written_and_read_back():
    """Records that each hold the most a record may (and an older ledger's 1e308, twice): their summary is finite,
    strict JSON, and parses back."""
    from core_builders import T0, record
    from runner.core.compaction import summarize
    from runner.core.ledger import dump_entry, parse_entry
    records = [record(n=1, cost_usd=1e308), record(n=2, cost_usd=1e308), record(n=3, cost_usd=1_000_000.0)]
    summary = summarize(records, at=T0)
    line = dump_entry(summary)
    assert "null" not in line.split('"cost_usd":')[1][:10] and parse_entry(line) == summary
