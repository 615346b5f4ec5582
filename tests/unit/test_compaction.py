"""Compaction of the ledger (runner.core.compaction), pure: a summary of the oldest entries folds to the state the
entries did, whatever they were and wherever the cut falls, and carries the totals status and logs show."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.actions import Blame, Outcome, Park, RunSession, SessionKind
from runner.core.compaction import summarize, summary_line
from runner.core.ledger import Note, Parked, Reply, SessionStarted, Summary, parse_entry, dump_entry
from runner.core.policy import RunState, fold
from tests.core_builders import T0, record

BLAME = {Outcome.GATES_RED: Blame.AGENT, Outcome.NO_PROGRESS: Blame.AGENT, Outcome.AGENT_ERROR: Blame.AGENT,
         Outcome.LIMIT_BACKOFF: Blame.ENVIRONMENT, Outcome.ROLLED_OVER: Blame.ENVIRONMENT}
NEXT = RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="next")


def entries_for(n: int, outcome: Outcome, extra: int) -> list:
    at = T0 + timedelta(hours=n)
    out: list = [SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=at, base_sha="b" * 40)]
    out.append(record(n=n, outcome=outcome, blame=BLAME.get(outcome, Blame.NONE), tokens=10 * n,
                      cost_usd=0.25 if n % 3 else None, cost_lower_bound=n % 7 == 0, next_action=NEXT,
                      fingerprint="f" if outcome is Outcome.GATES_RED else None,
                      advanced=("1.1",) if outcome is Outcome.ADVANCED else ()))
    if extra == 1:
        out.append(Note(at=at, text=f"note {n}", user="maintainer", source=f"u{n}"))
    elif extra == 2:
        out.append(Parked(at=at, reason="parked"))
        out.append(Reply(at=at, command="retry", text="go", next_action=NEXT))
    return out


ledgers = st.lists(st.tuples(st.sampled_from([o for o in Outcome if o is not Outcome.INTERRUPTED]),
                             st.integers(0, 2)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(ledgers, st.data())
def test_a_compacted_ledger_folds_to_the_state_of_the_full_one(sessions, data):
    full = [e for n, (outcome, extra) in enumerate(sessions, start=1) for e in entries_for(n, outcome, extra)]
    cut = data.draw(st.integers(0, len(full)))
    again = data.draw(st.integers(cut, len(full)))  # a second compaction on top of the first
    first = summarize(full[:cut], at=T0)
    compacted = [first, *full[cut:]]
    assert fold(compacted) == fold(full)
    second = summarize(compacted[:1 + again - cut], at=T0, previous="abc")
    assert fold([second, *full[again:]]) == fold(full)
    assert second.entries == again and second.previous == "abc"
    records = [e for e in full[:again] if getattr(e, "type", "") == "session"]
    assert second.sessions == len(records) and sum(second.outcomes.values()) == len(records)
    assert second.tokens == sum(r.tokens for r in records)
    assert second.credited_count == sum(r.outcome is Outcome.ADVANCED for r in records)
    assert second.cost_known == any(r.cost_usd is not None for r in records)
    assert second.cost_lower_bound == any(r.cost_lower_bound for r in records)
    if records:
        assert (second.first_session, second.last_session) == (records[0].n, records[-1].n)
    assert parse_entry(dump_entry(second)) == second  # it round-trips as a ledger line
    if again:  # the plan's run keeps the time of its very first entry (the watch pull request's key)
        from runner.drivers.actions.watch import run_key

        assert second.began == full[0].started_at and run_key([second]) == run_key(full)


def test_the_summary_line_says_what_it_stands_for():
    full = entries_for(1, Outcome.ADVANCED, 0) + entries_for(2, Outcome.GATES_RED, 0) + entries_for(3, Outcome.ADVANCED, 0)
    line = summary_line(summarize(full, at=T0))
    assert line.startswith("sessions 1-3 compacted (3 sessions: 2 Advanced, 1 GatesRed; 2 checkpoint(s) credited")
    assert "60 tokens" in line


def test_a_summary_of_another_fold_version_carries_its_totals():
    odd = Summary(at=T0, entries=5, fold=0, state={"no such field": 1}, sessions=4, tokens=99, cost_usd=1.5)
    state = fold([odd])
    assert (state.sessions, state.tokens, state.cost_usd) == (4, 99, 1.5)
    assert fold([odd, *entries_for(5, Outcome.PROGRESS, 0)]).sessions == 5


def test_a_summary_is_only_ever_first():
    s = summarize(entries_for(1, Outcome.PROGRESS, 0), at=T0)
    try:
        summarize([*entries_for(2, Outcome.PROGRESS, 0), s], at=T0)
    except ValueError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a summary in the middle was accepted")
    assert isinstance(fold([s]).pending, RunSession) and not isinstance(fold([s]).pending, Park)
    assert fold([s]) != RunState()


@pytest.mark.parametrize("flood", ["é", "\U0001F600", "\x01"])
def test_the_biggest_summary_an_agent_and_a_human_can_cause_is_under_the_entry_limit(flood):
    """The summary holds the last session's record and the pending action beside its totals: with the biggest
    record an agent can cause (tests/unit/test_bounds.py), the five notes and a reply a maintainer may write at
    their longest, and a hundred credited checkpoints before them, it stays under ENTRY_LIMIT, counts the bytes it
    left out, and folds to what the policy reads of the full ledger."""
    from tests.unit.test_bounds import worst_record

    from runner.core.bounds import ENTRY_LIMIT
    from runner.core.replies import MAX_INSTRUCTIONS

    human = flood * MAX_INSTRUCTIONS
    full: list = []
    for n in range(1, 101):
        full += entries_for(n, Outcome.ADVANCED, 0)
    worst = worst_record(flood, n=101)
    full += [SessionStarted(n=101, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=worst.started_at,
                            base_sha="b" * 40), worst]
    full += [Note(at=worst.finished_at + timedelta(minutes=i), text=f"{i}{human}", user="m", source=f"s{i}")
             for i in range(5)]
    summary = summarize(full, at=T0)
    size = len(dump_entry(summary).encode())
    assert size < ENTRY_LIMIT, (size, summary.left_out)
    assert (summary.left_out > 0) is (flood != "é"), summary.left_out  # two-byte floods fit whole (196 KB)
    assert parse_entry(dump_entry(summary)) == summary
    want, got = fold(full), fold([summary])
    assert (got.sessions, got.tokens, got.cost_usd, got.stage_attempts, got.streak, got.parked, got.next_n) == (
        want.sessions, want.tokens, want.cost_usd, want.stage_attempts, want.streak, want.parked, want.next_n)
    assert got.last is not None and want.last is not None
    assert (got.last.n, got.last.outcome, got.last.blame, got.last.checkpoint, got.last.fingerprint,
            got.last.rejected_flips) == (want.last.n, want.last.outcome, want.last.blame, want.last.checkpoint,
                                         want.last.fingerprint, want.last.rejected_flips)
    assert got.pending.reason == want.pending.reason and len(got.notes) == len(want.notes) == 5
    assert summary.credited_count == 100 and summary.credited[-1] == "1.1" and summary.sessions == 101
    again = summarize([summary, *entries_for(102, Outcome.PROGRESS, 0)], at=T0)  # a second compaction carries it
    assert again.left_out >= summary.left_out and len(dump_entry(again).encode()) < ENTRY_LIMIT


def test_a_summary_that_fits_is_whole():
    full = [e for n in range(1, 30) for e in entries_for(n, Outcome.ADVANCED, n % 3)]
    summary = summarize(full, at=T0)
    assert summary.left_out == 0 and fold([summary]) == fold(full)
