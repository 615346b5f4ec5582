"""Compaction of the ledger (runner.core.compaction), pure: a summary of the oldest entries folds to the state the
entries did, whatever they were and wherever the cut falls, and carries the totals status and logs show."""

from __future__ import annotations

from datetime import timedelta

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
