"""Compaction of a plan's ledger: its oldest entries folded into one summary. Pure.

A plan's ledger only grows (a few entries a session). So that its state ref stays small and pushable forever,
the store (`runner.adapters.store.layout`) folds the oldest entries into one `Summary` once the ledger holds more
than a fixed number of entries, keeping the latest ones as they were. The summary carries the run state folded
from what it replaced, so `fold(compacted) == fold(full)`; and, for `status`, `logs` and the session tables, the
totals of the sessions it stands for: outcomes, checkpoints credited, tokens, cost, time, first and last session.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from datetime import datetime

from runner.core.actions import Outcome, Park, RunSession, Wait
from runner.core.bounds import ENTRY_LIMIT, FLOAT_MAX, bound_list, bound_text, fit_record, json_size
from runner.core.ledger import Entry, SessionRecord, Summary, dump_entry
from runner.core.policy import FOLD_VERSION, fold, plus_cost, summary_state

CREDITED_LIMIT = 100  # checkpoint ids a summary names (the latest); `credited_count` counts them all


def summarize(entries: Sequence[Entry], *, at: datetime, previous: str = "") -> Summary:
    """The summary standing for `entries`, a ledger's oldest (the first may be an earlier compaction's summary,
    whose totals carry on). `previous`: the state commit the compaction is written on."""
    base = entries[0] if entries and isinstance(entries[0], Summary) else None
    rest = list(entries[1:] if base is not None else entries)
    if any(isinstance(e, Summary) for e in rest):
        raise ValueError("a summary is only ever a ledger's first entry")
    state = fold(rest, summary_state(base) if base is not None else None)
    records = [e for e in rest if isinstance(e, SessionRecord)]
    outcomes = dict(base.outcomes) if base is not None else {}
    credited = list(base.credited) if base is not None else []
    credited_count = base.credited_count if base is not None else 0
    for r in records:
        outcomes[r.outcome.value] = outcomes.get(r.outcome.value, 0) + 1
        if r.outcome is Outcome.ADVANCED:
            credited += r.advanced
            credited_count += len(r.advanced)
    first = base.first_session if base is not None and base.first_session is not None else (
        records[0].n if records else None)
    first_at = base.first_at if base is not None and base.first_at is not None else (
        records[0].started_at if records else None)
    began = base.began if base is not None and base.began is not None else next(
        (t for e in rest for t in (getattr(e, "started_at", None), getattr(e, "at", None)) if t is not None), None)
    return _fitted(Summary(
        at=at, began=began, entries=(base.entries if base is not None else 0) + len(rest), previous=previous,
        fold=FOLD_VERSION, state=json.loads(state.model_dump_json()),
        sessions=(base.sessions if base is not None else 0) + len(records),
        first_session=first, last_session=records[-1].n if records else (base.last_session if base else None),
        first_at=first_at, last_at=records[-1].finished_at if records else (base.last_at if base else None),
        outcomes=outcomes, credited=tuple(credited[-CREDITED_LIMIT:]), credited_count=credited_count,
        tokens=(base.tokens if base is not None else 0) + sum(r.tokens for r in records),
        cost_usd=functools.reduce(plus_cost, (r.cost_usd for r in records), base.cost_usd if base is not None else 0.0),
        cost_known=(base is not None and base.cost_known) or any(r.cost_usd is not None for r in records),
        cost_lower_bound=(base is not None and base.cost_lower_bound) or any(r.cost_lower_bound for r in records),
        seconds=_finite((base.seconds if base is not None else 0.0) + sum(
            (r.finished_at - r.started_at).total_seconds() for r in records)),
        left_out=base.left_out if base is not None else 0,
    ))


def _finite(total: float) -> float:
    """A summary's total as JSON can write it and a summary can read it back: a record's cost is bounded
    (runner.core.bounds.bound_cost), but one read from an older or hand-written ledger may not be."""
    return total if math.isfinite(total) else (FLOAT_MAX if total > 0 else 0.0)


def _fitted(summary: Summary) -> Summary:
    """`summary` under ENTRY_LIMIT bytes of JSON, like every ledger entry. It holds the last session's record and
    what the policy carries (the pending action, a human's instructions and notes) besides its totals: when they
    make it bigger, the last record's agent-written texts are cut first (`bounds.fit_record`: what the policy
    reads of it stays), then the checkpoint ids named (`credited_count` still counts them all), then the
    human texts; `left_out` adds up the bytes cut. Anything shorter is returned as it is."""
    size = json_size(summary)
    if size <= ENTRY_LIMIT:
        return summary
    state = summary_state(summary)
    credited = summary.credited
    for step in range(3):
        if step == 0 and state.last is not None:
            room = ENTRY_LIMIT - _SLACK - (size - json_size(state.last))
            last = fit_record(state.last, max(room, 0))  # the pending action it decided is cut with it
            state = state.evolve(last=last, pending=last.next_action if state.pending == state.last.next_action
                                 else state.pending)
        elif step == 1:
            credited = credited[-10:]
        elif step == 2:
            state = state.evolve(
                instructions=_cut(state.instructions), pending=_cut_action(state.pending),
                notes=tuple(n.evolve(text=bound_text(n.text, 500)) for n in state.notes),
                last=None if state.last is None else state.last.evolve(
                    instructions=_cut(state.last.instructions), next_action=_cut_action(state.last.next_action)))
        fitted = summary.model_copy(update=dict(state=json.loads(state.model_dump_json()), credited=credited))
        if json_size(fitted) <= ENTRY_LIMIT - _SLACK:
            break
    return fitted.model_copy(update=dict(left_out=summary.left_out + size - json_size(fitted)))


_SLACK = 64  # bytes kept free for `left_out`'s own digits


def _cut(text: str | None) -> str | None:
    return None if text is None else bound_text(text, 500)


def _cut_action(action):
    """A pending action with the human's instructions and a park's details cut."""
    if isinstance(action, RunSession):
        return action.evolve(instructions=_cut(action.instructions))
    if isinstance(action, Wait):
        return action.evolve(then=_cut_action(action.then))
    if isinstance(action, Park):
        return action.evolve(details=bound_list(action.details, "detail(s)", 3, 120))
    return action


def compact_lines(lines: Sequence[bytes], oldest: Callable[[int], Sequence[Entry]], *, longest: int, keep: int,
                  at: datetime, previous: str) -> list[bytes] | None:
    """The rule every store compacts by: a ledger of more than `longest` entries (`lines`, one JSON line each, with
    its newline) becomes one summary line for all but its latest `keep` entries, then those kept byte for byte.
    `oldest(cut)`: the first `cut` entries, parsed. None: the ledger is not long enough to compact."""
    if len(lines) <= longest:
        return None
    cut = len(lines) - keep
    summary = summarize(oldest(cut), at=at, previous=previous)
    return [(dump_entry(summary) + "\n").encode(), *lines[cut:]]


def written_at(entries: Sequence[Entry], default: datetime) -> datetime:
    """When entries were written, as they say: the latest time any of them names (`default` if none names one)."""
    times = [t for e in entries for name in ("at", "finished_at", "started_at")
             if isinstance(t := getattr(e, name, None), datetime)]
    return max(times, default=default)


def summary_line(summary: Summary) -> str:
    """One line saying what a summary stands for (status, logs, the session tables)."""
    if not summary.sessions:
        return f"{summary.entries} earlier ledger entries compacted (no session among them)"
    counts = ", ".join(f"{n} {o}" for o, n in sorted(summary.outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    cost = f", ${summary.cost_usd:.2f}{' at least' if summary.cost_lower_bound else ''}" if summary.cost_known else ""
    return (f"sessions {summary.first_session}-{summary.last_session} compacted ({summary.sessions} sessions: "
            f"{counts}; {summary.credited_count} checkpoint(s) credited; {summary.tokens:,} tokens{cost})")
