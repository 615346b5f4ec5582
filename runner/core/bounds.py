"""Bounds on everything an agent's output becomes in plan-runner's record. Pure.

Whatever the agent writes (a plan with a million checkpoint-shaped lines, a megabyte of handoff, ten
thousand commits, an error text the size of a log), what plan-runner keeps of it is cut to these limits,
with a count of what was left out, so that a session adds at most a fixed amount to the plan's state
ref (docs/plan-format.md):

* a text (a reason, a hint, an error, a note, a commit's summary) at most TEXT_LIMIT characters;
* a name (a file path, a session id, a checkpoint id) at most NAME_LIMIT characters;
* a list (reasons, rejected flips, tampering found, deleted tests, claims) at most LIST_LIMIT items, the
  last of which says how many more were left out;
* commits at most COMMIT_LIMIT, each with at most FILE_LIMIT file names;
* the handoff at most HANDOFF_LIMIT characters;
* a session's spend as the backend reported it (`bound_cost`, `bound_count`): a cost a finite amount of at most
  COST_LIMIT dollars, a token count a whole number of at most TOKEN_LIMIT, a duration finite; a report outside
  these (Claude Code's `total_cost_usd` of `Infinity`, `NaN` or `1e308`, a usage of 10**400 tokens) is bounded
  where the backend's account is built (`runner.backends.common.signals`), and the record says so in a note;
* the plan file as the agent left it is read only when it is at most PLAN_GROWTH_BYTES and
  PLAN_GROWTH_LINES beyond the base's: a larger one is a protected change in itself (restored whole).

The limits above count characters, and a character can take up to six bytes of JSON (a control character is
written `\u0001`): a session's record is therefore fitted to ENTRY_LIMIT bytes of JSON as the last step of
building it (`fit_record`: its agent-written texts cut harder, with the same counts of what was left out), so a
segment of the ledger (256 entries) stays under GitHub's 100 MB limit on a file; the store compacts the ledger past
8 segments (runner.core.compaction), and the summary it writes is fitted the same way
(tests/unit/test_bounds.py: every text of the agent's flooded with two-byte, four-byte and escaped characters).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runner.core.evidence import CommitInfo, Evidence, Flip, GateResult, Hints, Record, SessionSignals

if TYPE_CHECKING:
    from runner.core.ledger import SessionRecord

TEXT_LIMIT = 2_000
NAME_LIMIT = 300
LIST_LIMIT = 40
COMMIT_LIMIT = 200
FILE_LIMIT = 40
HANDOFF_LIMIT = 32_000
GATE_OUTPUT_LIMIT = 8_000
PLAN_GROWTH_BYTES = 256 * 1024
PLAN_GROWTH_LINES = 2_000
ENTRY_LIMIT = 256 * 1024
COST_LIMIT = 1_000_000.0  # USD one session is recorded as having spent, at most
TOKEN_LIMIT = 10**12  # tokens one session is recorded as having used, at most
DURATION_LIMIT = 10**8  # seconds
FLOAT_MAX = 1.7976931348623157e308  # the largest finite float (a total that overflowed stays this)
# how `fit_record` cuts a record still over its limit, step by step: (items a list keeps, characters a text keeps)
FIT_STEPS = ((LIST_LIMIT, 500), (10, 120), (3, 40))


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_safe(value: Any) -> Any:
    """`value` (a str, or JSON's dicts and lists of them) with every lone surrogate replaced by U+FFFD: JSON
    carries one (`"\\ud800"`), a model's reply can hold one, and no UTF-8 write accepts it."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {utf8_safe(k): utf8_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [utf8_safe(v) for v in value]
    return value


def bound_text(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text` cut to `limit` characters, saying how many were left out; UTF-8-safe (`utf8_safe`)."""
    text = utf8_safe(text)
    if len(text) <= limit:
        return text
    keep = max(0, limit - 60)  # room for the note
    return text[:keep] + f" [... {len(text) - keep:,} more characters left out]"


def bound_tail(text: str, limit: int) -> str:
    """The end of `text` (an output's tail matters most), saying how many characters were left out before it;
    UTF-8-safe (`utf8_safe`)."""
    text = utf8_safe(text)
    if len(text) <= limit:
        return text
    keep = max(0, limit - 60)
    return f"[... {len(text) - keep:,} earlier characters left out] " + text[len(text) - keep:]


def bound_name(name: str | None) -> str | None:
    return None if name is None else bound_text(name, NAME_LIMIT)


def bound_list(items: Sequence[str], what: str = "item(s)", limit: int = LIST_LIMIT,
               text_limit: int = TEXT_LIMIT) -> tuple[str, ...]:
    """At most `limit` texts, each bounded; the last one says how many more `what` were left out."""
    kept = [bound_text(i, text_limit) for i in items[:limit if len(items) <= limit else limit - 1]]
    if len(items) > limit:
        kept.append(f"... and {len(items) - len(kept):,} more {what} left out")
    return tuple(kept)


def bound_cost(value: object, what: str = "a cost") -> tuple[float | None, str | None]:
    """A cost the agent's backend reported, as plan-runner records it, and a note when it was not recorded as
    reported: not a number, NaN or negative -> None (unknown); more than COST_LIMIT (`Infinity`, `1e308`) ->
    COST_LIMIT. A cost that sums with others and is written as JSON is always finite."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"{what} of {bound_text(repr(value), 60)} is not a number: recorded as unknown"
    try:
        cost = float(value)
    except OverflowError:  # an int beyond any float
        cost = math.inf
    if math.isnan(cost) or cost < 0:
        return None, f"{what} of {value!r} USD is not an amount spent: recorded as unknown"
    if cost > COST_LIMIT:
        return COST_LIMIT, (f"{what} of {_short(cost)} USD is beyond the bound of ${COST_LIMIT:,.0f} a session: "
                            f"recorded as ${COST_LIMIT:,.0f}")
    return cost, None


def bound_count(value: object, what: str = "tokens", limit: int = TOKEN_LIMIT) -> tuple[int, str | None]:
    """A count the agent's backend reported (tokens), as plan-runner records it, and a note when it was not
    recorded as reported: not a whole number, or negative -> 0; more than `limit` -> `limit`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0, f"{what}: {bound_text(repr(value), 60)} is not a count: recorded as 0"
    if isinstance(value, float) and not math.isfinite(value):
        return (limit, f"{what}: {value!r} is beyond the bound of {limit:,}: recorded as {limit:,}") if value > 0 \
            else (0, f"{what}: {value!r} is not a count: recorded as 0")
    if value < 0:
        return 0, f"{what}: {_short(value)} is negative: recorded as 0"
    if value > limit:
        return limit, f"{what}: {_short(value)} is beyond the bound of {limit:,}: recorded as {limit:,}"
    return int(value), None


def bound_seconds(value: float) -> float:
    """A duration plan-runner measured or a backend reported: finite, between 0 and DURATION_LIMIT."""
    return min(float(DURATION_LIMIT), value) if isinstance(value, (int, float)) and value >= 0 else 0.0


def _short(number: float) -> str:
    """A number as a note quotes it: `1e+308`, `1e+400` (an int beyond any float), never 400 digits."""
    if isinstance(number, int) and abs(number) >= 10**15:
        return f"about 1e+{len(str(abs(number))) - 1}" if number > 0 else f"about -1e+{len(str(abs(number))) - 1}"
    return f"{number:.6g}"


def plan_too_big(base_text: str, head_text: str) -> str | None:
    """Why the agent's version of the plan is too big to read (None: it is not)."""
    grown_bytes = len(head_text.encode("utf-8", "surrogatepass")) - len(base_text.encode("utf-8", "surrogatepass"))
    grown_lines = head_text.count("\n") - base_text.count("\n")
    if grown_bytes <= PLAN_GROWTH_BYTES and grown_lines <= PLAN_GROWTH_LINES:
        return None
    return (f"the plan file grew by {grown_bytes:,} bytes and {grown_lines:,} lines (at most {PLAN_GROWTH_BYTES:,} "
            f"bytes and {PLAN_GROWTH_LINES:,} lines are read): it was not read, and was restored from the base commit")


def _commit(c: CommitInfo) -> CommitInfo:
    files = c.files if len(c.files) <= FILE_LIMIT else (
        *(bound_text(f, NAME_LIMIT) for f in c.files[:FILE_LIMIT - 1]),
        f"... and {len(c.files) - FILE_LIMIT + 1:,} more file(s)")
    return c.evolve(summary=bound_text(c.summary), author=bound_text(c.author, NAME_LIMIT),
                    files=tuple(bound_text(f, NAME_LIMIT) for f in files))


def _commits(commits: tuple[CommitInfo, ...]) -> tuple[CommitInfo, ...]:
    """At most COMMIT_LIMIT commits: the work commits first (they are what a verdict counts), in order."""
    if len(commits) <= COMMIT_LIMIT:
        return tuple(_commit(c) for c in commits)
    work = [c for c in commits if c.counts_as_work and not c.wip]
    rest = [c for c in commits if not (c.counts_as_work and not c.wip)]
    kept = {id(c) for c in (work + rest)[:COMMIT_LIMIT]}
    return tuple(_commit(c) for c in commits if id(c) in kept)


def _gate(g: GateResult) -> GateResult:
    return g.evolve(name=bound_text(g.name, NAME_LIMIT), output_tail=bound_tail(g.output_tail, GATE_OUTPUT_LIMIT),
                    error=None if g.error is None else bound_text(g.error),
                    needs_human=None if g.needs_human is None else bound_text(g.needs_human),
                    setup_problem=None if g.setup_problem is None else bound_text(g.setup_problem),
                    red_on_base=None if g.red_on_base is None else bound_text(g.red_on_base))


def _flip(f: Flip) -> Flip:
    return f.evolve(checkpoint_id=bound_text(f.checkpoint_id, NAME_LIMIT),
                    verify_output=bound_tail(f.verify_output, GATE_OUTPUT_LIMIT))


def bound_hints(h: Hints) -> Hints:
    return h.evolve(stop_reason=bound_name(h.stop_reason), result_subtype=bound_name(h.result_subtype),
                    final_text=bound_tail(h.final_text, TEXT_LIMIT), claims=bound_list(h.claims, "claim(s)", 10))


def bound_signals(s: SessionSignals) -> SessionSignals:
    return s.evolve(agent_session_id=bound_name(s.agent_session_id), error=None if s.error is None else
                    bound_text(s.error), last_tool=bound_name(s.last_tool), hints=bound_hints(s.hints),
                    backend=bound_text(s.backend, NAME_LIMIT))


def bound_evidence(e: Evidence) -> Evidence:
    """`e` with every part the agent wrote cut to the bounds above."""
    commits = _commits(e.commits)
    return e.evolve(
        commits=commits, carried_commits=_commits(e.carried_commits),
        flips=tuple(_flip(f) for f in e.flips),  # of the base's checkpoints only: the maintainer's plan bounds them
        tampering=bound_list(e.tampering, "protected change(s)"),
        deleted_tests=bound_list(e.deleted_tests, "deleted test file(s)", text_limit=NAME_LIMIT),
        leaked_secrets=bound_list(e.leaked_secrets, "file(s)", text_limit=NAME_LIMIT),
        gates=tuple(_gate(g) for g in e.gates), signals=bound_signals(e.signals),
        handoff=None if e.handoff is None else bound_text(e.handoff, HANDOFF_LIMIT),
        commits_left_out=e.commits_left_out + len(e.commits) - len(commits),
    )


def json_size(record: Record) -> int:
    """Bytes of `record` as a ledger line (JSON, UTF-8)."""
    return len(record.model_dump_json().encode())


def fit_record(record: SessionRecord, limit: int = ENTRY_LIMIT) -> SessionRecord:
    """`record`, under `limit` bytes of JSON: as it is when it fits, else with the texts the agent wrote (reasons,
    hints, its session id, the backend's name, a park's details) and a human's instructions cut harder, step by step (FIT_STEPS),
    each saying how much was left out; what the policy reads of it (outcome, blame, checkpoint, fingerprint,
    the flips, the next action) is kept as it is."""
    fitted = record
    for items, chars in FIT_STEPS:
        if json_size(fitted) <= limit:
            return fitted
        h, then = record.hints, record.next_action
        if then is not None and then.action == "park":  # a park quotes the verdict's reasons
            then = then.evolve(details=bound_list(then.details, "detail(s)", items, chars))
        fitted = record.evolve(
            next_action=then,
            reasons=bound_list(record.reasons, "reason(s)", items, chars),
            agent_session_id=None if record.agent_session_id is None else bound_text(record.agent_session_id, chars),
            backend=bound_text(record.backend, chars),
            instructions=None if record.instructions is None else bound_text(record.instructions, chars * 4),
            hints=h.evolve(stop_reason=None if h.stop_reason is None else bound_text(h.stop_reason, chars),
                           result_subtype=None if h.result_subtype is None else bound_text(h.result_subtype, chars),
                           final_text=bound_tail(h.final_text, chars), claims=bound_list(h.claims, "claim(s)", items, chars)))
    return fitted
