"""The core pinned at its boundaries: examples and oracle properties that kill the mutants of
runner/core/outcome.py and runner/core/policy.py (see `python -m benchmarks.mutation` and docs/reliability.md)."""

from __future__ import annotations

import pytest

from runner.core.policy import RunState


def test_evolve_rejects_a_misspelt_field():
    """Evolving frozen state with a field it does not have is an error naming the field, not a silent no-op."""
    with pytest.raises(TypeError, match="no field.*sesions"):
        RunState().evolve(sesions=3)
    assert RunState().evolve(sessions=3).sessions == 3


# --- the outcome table: an independent oracle, written from SPEC section 6 -----------------------

from datetime import timedelta  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from core_builders import (  # noqa: E402
    BLOCKED, DONE, T0, TODO, evidence, flip, gate, plan, record, signals, tracker_commit, wip_commit, work_commit,
)
from runner.core.actions import (  # noqa: E402
    Blame, ConsultAdvisor, Finish, Outcome, Park, RunSession, SessionKind, Verdict, Wait,
)
from runner.core.evidence import CommitInfo, Evidence, ExitKind, Hints  # noqa: E402
from runner.core.outcome import RULES, classify  # noqa: E402
from tests.hypothesis_profiles import examples  # noqa: E402

_ROW_OUTCOME = {1: (Outcome.NEEDS_HUMAN, Blame.NONE), 2: (Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT),
                3: (Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT), 4: (Outcome.ROLLED_OVER, Blame.ENVIRONMENT),
                5: (Outcome.STALLED, Blame.NONE), 6: (Outcome.TIMED_OUT, Blame.NONE),
                7: (Outcome.AGENT_ERROR, Blame.AGENT), 8: (Outcome.GATES_RED, Blame.AGENT),
                9: (Outcome.ADVANCED, Blame.NONE), 10: (Outcome.PROGRESS, Blame.NONE),
                11: (Outcome.NO_PROGRESS, Blame.AGENT)}


def _human_asked(handoff: str | None) -> bool:
    for line in (handoff or "").split("\n"):
        words = line.strip()
        while words[:1] in ("-", "*", ">", " "):
            words = words[1:]
        if words.strip()[:6].upper() == "HUMAN:":
            return True
    return False


def _work(commits) -> list[CommitInfo]:
    return [c for c in commits if c.counts_as_work and not c.wip]


def _green(e: Evidence) -> bool:
    return not [g for g in e.gates if g.required and not g.passed]


def _genuine(e: Evidence) -> list[str]:
    credited = _work(e.carried_commits) + _work(e.commits)
    if not credited or not _green(e):
        return []
    return [f.checkpoint_id for f in e.flips if f.after == DONE and f.before != DONE and f.in_session_commits
            and f.verify_passed in (True, None)]


PREDICATES = {
    1: lambda e: (_human_asked(e.handoff) or e.signals.exit_kind == ExitKind.AUTH or bool(e.tampering)
                  or bool(e.leaked_secrets) or any(f.after == BLOCKED and f.before != BLOCKED for f in e.flips)),
    2: lambda e: e.signals.exit_kind == ExitKind.RATE_LIMIT,
    3: lambda e: e.signals.exit_kind == ExitKind.TRANSIENT,
    4: lambda e: e.signals.exit_kind == ExitKind.TOKEN_BUDGET,
    5: lambda e: e.signals.exit_kind == ExitKind.STALLED,
    6: lambda e: e.signals.exit_kind == ExitKind.TIME_LIMIT,
    7: lambda e: e.signals.exit_kind == ExitKind.CRASHED or (e.signals.exit_kind == ExitKind.FINISHED
                                                             and e.signals.exit_code is not None
                                                             and e.signals.exit_code != 0),
    8: lambda e: not _green(e),
    9: lambda e: bool(_genuine(e)),
    10: lambda e: bool(_work(e.carried_commits) + _work(e.commits)),
    11: lambda e: True,
}

_states = st.sampled_from([TODO, DONE, BLOCKED, None])
_commit = st.sampled_from([work_commit("w1"), work_commit("w2", "Fix login"), tracker_commit(), wip_commit(),
                           CommitInfo(sha="e1", summary="empty", files=(), counts_as_work=False)])
_gate = st.builds(gate, name=st.sampled_from(["tests", "types", "lint"]), passed=st.booleans(), required=st.booleans(),
                  fingerprint=st.sampled_from(["", "x", "y"]), reran=st.booleans(), timed_out=st.booleans(),
                  http_status=st.sampled_from([None, 500]), error=st.sampled_from([None, "connection refused"]),
                  red_on_base=st.sampled_from([None, None, "it was red on the base commit too (exit 1)"]))
_hints = st.builds(Hints, claimed_done=st.sampled_from([None, True, False]),
                   result_subtype=st.sampled_from([None, "success", "error_during_execution"]))
_signals = st.builds(
    lambda kind, code, out, h, calls, fails, err, reset, sid: signals(
        kind, exit_code=code, output_bytes=out, hints=h, tool_calls=calls, tool_failures=fails, error=err,
        reset_at=reset, agent_session_id=sid),
    kind=st.sampled_from(list(ExitKind)), code=st.sampled_from([None, 0, 1, 2, 137]), out=st.sampled_from([0, 1, 500]),
    h=_hints, calls=st.integers(0, 3), fails=st.integers(0, 3), err=st.sampled_from([None, "boom", "429"]),
    reset=st.sampled_from([None, T0 + timedelta(hours=1), T0 - timedelta(hours=1)]),
    sid=st.sampled_from([None, "sess-1"]))
_handoffs = st.sampled_from([None, "", "notes only", "- HUMAN: decide", "  > human: look", "All done. HUMAN: nothing",
                             "* HUMAN:x", "HUMANS: no"])
EVIDENCE = st.builds(
    lambda commits, carried, flips, gates, sig, handoff, tamper, secrets, deleted: evidence(
        commits=tuple(commits), carried_commits=tuple(carried), flips=tuple(flips), gates=tuple(gates), signals=sig,
        handoff=handoff, tampering=tamper, leaked_secrets=secrets, deleted_tests=deleted),
    commits=st.lists(_commit, max_size=3), carried=st.lists(_commit, max_size=2),
    flips=st.lists(st.builds(flip, cid=st.sampled_from(["1.1", "1.2", "2.1"]), before=_states, after=_states,
                             in_session_commits=st.booleans(), verify_passed=st.sampled_from([None, True, False])),
                   max_size=3, unique_by=lambda f: f.checkpoint_id),
    gates=st.lists(_gate, max_size=3), sig=_signals, handoff=_handoffs,
    tamper=st.sampled_from([(), ("gates changed",)]), secrets=st.sampled_from([(), ("config.py",)]),
    deleted=st.sampled_from([(), ("tests/test_a.py",), tuple(f"tests/t{i}.py" for i in range(12))]),
)


@settings(max_examples=examples(ci=100, thorough=1000))
@given(EVIDENCE)
def test_row_k_matches_iff_its_predicate_holds_and_no_earlier_row_does(e):
    """The verdict's row is the first row whose SPEC predicate holds, with that row's outcome and blame."""
    expected = next(k for k in range(1, 12) if PREDICATES[k](e))
    v = classify(e)
    assert v.rule == expected, (v.rule, expected)
    outcome, blame = _ROW_OUTCOME[expected]
    red = [g for g in e.gates if g.required and not g.passed]
    if expected == 8 and all(g.red_on_base for g in red):  # row 8, blamed on nobody: red as on the base, before work
        blame = Blame.NONE
    assert (v.outcome, v.blame) == (outcome, blame)
    # the table's rows in order, each once; row 8 has two blames (nobody's first, then the agent's)
    assert [r.row for r in RULES] == [1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 10, 11]


@settings(max_examples=examples(ci=100, thorough=1000))
@given(EVIDENCE)
def test_verdict_fields_follow_from_the_row_and_the_evidence(e):
    """transient, reset_at, zero_output, advanced, rejected flips and all_failed each follow the SPEC's definition."""
    v = classify(e)
    s = e.signals
    assert v.transient == (v.rule == 3)
    assert v.reset_at == (s.reset_at if v.rule == 2 else None)
    assert v.zero_output == (v.rule in (5, 6) and s.output_bytes == 0 and not e.commits)
    assert list(v.advanced) == (_genuine(e) if v.outcome is Outcome.ADVANCED else [])
    assert v.agent_session_id == s.agent_session_id and v.observed_at == e.observed_at
    done_flips = [f for f in e.flips if f.after == DONE and f.before != DONE]
    credited = _work(e.carried_commits) + _work(e.commits)
    assert list(v.rejected_flips) == [
        f"{f.checkpoint_id}: " + (f"the session ended {v.outcome.value}, and only an Advanced session credits a checkpoint"
                                  if f.checkpoint_id in _genuine(e)
                                  else "the flip is not in this session's commits" if not f.in_session_commits
                                  else "no work commits back it" if not credited
                                  else "required gates are red" if not _green(e)
                                  else "its own verify: command failed")
        for f in done_flips if f.checkpoint_id not in v.advanced]
    failed_kinds = {ExitKind.CRASHED, ExitKind.AUTH, ExitKind.RATE_LIMIT, ExitKind.TRANSIENT, ExitKind.STALLED,
                    ExitKind.TIME_LIMIT}
    assert v.all_failed == (not _work(e.commits) and ((s.tool_calls > 0 and s.tool_failures >= s.tool_calls)
                                                      or s.exit_kind in failed_kinds))
    assert (v.fingerprint is not None) == (v.outcome in (Outcome.GATES_RED, Outcome.AGENT_ERROR, Outcome.NO_PROGRESS))


@settings(max_examples=examples(ci=100, thorough=1000))
@given(EVIDENCE)
def test_hint_notes_appear_exactly_when_the_claim_contradicts_the_evidence(e):
    """A claimed 'done' is noted unless Advanced; a `success` subtype is noted on limits, errors and parks."""
    v = classify(e)
    h = e.signals.hints
    claimed = any("claimed it was done" in r for r in v.reasons)
    assert claimed == (bool(h.claimed_done) and v.outcome is not Outcome.ADVANCED)
    overruled = any("overruled by the evidence" in r for r in v.reasons)
    assert overruled == (h.result_subtype == "success"
                         and v.outcome in (Outcome.LIMIT_BACKOFF, Outcome.AGENT_ERROR, Outcome.NEEDS_HUMAN))
    deleted = [r for r in v.reasons if "test file(s)" in r]
    assert bool(deleted) == bool(e.deleted_tests)
    if deleted:
        assert f"deleted {len(e.deleted_tests)} test file(s)" in deleted[0]
        assert deleted[0].count("tests/") == min(10, len(e.deleted_tests))
        assert ("..." in deleted[0]) == (len(e.deleted_tests) > 10)


# --- the outcome table: orders and boundaries the README promises ---------------------------------


def test_a_rate_limited_session_with_red_gates_burns_no_attempt():
    """Rows 2-4 outrank row 8: a limit, 5xx or spent token budget mid-work with red gates is the environment's."""
    red = (gate("tests", passed=False),)
    for kind, row in ((ExitKind.RATE_LIMIT, 2), (ExitKind.TRANSIENT, 3), (ExitKind.TOKEN_BUDGET, 4)):
        v = classify(evidence(gates=red, signals=signals(kind)))
        assert (v.rule, v.blame) == (row, Blame.ENVIRONMENT)


def test_a_crashed_agent_with_red_gates_is_an_agent_error_not_gates_red():
    """Row 7 outranks row 8: the failure that ended the session is the one reported and fingerprinted."""
    v = classify(evidence(gates=(gate("tests", passed=False),), signals=signals(ExitKind.CRASHED, exit_code=1, error="x")))
    assert (v.rule, v.outcome) == (7, Outcome.AGENT_ERROR)
    assert v.fingerprint == classify(evidence(signals=signals(ExitKind.CRASHED, exit_code=1, error="x"))).fingerprint


def test_fingerprints_name_what_failed():
    """Red gates hash their names and fingerprints (order-free, green gates ignored); errors their code and text;
    no progress its checkpoint."""
    a = classify(evidence(gates=(gate("a", passed=False, fingerprint="1"), gate("b", passed=False, fingerprint="2"))))
    b = classify(evidence(gates=(gate("b", passed=False, fingerprint="2"), gate("c"),
                                 gate("a", passed=False, fingerprint="1"))))
    c = classify(evidence(gates=(gate("a", passed=False, fingerprint="1"),)))
    assert a.fingerprint == b.fingerprint != c.fingerprint and len(a.fingerprint) == 16
    e1 = classify(evidence(signals=signals(ExitKind.CRASHED, exit_code=1, error="x")))
    e2 = classify(evidence(signals=signals(ExitKind.CRASHED, exit_code=2, error="x")))
    e3 = classify(evidence(signals=signals(ExitKind.CRASHED, exit_code=1, error="y")))
    assert len({e1.fingerprint, e2.fingerprint, e3.fingerprint, a.fingerprint}) == 4
    n1 = classify(evidence(commits=(), next_checkpoint="1.1"))
    n2 = classify(evidence(commits=(), next_checkpoint="1.2"))
    assert n1.fingerprint != n2.fingerprint and n1.fingerprint == classify(evidence(commits=(), session_number=5)).fingerprint
    assert classify(evidence(commits=(), next_checkpoint=None)).fingerprint not in (None, n1.fingerprint)


def test_reasons_say_what_decided():
    """Each row's reasons name the evidence that matched it (the report shows them to a human)."""
    assert classify(evidence(signals=signals(ExitKind.AUTH))).reasons[0] == (
        "authentication or billing failure: the backend refused the credentials")
    assert classify(evidence(signals=signals(ExitKind.RATE_LIMIT, error="429 slow down"))).reasons[0] == (
        "the backend hit a rate or usage limit: 429 slow down")
    assert classify(evidence(signals=signals(ExitKind.RATE_LIMIT))).reasons[0] == "the backend hit a rate or usage limit"
    assert classify(evidence(signals=signals(ExitKind.CRASHED, exit_code=9))).reasons[0] == (
        "the agent process failed (exit 9): no error text")
    assert classify(evidence(signals=signals(ExitKind.FINISHED, exit_code=3, error="bad"))).reasons[0] == (
        "the agent process exited with code 3: bad")
    words = [classify(evidence(gates=(g,))).reasons[0] for g in (
        gate("t", passed=False, error="connection refused"), gate("t", passed=False, timed_out=True),
        gate("t", passed=False, http_status=503), gate("t", passed=False, reran=True))]
    assert words == ["required gate `t` is red (connection refused)", "required gate `t` is red (timed out)",
                     "required gate `t` is red (HTTP 503)", "required gate `t` is red (exit 1) twice (re-run once)"]
    two = classify(evidence(commits=(work_commit("a"), work_commit("b")))).reasons
    assert two == ("2 work commit(s), gates green, no checkpoint flipped",)
    carried = classify(evidence(commits=(), carried_commits=(work_commit("c"),))).reasons
    assert carried[1].startswith("counting 1 work commit(s) of the earlier session(s)")
    blocked = classify(evidence(flips=(flip("1.2", DONE, BLOCKED),))).reasons
    assert blocked == ("checkpoint 1.2 was marked BLOCKED",)
    assert classify(evidence(flips=(flip("1.2", BLOCKED, BLOCKED),))).outcome is Outcome.PROGRESS


def test_the_human_line_parser_takes_bullets_quotes_and_case():
    """`HUMAN:` counts after leading spaces, `-`, `*` or `>` in any case; elsewhere in a line it does not."""
    from runner.core.outcome import human_lines

    assert human_lines(None) == [] and human_lines("") == []
    assert human_lines("x\n  - human: a\n*> HUMAN:b\nsay HUMAN: c\nHUMANS: d") == ["human: a", "HUMAN:b"]


# --- the fold: every entry kind and every counter -----------------------------------------------

from runner.core.ledger import Advice, Dispatched, Finished, Parked, Reply, SessionStarted  # noqa: E402
from runner.core.plan import AdvisorConfig, BudgetConfig  # noqa: E402
import json  # noqa: E402

from runner.core.policy import (  # noqa: E402
    FOLD_VERSION, LIMIT_BACKOFF_CAP, folded, snapshot_json, TRANSIENT_BACKOFF_CAP, decide_after_advice, decide_after_reply, decide_next, decide_start, fold,
)

GO = RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="go")
STALLED, TIMED_OUT, LIMIT = Outcome.STALLED, Outcome.TIMED_OUT, Outcome.LIMIT_BACKOFF
ENV, AGENT = Blame.ENVIRONMENT, Blame.AGENT


def test_fold_counts_sessions_tokens_and_cost():
    """Sessions, tokens and cost add up over records (a record without cost adds none)."""
    s = fold([record(1, tokens=10, cost_usd=0.25), record(2, tokens=5), record(3, tokens=1, cost_usd=0.5)])
    assert (s.sessions, s.tokens, s.cost_usd) == (3, 16, 0.75)
    assert s.last.n == 3 and fold([]).last is None and fold([]).sessions == 0


def test_fold_stage_attempts_grow_on_agent_blame_and_reset_on_advance():
    """Agent-blamed sessions add an attempt to their stage; Advanced resets it; a record without a stage adds none."""
    s = fold([record(1, Outcome.GATES_RED, AGENT, stage=1, fingerprint="a"),
              record(2, Outcome.NO_PROGRESS, AGENT, stage=1, fingerprint="b"),
              record(3, Outcome.GATES_RED, AGENT, stage=2, fingerprint="c"),
              record(4, Outcome.GATES_RED, AGENT, stage=None, fingerprint="d"),
              record(5, Outcome.PROGRESS, stage=2)])
    assert s.stage_attempts == {1: 2, 2: 1}
    assert fold([record(1, Outcome.GATES_RED, AGENT, stage=1, fingerprint="a"),
                 record(2, Outcome.ADVANCED, stage=1)]).stage_attempts == {1: 0}


def test_fold_streak_counts_the_same_failure_in_a_row_only():
    """The breaker's streak: +1 for the same outcome and fingerprint, 1 for a new failure, 0 without a fingerprint."""
    gr = lambda n, fp: record(n, Outcome.GATES_RED, AGENT, fingerprint=fp)  # noqa: E731
    assert fold([gr(1, "a"), gr(2, "a"), gr(3, "a")]).streak == 3
    assert fold([gr(1, "a"), gr(2, "b")]).streak == 1
    assert fold([gr(1, "a"), record(2, Outcome.NO_PROGRESS, AGENT, fingerprint="a")]).streak == 1
    assert fold([gr(1, "a"), record(2, Outcome.PROGRESS)]).streak == 0
    assert fold([record(1, Outcome.PROGRESS), record(2, Outcome.PROGRESS)]).streak == 0
    assert fold([gr(1, "a")]).streak == 1


def test_fold_backoff_and_stall_counters_reset_when_the_run_of_them_ends():
    """Consecutive backoffs, stalls and zero-output stalls count runs; any other session resets them (one silent stall
    between good sessions never parks)."""
    s = fold([record(1, LIMIT, ENV), record(2, LIMIT, ENV)])
    assert s.consecutive_backoffs == 2
    assert fold([record(1, LIMIT, ENV), record(2), record(3, LIMIT, ENV)]).consecutive_backoffs == 1
    assert fold([record(1, LIMIT, ENV), record(2)]).consecutive_backoffs == 0
    z = fold([record(1, STALLED, zero_output=True), record(2, TIMED_OUT, zero_output=True)])
    assert (z.consecutive_zero_stalls, z.consecutive_stalls) == (2, 2)
    assert fold([record(1, STALLED, zero_output=True), record(2), record(3, STALLED, zero_output=True)]
                ).consecutive_zero_stalls == 1
    assert fold([record(1, STALLED, zero_output=True), record(2, STALLED)]).consecutive_zero_stalls == 0
    assert fold([record(1, STALLED), record(2, STALLED)]).consecutive_zero_stalls == 0
    assert fold([record(1, Outcome.PROGRESS, zero_output=True)]).consecutive_zero_stalls == 0
    assert fold([record(1, STALLED), record(2), record(3, TIMED_OUT)]).consecutive_stalls == 1
    assert fold([record(1, STALLED), record(2)]).consecutive_stalls == 0


def test_fold_keeps_a_humans_instructions_until_a_session_not_blamed_on_the_environment():
    """Instructions from a reply survive rate-limited sessions and end with the first session that used them."""
    reply = Reply(at=T0, command="retry", text="use 24h tokens", next_action=GO)
    h = [record(1, Outcome.NEEDS_HUMAN), reply, record(2, LIMIT, ENV)]
    assert fold(h).instructions == "use 24h tokens"
    assert fold(h + [record(3)]).instructions is None
    assert fold([reply]).instructions == "use 24h tokens"
    assert fold([Reply(at=T0, command="retry", text="", next_action=GO)]).instructions is None


def test_fold_of_each_entry_kind():
    """Started opens a session (its record closes it), Dispatched keeps the highest number, Parked the issue or report,
    Finished the pull request; a reply reopens a finished or parked plan."""
    started = SessionStarted(n=3, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0, base_sha="b")
    assert fold([started]).open_session == started
    assert fold([started, record(3)]).open_session is None
    assert fold([started, record(2)]).open_session == started
    d = fold([Dispatched(at=T0, for_session=4, key="k"), Dispatched(at=T0, for_session=2, key="k")])
    assert d.last_dispatch == 4 and fold([]).last_dispatch == 0
    later = T0 + timedelta(hours=1)
    assert fold([Parked(at=later, reason="x", report_path="r.md")]).park_issue == "r.md"
    p = fold([Parked(at=later, reason="x", issue_url="u", report_path="r.md")])
    assert (p.park_issue, p.parked_at) == ("u", later)
    f = fold([Finished(at=T0, reason="done", pull_request_url="pr")])
    assert (f.finished, f.pull_request) == (True, "pr") and not fold([]).finished
    after = fold([record(1), Parked(at=later, reason="x", issue_url="u"), Finished(at=T0, reason="d"),
                  Reply(at=T0, command="retry", next_action=GO)])
    assert (after.finished, after.park_issue, after.parked_at, after.pending) == (False, None, None, GO)
    assert fold([record(1, next_action=GO)]).pending == GO


def test_fold_of_a_park_keeps_a_decided_park_and_turns_any_other_pending_into_one():
    """A Parked entry leaves a Park decision as it was; a pending finish (its pull request refused) or session
    becomes a Park with the entry's reason: only a human's reply moves the plan on."""
    later = T0 + timedelta(hours=1)
    decided = Park(reason="asked a human")
    assert fold([record(1, next_action=decided), Parked(at=later, reason="x", issue_url="u")]).pending == decided
    refused = fold([record(1, next_action=Finish(reason="all done")), Parked(at=later, reason="PR refused")])
    assert refused.pending == Park(reason="PR refused")
    assert fold([record(1, next_action=GO), Parked(at=later, reason="dispatch refused")]).pending == \
        Park(reason="dispatch refused")


def test_fold_of_a_park_voids_a_dispatch_no_run_answered():
    """A dispatch intent for a session that never ran is void once the plan parks (GitHub refused the dispatch), so
    the tick does not take the missing run for a lost one; a dispatch that was answered stays counted."""
    later = T0 + timedelta(hours=1)
    refused = fold([record(1), record(2), Dispatched(at=T0, for_session=3, key="k"), Parked(at=later, reason="403")])
    assert refused.last_dispatch == 2
    answered = fold([Dispatched(at=T0, for_session=1, key="k"), record(1), record(2),
                     Parked(at=later, reason="red")])
    assert answered.last_dispatch == 1


def test_next_n_is_one_past_every_session_counted_recorded_or_started():
    """The next session's number: one past the count of sessions, the last record's number and an open session's."""
    assert RunState().next_n == 1
    assert fold([record(1), record(2)]).next_n == 3
    assert fold([record(7)]).next_n == 8  # a record numbered past the count (sessions lost to a crash)
    started = SessionStarted(n=5, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0, base_sha="b")
    assert fold([record(1), started]).next_n == 6
    assert fold([record(1), started, record(5)]).next_n == 6


def test_fold_of_an_interrupted_session_counts_what_it_spent_and_moves_no_budget():
    """Interrupted (plan-runner stopped mid-session): the session, its tokens and cost count, it becomes the last,
    closes its own open session (not another), sets what is pending and ends a park; attempts, resumes, backoffs
    and the breaker stay as they were, and its base joins the run of unjudged sessions."""
    red = record(1, Outcome.GATES_RED, AGENT, stage=1, fingerprint="a", tokens=3, cost_usd=0.5)
    before = fold([red, record(2, LIMIT, ENV, tokens=2)])
    started = SessionStarted(n=3, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0, base_sha="b")
    cut = record(3, Outcome.INTERRUPTED, tokens=10, cost_usd=0.25, base_sha="base3", next_action=GO)
    s = fold([red, record(2, LIMIT, ENV, tokens=2), Parked(at=T0, reason="x", issue_url="u"), started, cut])
    assert (s.sessions, s.tokens, s.cost_usd) == (3, 15, 0.75)
    assert s.last == cut and s.open_session is None and s.pending == GO
    assert (s.park_issue, s.parked_at) == (None, None)
    assert (s.stage_attempts, s.streak, s.consecutive_backoffs) == \
        (before.stage_attempts, before.streak, before.consecutive_backoffs) == ({1: 1}, 0, 1)
    assert s.uncredited_base == "base3"
    no_cost = fold([record(1, Outcome.INTERRUPTED, tokens=1)])
    assert (no_cost.cost_usd, no_cost.uncredited_base) == (0.0, None)
    other = SessionStarted(n=4, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0, base_sha="b")
    assert fold([other, record(3, Outcome.INTERRUPTED)]).open_session == other
    earlier = fold([record(1, Outcome.INTERRUPTED, base_sha="first"), record(2, Outcome.INTERRUPTED, base_sha="x")])
    assert earlier.uncredited_base == "first"


class _StoredLedger(list):
    """A ledger as the store hands it over: entries plus the snapshot the store vouched for."""

    def __init__(self, entries, snapshot=None):
        super().__init__(entries)
        self.snapshot = snapshot
        self.parsed = False

    def parse_all(self):
        self.parsed = True


def test_folded_trusts_only_a_snapshot_of_this_fold_version_and_otherwise_folds_every_entry():
    """A stored snapshot of the current fold version is the state as it was saved (round trip, no entry parsed);
    none, a snapshot of another version, one that does not parse or is not an object: the entries are parsed and
    folded."""
    entries = [record(1, tokens=4), record(2, Outcome.GATES_RED, AGENT, fingerprint="f")]
    state = fold(entries)
    trusted = _StoredLedger([], snapshot_json(state))  # no entries: only the snapshot can give this state
    assert folded(trusted) == state and not trusted.parsed
    assert json.loads(snapshot_json(state)) == {"fold": FOLD_VERSION, "state": json.loads(state.model_dump_json())}
    for bad in (None, "", json.dumps({"fold": FOLD_VERSION + 1, "state": {}}), "not json", "[1, 2]",
                json.dumps({"state": json.loads(state.model_dump_json())}), json.dumps({"fold": FOLD_VERSION})):
        ledger = _StoredLedger(entries, bad)
        assert folded(ledger) == state and ledger.parsed, bad
    assert folded(entries) == state  # a plain list (no store): folded


def test_fold_of_skips_by_reply_and_by_advice():
    """A reply `skip` skips the last session's checkpoint; an advised skip names its checkpoint; others skip nothing."""
    assert fold([record(1, checkpoint="1.2"), Reply(at=T0, command="skip", next_action=GO)]).skipped == {"1.2"}
    assert fold([Reply(at=T0, command="skip", next_action=GO)]).skipped == frozenset()
    assert fold([record(1, checkpoint="1.2"), Reply(at=T0, command="retry", next_action=GO)]).skipped == frozenset()
    assert fold([record(1, checkpoint=None), Reply(at=T0, command="skip", next_action=GO)]).skipped == frozenset()
    advice = Advice(at=T0, answer="skip", reason="r", checkpoint="2.1", next_action=GO)
    assert fold([advice]).skipped == {"2.1"} and fold([advice]).pending == GO
    assert fold([advice.evolve(checkpoint=None)]).skipped == frozenset()
    assert fold([advice.evolve(answer="retry")]).skipped == frozenset()
    base = [record(1, STALLED, base_sha="b1")]
    assert fold(base + [advice]).uncredited_base is None
    assert fold(base + [advice.evolve(answer="retry")]).uncredited_base == "b1"


def test_fresh_budgets_reset_only_the_current_stage_and_every_counter():
    """A human's or the advisor's go-ahead zeroes the last session's stage attempts (not other stages'), the streak,
    and the backoff and stall counters."""
    h = [record(1, Outcome.GATES_RED, AGENT, stage=1, fingerprint="a"),
         record(2, Outcome.GATES_RED, AGENT, stage=2, fingerprint="a"),
         record(3, LIMIT, ENV, stage=2), record(4, STALLED, stage=2, zero_output=True)]
    for entry in (Reply(at=T0, command="retry", next_action=GO),
                  Advice(at=T0, answer="retry", reason="r", next_action=GO)):
        s = fold(h + [entry])
        assert s.stage_attempts == {1: 1, 2: 0}
        assert (s.streak, s.consecutive_backoffs, s.consecutive_zero_stalls, s.consecutive_stalls) == (0, 0, 0, 0)
    assert fold([Reply(at=T0, command="retry", next_action=GO)]).stage_attempts == {}
    assert fold([record(1, stage=None), Reply(at=T0, command="retry", next_action=GO)]).stage_attempts == {}


# --- decide_next: each bound at its edge ---------------------------------------------------------


def _v(outcome, blame=Blame.NONE, **kw) -> Verdict:
    kw.setdefault("observed_at", T0)
    return Verdict(outcome=outcome, blame=blame, rule=0, reasons=("why",), **kw)


def test_the_last_checkpoint_finishes_even_at_max_sessions_and_max_cost():
    """Done is done: the session that ticks the last checkpoint finishes the plan although the budgets are spent."""
    p = plan({"1.1": DONE, "1.2": DONE, "2.1": DONE}, budget=BudgetConfig(max_sessions=1, max_cost_usd=0.1))
    state = fold([record(1, Outcome.ADVANCED, cost_usd=5.0)])
    assert decide_next(_v(Outcome.ADVANCED), state, p) == Finish(reason="every checkpoint is done (3 done)")
    for o in (Outcome.PROGRESS, Outcome.NO_PROGRESS):
        assert isinstance(decide_next(_v(o), state, p), Finish)
    skipped = fold([record(1, checkpoint="2.1"), Reply(at=T0, command="skip", next_action=GO)])
    assert decide_next(_v(Outcome.PROGRESS), skipped, plan({"1.1": DONE, "1.2": DONE})) == Finish(
        reason="every checkpoint is done (2 done, 1 skipped)")
    assert isinstance(decide_next(_v(Outcome.GATES_RED, AGENT), state, p), Park)


def test_max_sessions_and_max_cost_park_at_equality_not_before():
    """`sessions == max_sessions` and `cost == max_cost_usd` park; one session or one cent less goes on."""
    p = plan(budget=BudgetConfig(max_sessions=2, max_cost_usd=1.0))
    assert decide_next(_v(Outcome.PROGRESS), fold([record(1), record(2)]), p) == Park(
        reason="max_sessions reached (2 of 2)")
    assert isinstance(decide_next(_v(Outcome.PROGRESS), fold([record(1)]), p), RunSession)
    assert decide_next(_v(Outcome.PROGRESS), fold([record(1, cost_usd=1.0)]), p) == Park(
        reason="max_cost_usd reached ($1.00 of $1.00)")
    assert isinstance(decide_next(_v(Outcome.PROGRESS), fold([record(1, cost_usd=0.99)]), p), RunSession)
    assert isinstance(decide_next(_v(Outcome.PROGRESS), fold([record(1, cost_usd=99.0)]),
                                 plan(budget=BudgetConfig(max_cost_usd=None))), RunSession)


def test_limit_backoff_waits_five_minutes_doubling_up_to_six_hours():
    """No reset time: 5, 10, 20 minutes... (the README's figures, not the constants), capped at 6 hours; a reset time
    at or before the observation is ignored; the wait retries the same session."""
    p = plan(budget=BudgetConfig(max_backoffs=40))
    last = dict(kind=SessionKind.FIX_GATES, checkpoint="1.2", resume_session_id="r1")
    waits = []
    for n in range(1, 4):
        h = [record(i, LIMIT, ENV, **last) for i in range(1, n + 1)]
        waits.append(decide_next(_v(LIMIT, ENV), fold(h), p).until - T0)
    assert waits == [timedelta(minutes=5), timedelta(minutes=10), timedelta(minutes=20)]
    many = fold([record(i, LIMIT, ENV) for i in range(1, 31)])
    assert decide_next(_v(LIMIT, ENV), many, p).until - T0 == timedelta(hours=6) == LIMIT_BACKOFF_CAP
    assert decide_next(_v(LIMIT, ENV, transient=True), many, p).until - T0 == timedelta(minutes=10) == TRANSIENT_BACKOFF_CAP
    one = fold([record(1, LIMIT, ENV, **last)])
    assert decide_next(_v(LIMIT, ENV, reset_at=T0), one, p).until == T0 + timedelta(minutes=5)
    assert decide_next(_v(LIMIT, ENV, reset_at=T0 - timedelta(hours=1)), one, p).until == T0 + timedelta(minutes=5)
    assert decide_next(_v(LIMIT, ENV, reset_at=T0 + timedelta(seconds=1)), one, p).until == T0 + timedelta(seconds=1)
    reply = Reply(at=T0, command="retry", text="careful", next_action=GO)
    w = decide_next(_v(LIMIT, ENV), fold([reply, record(1, LIMIT, ENV, **last)]), p)
    assert w == Wait(until=T0 + timedelta(minutes=5), reason="rate limit; no attempt burned",
                     then=RunSession(kind=SessionKind.FIX_GATES, checkpoint="1.2", reason="retry after the rate limit",
                                     resume_session_id="r1", instructions="careful"))
    t = decide_next(_v(LIMIT, ENV, transient=True), one, p)
    assert t.reason == "transient error; no attempt burned" and t.until - T0 == timedelta(seconds=30)


def test_max_backoffs_parks_at_equality_with_the_reasons():
    """`max_backoffs` backoffs in a row park (with the verdict's reasons); one fewer waits."""
    p = plan(budget=BudgetConfig(max_backoffs=2))
    assert decide_next(_v(LIMIT, ENV), fold([record(1, LIMIT, ENV), record(2, LIMIT, ENV)]), p) == Park(
        reason="2 backoffs in a row (max_backoffs 2)", details=("why",))
    assert isinstance(decide_next(_v(LIMIT, ENV), fold([record(1, LIMIT, ENV)]), p), Wait)


def test_rolled_over_hands_off_to_a_fresh_session_on_the_next_checkpoint():
    """RolledOver: a handoff session on the next open checkpoint, with the human's instructions."""
    h = [Reply(at=T0, command="retry", text="t", next_action=GO), record(1, Outcome.ROLLED_OVER, ENV, checkpoint="1.1")]
    assert decide_next(_v(Outcome.ROLLED_OVER, ENV), fold(h), plan({"1.1": DONE})) == RunSession(
        kind=SessionKind.HANDOFF, checkpoint="1.2", reason="token budget reached: fresh session with the handoff",
        instructions="t")


def test_resumes_at_the_edge_of_max_resumes():
    """`max_resumes: 1` resumes once: the first stall resumes, the second asks the advisor; one zero-output stall
    resumes, the second parks."""
    p = plan(budget=BudgetConfig(max_resumes=1))
    one = fold([record(1, STALLED, checkpoint="1.2", agent_session_id="a1")])
    assert decide_next(_v(STALLED, agent_session_id="a1"), one, p) == RunSession(
        kind=SessionKind.RESUME, checkpoint="1.2", reason="Stalled: resume the same agent session", resume_session_id="a1")
    two = fold([record(1, STALLED, checkpoint="1.2"), record(2, TIMED_OUT, checkpoint="1.2")])
    assert decide_next(_v(TIMED_OUT, agent_session_id="a1"), two, p) == ConsultAdvisor(
        reason="resume budget spent (1 resumes)", checkpoint="1.2")
    zero = fold([record(1, STALLED, zero_output=True)])
    assert isinstance(decide_next(_v(STALLED, zero_output=True), zero, plan()), RunSession)
    zeros = fold([record(1, STALLED, zero_output=True), record(2, STALLED, zero_output=True)])
    assert decide_next(_v(STALLED), zeros, plan()) == Park(reason="two consecutive sessions produced no output at all")


def test_a_stall_before_the_agent_had_a_session_id_starts_the_same_session_again():
    """Without an agent session id there is nothing to resume: the same kind of session runs again."""
    one = fold([record(1, TIMED_OUT, kind=SessionKind.FIX_ERROR, checkpoint="1.2", resume_session_id="old")])
    assert decide_next(_v(TIMED_OUT), one, plan()) == RunSession(
        kind=SessionKind.FIX_ERROR, checkpoint="1.2", reason="TimedOut before the agent had a session id: start it again",
        resume_session_id="old")


def test_agent_blamed_outcomes_at_the_edges_of_breaker_and_stage_budget():
    """The breaker trips at a streak of 2, not 1; the stage budget at attempts == expected x slack, not one below."""
    p = plan(sessions=(2, 1), budget=BudgetConfig(slack=1.0))  # stage 1: 2 attempts
    one = fold([record(1, Outcome.GATES_RED, AGENT, checkpoint="1.2", fingerprint="a")])
    assert decide_next(_v(Outcome.GATES_RED, AGENT), one, p) == RunSession(
        kind=SessionKind.FIX_GATES, checkpoint="1.1", reason="GatesRed: fix session")
    two = fold([record(1, Outcome.GATES_RED, AGENT, checkpoint="1.2", fingerprint="a"),
                record(2, Outcome.GATES_RED, AGENT, checkpoint="1.2", fingerprint="a")])
    assert decide_next(_v(Outcome.GATES_RED, AGENT), two, p) == ConsultAdvisor(
        reason="circuit breaker: GatesRed twice in a row with the same failure", checkpoint="1.2")
    spent = fold([record(1, Outcome.GATES_RED, AGENT, checkpoint="1.2", fingerprint="a"),
                  record(2, Outcome.AGENT_ERROR, AGENT, checkpoint="1.2", fingerprint="b")])
    assert decide_next(_v(Outcome.AGENT_ERROR, AGENT), spent, p) == ConsultAdvisor(
        reason="stage 1 attempt budget spent (2 attempts)", checkpoint="1.2")
    nowhere = fold([record(1, Outcome.NO_PROGRESS, AGENT, checkpoint=None, stage=None, fingerprint="a")])
    assert decide_next(_v(Outcome.NO_PROGRESS, AGENT), nowhere, p).kind is SessionKind.FIX_NO_PROGRESS


def test_advanced_and_progress_say_why_they_go_on():
    """Advanced moves to the next checkpoint, Progress keeps delivering; NeedsHuman parks with the reasons."""
    h = [Reply(at=T0, command="retry", text="t", next_action=GO), record(1, Outcome.ADVANCED)]
    assert decide_next(_v(Outcome.ADVANCED), fold(h), plan({"1.1": DONE})) == RunSession(
        kind=SessionKind.DELIVERY, checkpoint="1.2", reason="advanced: next checkpoint")  # the instructions were used
    assert decide_next(_v(Outcome.PROGRESS), fold(h), plan()).reason == "progress: keep delivering"
    assert decide_next(_v(Outcome.NEEDS_HUMAN), fold(h), plan()) == Park(reason="the session needs a human",
                                                                          details=("why",))


# --- the advisor's answers and a human's replies ---------------------------------------------------


def test_advisor_answers_turn_into_actions():
    """retry repeats the failed kind, resume resumes the agent session (or retries without one), skip moves on."""
    gr = fold([record(1, Outcome.GATES_RED, AGENT, checkpoint="1.1", fingerprint="a", agent_session_id="s")])
    assert decide_after_advice("retry", "flaky", gr, plan()) == RunSession(
        kind=SessionKind.FIX_GATES, checkpoint="1.1", reason="advisor: retry (flaky)")
    assert decide_after_advice("resume", "r", gr, plan()) == RunSession(
        kind=SessionKind.RESUME, checkpoint="1.1", reason="advisor: resume (r)", resume_session_id="s")
    no_id = fold([record(1, Outcome.NO_PROGRESS, AGENT, fingerprint="a")])
    assert decide_after_advice("resume", "r", no_id, plan()) == RunSession(
        kind=SessionKind.FIX_NO_PROGRESS, checkpoint="1.1", reason="advisor: resume, no agent session to resume (r)")
    assert decide_after_advice("retry", "r", fold([]), plan()).kind is SessionKind.DELIVERY
    assert decide_after_advice("retry", "r", fold([record(1, STALLED)]), plan()).kind is SessionKind.DELIVERY
    assert decide_after_advice("resume", "r", fold([]), plan()).kind is SessionKind.DELIVERY
    trusting = plan().model_copy(update={"config": plan().config.model_copy(
        update={"advisor": AdvisorConfig(may_skip=True)})})  # the advisor's skip needs the plan's opt-in
    assert decide_after_advice("skip", "r", gr, trusting) == RunSession(
        kind=SessionKind.DELIVERY, checkpoint="1.2", reason="advisor: skip (r)")
    assert decide_after_advice("skip", "r", fold([]), trusting).checkpoint == "1.1"
    assert isinstance(decide_after_advice("skip", "r", gr, plan()), Park)
    assert decide_after_advice("human", "unclear", gr, plan()) == Park(reason="the advisor asks for a human: unclear")
    # no advisor configured: nobody was asked, and the park says what happened in the policy's own words
    breaker = "circuit breaker: GatesRed twice in a row with the same failure"
    assert decide_after_advice("human", breaker, gr, plan(), asked=False) == Park(reason=breaker)


def test_replies_turn_into_actions_with_fresh_budgets():
    """stop parks naming the user, skip moves on, resume resumes a stalled agent session with the text, anything
    else retries the failed kind; the stage budget is fresh again."""
    p = plan(sessions=(1, 1), budget=BudgetConfig(slack=1.0))
    spent = fold([record(1, Outcome.GATES_RED, AGENT, checkpoint="1.1", fingerprint="a", agent_session_id="s")])
    assert decide_after_reply("stop", "", "octocat", spent, p) == Park(reason="stopped by @octocat")
    assert decide_after_reply("stop", "", "", spent, p) == Park(reason="stopped by a human")
    assert decide_after_reply("skip", "", "", spent, p) == RunSession(
        kind=SessionKind.DELIVERY, checkpoint="1.2", reason="a human: skip the checkpoint")
    assert decide_after_reply("skip", "", "", fold([]), p).checkpoint == "1.1"
    assert decide_after_reply("retry", "try X", "octocat", spent, p) == RunSession(
        kind=SessionKind.FIX_GATES, checkpoint="1.1", reason="@octocat: retry", instructions="try X")
    assert decide_after_reply("resume", "", "u", spent, p) == RunSession(
        kind=SessionKind.FIX_GATES, checkpoint="1.1", reason="@u: resume")
    stalled = fold([record(1, STALLED, checkpoint="1.2", agent_session_id="a9")])
    assert decide_after_reply("resume", "go on", "u", stalled, p) == RunSession(
        kind=SessionKind.RESUME, checkpoint="1.2", reason="@u: resume", resume_session_id="a9", instructions="go on")
    assert decide_after_reply("resume", "", "u", fold([record(1, STALLED)]), p).kind is SessionKind.DELIVERY
    assert decide_after_reply("resume", "", "u", fold([]), p).kind is SessionKind.DELIVERY


def test_start_takes_the_pending_decision_or_the_first_checkpoint():
    """A job starts with the decision already recorded, else a delivery on the first open checkpoint."""
    assert decide_start(fold([record(1, next_action=GO.evolve(checkpoint="2.1"))]), plan()).checkpoint == "2.1"
    assert decide_start(fold([]), plan({"1.1": DONE})) == RunSession(
        kind=SessionKind.DELIVERY, checkpoint="1.2", reason="first session of the plan")
    assert decide_start(fold([]), plan({"1.1": DONE, "1.2": BLOCKED})) == Park(
        reason="checkpoint 1.2 is BLOCKED: Checkpoint 1.2")


def test_an_empty_ledger_folds_to_zero_everything():
    """No entries: no sessions, tokens, cost, attempts, streak, counters, dispatches; not finished, not parked."""
    s = fold([])
    assert (s.sessions, s.tokens, s.cost_usd, s.streak, s.consecutive_backoffs, s.consecutive_zero_stalls,
            s.consecutive_stalls, s.last_dispatch) == (0, 0, 0.0, 0, 0, 0, 0, 0)
    assert (s.finished, s.parked, s.stage_attempts, s.skipped, s.pending) == (False, False, {}, frozenset(), None)


def test_a_stage_without_recorded_attempts_has_its_whole_budget():
    """A failure recorded without a stage burns nothing: the checkpoint's stage still has all its attempts."""
    p = plan(sessions=(1, 1), budget=BudgetConfig(slack=1.0))
    state = fold([record(1, Outcome.GATES_RED, AGENT, checkpoint="1.1", stage=None, fingerprint="a")])
    assert decide_next(_v(Outcome.GATES_RED, AGENT), state, p).kind is SessionKind.FIX_GATES


def test_the_deleted_tests_note_lists_ten_and_marks_more():
    """Up to ten deleted test files are named; an eleventh adds `...`."""
    ten = tuple(f"tests/t{i}.py" for i in range(10))
    note = [r for r in classify(evidence(deleted_tests=ten)).reasons if "test file(s)" in r][0]
    assert note.count("tests/") == 10 and "..." not in note
    note = [r for r in classify(evidence(deleted_tests=ten + ("tests/u.py",))).reasons if "test file(s)" in r][0]
    assert note.count("tests/") == 10 and "..." in note and "tests/u.py" not in note


def test_a_session_after_a_park_clears_the_park_and_its_time():
    """The park is over once a session ran: both its issue and its time are cleared from the folded state."""
    h = [record(1, Outcome.NEEDS_HUMAN), Parked(at=T0, reason="x", issue_url="u"), record(2)]
    assert (fold(h).park_issue, fold(h).parked_at) == (None, None)


def test_a_reply_after_a_run_of_backoffs_starts_counting_them_again():
    """`max_backoffs` counts backoffs since the last go-ahead: a reply or advice after limits resets the count."""
    h = [record(1, LIMIT, ENV), record(2, LIMIT, ENV)]
    assert fold(h + [Reply(at=T0, command="retry", next_action=GO)]).consecutive_backoffs == 0
    assert fold(h + [Advice(at=T0, answer="retry", reason="r", next_action=GO)]).consecutive_backoffs == 0
    z = [record(1, STALLED, zero_output=True)]
    assert fold(z + [Reply(at=T0, command="retry", next_action=GO)]).consecutive_zero_stalls == 0
    assert fold(z + [Reply(at=T0, command="retry", next_action=GO)]).consecutive_stalls == 0
