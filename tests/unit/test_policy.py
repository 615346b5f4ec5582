"""The next-action policy, one test per rule, each asserting the decision object."""

from __future__ import annotations

from datetime import timedelta

from core_builders import DONE, T0, BLOCKED, plan, record
from runner.core.actions import (
    Blame, ConsultAdvisor, Finish, Outcome, Park, RunSession, SessionKind, Verdict, Wait,
)
from runner.core.ledger import Advice, Note, Parked, Place, Reply, SessionStarted, Summary
import pytest

from runner.core.ledger import SessionRecord, dump_entry, parse_entry
from runner.core.plan import AdvisorConfig, BudgetConfig, PlanConfig
from runner.core.policy import (
    FOLD_VERSION, LIMIT_BACKOFF_BASE, MAX_NOTES, NEXT_RULES, RunState, advice_entry, advisor_may_skip, decide,
    decide_after_advice, decide_after_reply, decide_next, decide_start, fold, with_notes,
)


def verdict(outcome, blame=Blame.NONE, **kw) -> Verdict:
    kw.setdefault("observed_at", T0)
    return Verdict(outcome=outcome, blame=blame, rule=0, reasons=("r",), **kw)


def run(history, plan_=None, **last_verdict):
    """Fold records (the last one is this session) and decide on the last one's outcome."""
    state = fold(history)
    last = history[-1]
    v = verdict(last.outcome, last.blame, fingerprint=last.fingerprint,
                zero_output=last.zero_output, agent_session_id=last.agent_session_id, **last_verdict)
    return decide_next(v, state, plan_ or plan())


def test_advanced_runs_delivery_on_next_checkpoint_and_resets_stage_attempts():
    """Advanced: next checkpoint, attempts of the stage reset."""
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="a"),
         record(2, Outcome.ADVANCED, advanced=("1.1",))]
    action = run(h, plan({"1.1": DONE}))
    assert action == RunSession(kind=SessionKind.DELIVERY, checkpoint="1.2", reason="advanced: next checkpoint")
    assert fold(h).stage_attempts == {1: 0}


def test_progress_runs_another_delivery_session():
    """Progress: another delivery session on the same checkpoint."""
    action = run([record(1, Outcome.PROGRESS)])
    assert isinstance(action, RunSession) and action.kind is SessionKind.DELIVERY and action.checkpoint == "1.1"


def test_last_checkpoint_done_finishes():
    """When every checkpoint is DONE the plan finishes."""
    action = run([record(1, Outcome.ADVANCED, checkpoint="2.1", stage=2)], plan({"1.1": DONE, "1.2": DONE, "2.1": DONE}))
    assert isinstance(action, Finish)


def test_next_checkpoint_blocked_parks():
    """A BLOCKED checkpoint ahead parks the plan rather than running into it."""
    action = run([record(1, Outcome.ADVANCED)], plan({"1.1": DONE, "1.2": BLOCKED}))
    assert isinstance(action, Park) and "1.2" in action.reason


def test_needs_human_parks():
    """NeedsHuman parks with the verdict's reasons."""
    action = run([record(1, Outcome.NEEDS_HUMAN)])
    assert isinstance(action, Park) and action.details == ("r",)


def test_gates_red_runs_fix_session_and_burns_an_attempt():
    """GatesRed: a fix-gates session; the stage's attempt is burned."""
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="a")]
    assert run(h).kind is SessionKind.FIX_GATES
    assert fold(h).stage_attempts == {1: 1}


def test_no_progress_and_agent_error_run_their_fix_sessions():
    """NoProgress and AgentError each get their own fix session kind."""
    assert run([record(1, Outcome.NO_PROGRESS, Blame.AGENT, fingerprint="n")]).kind is SessionKind.FIX_NO_PROGRESS
    assert run([record(1, Outcome.AGENT_ERROR, Blame.AGENT, fingerprint="e")]).kind is SessionKind.FIX_ERROR


def test_stage_attempt_budget_spent_consults_advisor():
    """Expected sessions x slack attempts, then the advisor is consulted."""
    p = plan(sessions=(1, 1), budget=BudgetConfig(slack=2.0))
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="a"),
         record(2, Outcome.NO_PROGRESS, Blame.AGENT, fingerprint="b")]
    action = run(h, p)
    assert isinstance(action, ConsultAdvisor) and "attempt budget" in action.reason


def test_circuit_breaker_same_failure_twice_consults_advisor():
    """Same outcome with the same fingerprint twice in a row stops the retrying."""
    p = plan(sessions=(10, 1))
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="same"),
         record(2, Outcome.GATES_RED, Blame.AGENT, fingerprint="same")]
    action = run(h, p)
    assert isinstance(action, ConsultAdvisor) and "circuit breaker" in action.reason


def test_different_failures_do_not_trip_the_breaker():
    """Two different failures in a row are not spinning."""
    p = plan(sessions=(10, 1))
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="a"),
         record(2, Outcome.GATES_RED, Blame.AGENT, fingerprint="b")]
    assert isinstance(run(h, p), RunSession)


def test_rate_limit_waits_until_reset_time_and_burns_nothing():
    """LimitBackoff waits until the backend's reset time, then runs the same session kind."""
    reset = T0 + timedelta(minutes=47)
    h = [record(1, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT, kind=SessionKind.FIX_GATES)]
    action = run(h, reset_at=reset)
    assert isinstance(action, Wait) and action.until == reset
    assert action.then.kind is SessionKind.FIX_GATES
    assert fold(h).stage_attempts == {}


def test_rate_limit_without_reset_time_backs_off_exponentially():
    """No reset time: 5 minutes, doubling with each consecutive backoff."""
    h = [record(1, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT), record(2, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT)]
    assert run(h[:1]).until == T0 + LIMIT_BACKOFF_BASE
    assert run(h).until == T0 + 2 * LIMIT_BACKOFF_BASE


def test_transient_error_backs_off_briefly():
    """Transient errors get a short backoff (seconds, not minutes)."""
    action = run([record(1, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT)], transient=True)
    assert action.until - T0 == timedelta(seconds=30)


def test_max_backoffs_in_a_row_parks():
    """`max_backoffs` consecutive backoffs park the plan."""
    p = plan(budget=BudgetConfig(max_backoffs=3))
    h = [record(i, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT) for i in (1, 2, 3)]
    assert isinstance(run(h, p), Park)
    assert isinstance(run(h[:2], p), Wait)


def test_rolled_over_starts_fresh_session_with_handoff():
    """RolledOver: a fresh session with the handoff; no attempt burned."""
    h = [record(1, Outcome.ROLLED_OVER, Blame.ENVIRONMENT)]
    assert run(h).kind is SessionKind.HANDOFF
    assert fold(h).stage_attempts == {}


def test_stalled_resumes_the_same_agent_session():
    """Stalled: resume the same agent session by its id."""
    action = run([record(1, Outcome.STALLED, agent_session_id="abc")])
    assert action.kind is SessionKind.RESUME and action.resume_session_id == "abc"


def test_timed_out_resumes_like_stalled():
    """TimedOut is handled as Stalled."""
    assert run([record(1, Outcome.TIMED_OUT, agent_session_id="abc")]).kind is SessionKind.RESUME


def test_resume_budget_spent_consults_advisor():
    """More stalls in a row than max_resumes: the advisor decides."""
    p = plan(budget=BudgetConfig(max_resumes=1))
    h = [record(1, Outcome.STALLED, agent_session_id="a"), record(2, Outcome.STALLED, agent_session_id="a")]
    assert isinstance(run(h, p), ConsultAdvisor)


def test_two_zero_output_stalls_park():
    """Two consecutive zero-output stalls park the plan."""
    h = [record(1, Outcome.STALLED, zero_output=True), record(2, Outcome.STALLED, zero_output=True)]
    assert isinstance(run(h), Park)


def test_max_sessions_parks():
    """The whole plan is bounded by max_sessions."""
    p = plan(budget=BudgetConfig(max_sessions=2))
    h = [record(1, Outcome.PROGRESS), record(2, Outcome.PROGRESS)]
    action = run(h, p)
    assert isinstance(action, Park) and "max_sessions" in action.reason


def test_max_cost_parks():
    """The whole plan is bounded by max_cost_usd where the backend reports cost."""
    p = plan(budget=BudgetConfig(max_cost_usd=1.0))
    action = run([record(1, Outcome.PROGRESS, cost_usd=0.6), record(2, Outcome.PROGRESS, cost_usd=0.5)], p)
    assert isinstance(action, Park) and "max_cost_usd" in action.reason


def test_advisor_retry_resume_skip_human():
    """Each advisor answer leads to its action; 'human' parks."""
    state = fold([record(1, Outcome.STALLED, agent_session_id="s1")])
    p = may_skip(plan())
    assert decide_after_advice("retry", "x", state, p).kind is SessionKind.DELIVERY
    assert decide_after_advice("resume", "x", state, p).resume_session_id == "s1"
    assert decide_after_advice("skip", "x", state, p).checkpoint == "1.2"
    assert isinstance(decide_after_advice("human", "x", state, p), Park)


def test_advice_resets_budgets_in_the_folded_state():
    """A recorded retry restarts the stage's attempts and the breaker."""
    park = Park(reason="x")
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="a"),
         Advice(at=T0, answer="retry", reason="try once more", next_action=park)]
    state = fold(h)
    assert state.stage_attempts == {1: 0} and state.streak == 0 and state.pending == park


def test_reply_resume_carries_instructions():
    """A human's reply text reaches the next session as instructions."""
    state = fold([record(1, Outcome.NEEDS_HUMAN, next_action=Park(reason="x"))])
    action = decide_after_reply("resume", "use 24h tokens", "octocat", state, plan())
    assert action.instructions == "use 24h tokens" and action.kind is SessionKind.DELIVERY


def test_reply_stop_parks_and_skip_moves_on():
    """`stop` parks for good; `skip` skips the checkpoint that was being worked on."""
    state = fold([record(1, Outcome.NEEDS_HUMAN)])
    assert isinstance(decide_after_reply("stop", "", "octocat", state, plan()), Park)
    assert decide_after_reply("skip", "", "octocat", state, plan()).checkpoint == "1.2"


def test_fold_keeps_where_the_uncredited_sessions_began():
    """Sessions whose work no verdict credited to a checkpoint (cut short, judged red, NeedsHuman, Progress,
    NoProgress) leave their work to the next verdict (issue 27, item 5): the folded state keeps the base of the
    first of them until an Advanced credits it, or a skip."""
    unjudged = [record(1, Outcome.STALLED, base_sha="b1"), record(2, Outcome.LIMIT_BACKOFF, base_sha="b2"),
                record(3, Outcome.TIMED_OUT, base_sha="b3"), record(4, Outcome.ROLLED_OVER, base_sha="b4"),
                record(5, Outcome.AGENT_ERROR, Blame.AGENT, base_sha="b5")]
    assert fold([]).uncredited_base is None
    assert fold(unjudged[:1]).uncredited_base == "b1" and fold(unjudged).uncredited_base == "b1"
    assert fold(unjudged + [record(6, Outcome.ADVANCED, base_sha="b6")]).uncredited_base is None
    for uncredited in (Outcome.PROGRESS, Outcome.NO_PROGRESS, Outcome.GATES_RED, Outcome.NEEDS_HUMAN):
        assert fold(unjudged + [record(6, uncredited, base_sha="b6")]).uncredited_base == "b1", uncredited
        assert fold([record(6, uncredited, base_sha="b6")]).uncredited_base == "b6", uncredited
    later = fold([record(1, Outcome.ADVANCED, base_sha="b1"), record(2, Outcome.STALLED, base_sha="b2")])
    assert later.uncredited_base == "b2"
    go_on = RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="r")
    assert fold(unjudged + [Reply(at=T0, command="retry", next_action=go_on)]).uncredited_base == "b1"
    assert fold(unjudged + [Reply(at=T0, command="skip", next_action=go_on)]).uncredited_base is None


def test_fold_tracks_open_sessions_parks_and_pending_actions():
    """A started session without a record stays open; a park is pending until a reply."""
    started = SessionStarted(n=2, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0, base_sha="0")
    park = Park(reason="needs a human")
    h = [record(1, Outcome.NEEDS_HUMAN, next_action=park), Parked(at=T0, reason="x", issue_url="u"), started]
    state = fold(h)
    assert state.open_session == started and state.parked and state.park_issue == "u"
    resumed = fold(h[:2] + [Reply(at=T0, command="retry", next_action=RunSession(
        kind=SessionKind.DELIVERY, checkpoint="1.1", reason="r"))])
    assert not resumed.parked and resumed.park_issue is None


def test_decide_start_first_session_and_pending():
    """With no history the first session is a delivery on the first checkpoint."""
    assert decide_start(fold([]), plan()) == RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1",
                                                        reason="first session of the plan")
    park = Park(reason="p")
    assert decide_start(fold([record(1, Outcome.NEEDS_HUMAN, next_action=park)]), plan()) == park


def test_a_new_session_ends_an_earlier_park():
    """After a park was published, a later session clears it, so the next park is published again."""
    park = Park(reason="x")
    h = [record(1, Outcome.NEEDS_HUMAN, next_action=park), Parked(at=T0, reason="x", issue_url="u")]
    assert fold(h).park_issue == "u"
    assert fold(h + [record(2, Outcome.PROGRESS)]).park_issue is None


# --- the rules of decide_next, by name ---------------------------------------------------------------


def may_skip(p, allowed: bool = True):
    """The plan with `advisor.may_skip` set."""
    return p.model_copy(update={"config": p.config.model_copy(
        update={"advisor": AdvisorConfig(may_skip=allowed)})})


STALL = dict(agent_session_id="a")
# rule name -> (history, plan, extra verdict fields, the action expected): each one the smallest case where that
# rule (and no earlier one) decides.
RULE_CASES = {
    "needs-human": ([record(1, Outcome.NEEDS_HUMAN)], plan(), {}, Park(reason="the session needs a human",
                                                                          details=("r",))),
    "nothing-left": ([record(1, Outcome.PROGRESS)], plan({"1.1": DONE, "1.2": DONE, "2.1": DONE}), {},
                     Finish(reason="every checkpoint is done (3 done)")),
    "max-sessions": ([record(1, Outcome.PROGRESS)], plan(budget=BudgetConfig(max_sessions=1)), {},
                     Park(reason="max_sessions reached (1 of 1)")),
    "max-cost": ([record(1, Outcome.PROGRESS, cost_usd=2.0)], plan(budget=BudgetConfig(max_cost_usd=2.0)), {},
                 Park(reason="max_cost_usd reached ($2.00 of $2.00)")),
    "max-backoffs": ([record(1, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT)], plan(budget=BudgetConfig(max_backoffs=1)),
                     {}, Park(reason="1 backoffs in a row (max_backoffs 1)", details=("r",))),
    "backoff": ([record(1, Outcome.LIMIT_BACKOFF, Blame.ENVIRONMENT)], plan(), {}, Wait(
        until=T0 + LIMIT_BACKOFF_BASE, reason="rate limit; no attempt burned",
        then=RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="retry after the rate limit"))),
    "rolled-over": ([record(1, Outcome.ROLLED_OVER, Blame.ENVIRONMENT)], plan(), {}, RunSession(
        kind=SessionKind.HANDOFF, checkpoint="1.1", reason="token budget reached: fresh session with the handoff")),
    "zero-output-stalls": ([record(1, Outcome.STALLED, zero_output=True), record(2, Outcome.STALLED, zero_output=True)],
                           plan(), {}, Park(reason="two consecutive sessions produced no output at all")),
    "resume-budget": ([record(1, Outcome.STALLED, **STALL)], plan(budget=BudgetConfig(max_resumes=0)), {},
                      ConsultAdvisor(reason="resume budget spent (0 resumes)", checkpoint="1.1")),
    "resume": ([record(1, Outcome.TIMED_OUT, **STALL)], plan(), {}, RunSession(
        kind=SessionKind.RESUME, checkpoint="1.1", reason="TimedOut: resume the same agent session",
        resume_session_id="a")),
    "restart": ([record(1, Outcome.STALLED, resume_session_id="r0")], plan(), {}, RunSession(
        kind=SessionKind.DELIVERY, checkpoint="1.1", resume_session_id="r0",
        reason="Stalled before the agent had a session id: start it again")),
    "circuit-breaker": ([record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="f"),
                         record(2, Outcome.GATES_RED, Blame.AGENT, fingerprint="f")], plan(sessions=(10, 1)), {},
                        ConsultAdvisor(reason="circuit breaker: GatesRed twice in a row with the same failure",
                                       checkpoint="1.1")),
    "stage-budget": ([record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="a")],
                     plan(sessions=(1, 1), budget=BudgetConfig(slack=1.0)), {},
                     ConsultAdvisor(reason="stage 1 attempt budget spent (1 attempts)", checkpoint="1.1")),
    "fix": ([record(1, Outcome.AGENT_ERROR, Blame.AGENT, fingerprint="e")], plan(), {},
            RunSession(kind=SessionKind.FIX_ERROR, checkpoint="1.1", reason="AgentError: fix session")),
    "fix-red-on-base": ([record(1, Outcome.GATES_RED, Blame.NONE, fingerprint="f")], plan(), {},
                        RunSession(kind=SessionKind.FIX_GATES, checkpoint="1.1",
                                   reason="GatesRed, as on the base commit before any work: fix session")),
    "deliver": ([record(1, Outcome.ADVANCED)], plan({"1.1": DONE}), {},
                RunSession(kind=SessionKind.DELIVERY, checkpoint="1.2", reason="advanced: next checkpoint")),
}


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_each_rule_decides_its_case_and_is_named(name):
    """Each rule of NEXT_RULES, in its smallest case: the action it takes, and its name on the decision."""
    history, p, extra, expected = RULE_CASES[name]
    last = history[-1]
    v = verdict(last.outcome, last.blame, fingerprint=last.fingerprint, zero_output=last.zero_output,
                agent_session_id=last.agent_session_id, **extra)
    decision = decide(v, fold(history), p)
    assert (decision.rule, decision.action) == (name, expected)
    assert decide_next(v, fold(history), p) == expected


def test_a_failure_red_on_the_base_then_the_agents_trips_the_circuit_breaker():
    """Session 1 red as on the base (blame none), session 2 the same failure (the agent's): the streak spans both,
    so a set-up problem that looks like work to do costs one fix session, not the stage's attempts."""
    history = [record(1, Outcome.GATES_RED, Blame.NONE, fingerprint="f"),
               record(2, Outcome.GATES_RED, Blame.AGENT, fingerprint="f")]
    v = verdict(Outcome.GATES_RED, Blame.AGENT, fingerprint="f")
    decision = decide(v, fold(history), plan(sessions=(10, 1)))
    assert decision.rule == "circuit-breaker"
    assert fold(history).stage_attempts.get(1, 0) <= 1  # the first session burned none


def test_every_rule_has_a_case_and_the_table_ends_in_a_default():
    """The table and the cases above name the same rules in the same order (a new rule needs its case); the last
    rule applies to anything, so every situation is decided."""
    assert [r.name for r in NEXT_RULES] == list(RULE_CASES)
    assert len({r.name for r in NEXT_RULES}) == len(NEXT_RULES)
    assert NEXT_RULES[-1].name == "deliver" and NEXT_RULES[-1].applies(None)  # type: ignore[arg-type]


def test_the_deciding_rule_is_recorded_and_old_ledgers_still_read():
    """`decided_by` is an optional field: a ledger line written before it parses (None); a new one round-trips."""
    old = dump_entry(record(1, Outcome.PROGRESS)).replace(',"decided_by":null', "")
    assert "decided_by" not in old and parse_entry(old).decided_by is None
    new = record(1, Outcome.PROGRESS).model_copy(update={"decided_by": "deliver"})
    back = parse_entry(dump_entry(new))
    assert isinstance(back, SessionRecord) and back.decided_by == "deliver"
    advice = Advice(at=T0, answer="skip", reason="r", checkpoint="1.1", next_action=Park(reason="x"))
    assert parse_entry(dump_entry(advice).replace(',"applied":true', "")).applied is True


# --- what may skip a checkpoint without a human ------------------------------------------------------


def test_the_advisor_alone_cannot_skip_unless_the_plan_opts_in():
    """By default an advisor's `skip` parks the plan for a human, naming the key that would allow it; with
    `advisor.may_skip: true` it skips. The plan without any advisor section never lets it skip."""
    state = fold([record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="f")])
    for p in (plan(), may_skip(plan(), False)):
        assert not advisor_may_skip(p)
        action = decide_after_advice("skip", "approved", state, p)
        assert isinstance(action, Park) and "advisor.may_skip" in action.reason and "approved" in action.reason
    assert advisor_may_skip(may_skip(plan()))
    assert decide_after_advice("skip", "ok", state, may_skip(plan())) == RunSession(
        kind=SessionKind.DELIVERY, checkpoint="1.2", reason="advisor: skip (ok)")
    assert PlanConfig().advisor is None and AdvisorConfig().may_skip is False


def test_a_refused_skip_is_recorded_unapplied_and_skips_nothing_later():
    """The ledger keeps the advisor's word (`skip`) with `applied=False`; the folded state skips nothing, so a
    human's later `retry` works on the same checkpoint again (not on the next one the advisor wanted)."""
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="f")]
    p = plan()
    entry = advice_entry("skip", "approved", fold(h), p, at=T0, checkpoint="1.1")
    assert (entry.answer, entry.applied, isinstance(entry.next_action, Park)) == ("skip", False, True)
    after = fold(h + [entry])
    assert after.skipped == frozenset() and after.parked
    assert decide_after_reply("retry", "", "octocat", after, p).checkpoint == "1.1"
    allowed = advice_entry("skip", "ok", fold(h), may_skip(p), at=T0, checkpoint="1.1")
    assert allowed.applied and fold(h + [allowed]).skipped == {"1.1"}
    assert advice_entry("retry", "r", fold(h), p, at=T0).applied  # only a skip is ever refused
    failed = advice_entry("human", "the call failed", fold(h), p, at=T0, valid=False, model="m")
    assert (failed.valid, failed.model, failed.reason, failed.at) == (False, "m", "the call failed", T0)
    # a human's skip needs no opt-in: the human is the control
    assert decide_after_reply("skip", "", "octocat", after, p).checkpoint == "1.2"


def test_the_report_names_the_rule_that_decided():
    """The session's report says which rule of the policy chose what comes next (one line under the outcome)."""
    from core_builders import evidence
    from runner.adapters.render.report import render_report

    v = verdict(Outcome.PROGRESS)
    decided = fold([record(1, Outcome.PROGRESS).model_copy(update={"decided_by": "max-cost"})])
    text = render_report(plan(), decided, title="t", verdict=v, evidence=evidence())
    assert "Next decided by rule `max-cost` of the policy." in text
    assert "Next decided by" not in render_report(plan(), fold([record(1)]), title="t", verdict=v, evidence=evidence())


# --- the fold of the entries that are not sessions: notes, places, refs, a compaction's summary ---


def _note(text, minutes=0, source=None, user="maintainer"):
    return Note(at=T0 + timedelta(minutes=minutes), text=text, user=user,
                source=f"c{text}" if source is None else source)


def test_a_note_written_after_the_session_started_waits_for_the_next_one():
    """A session that ran consumes the notes written up to its start (its prompt showed them); one written after
    it started, even a second after, reaches the next session's."""
    state = fold([_note("before", -1), _note("at the start", 0),
                  Note(at=T0 + timedelta(seconds=1), text="just after", user="maintainer", source="c1s")])
    after = fold([record(1, outcome=Outcome.PROGRESS)], state)  # started at T0
    assert [n.text for n in after.notes] == ["just after"]


def test_a_session_the_environment_cut_short_keeps_every_note_and_an_agents_consumes_them():
    """Nobody's session (the environment's) keeps the notes for one that runs; a session that ran does not."""
    state = fold([_note("a", -2), _note("b", -1)])
    kept = fold([record(1, outcome=Outcome.LIMIT_BACKOFF, blame=Blame.ENVIRONMENT)], state)
    assert [n.text for n in kept.notes] == ["a", "b"]
    for blame in (Blame.AGENT, Blame.NONE):
        assert fold([record(1, outcome=Outcome.GATES_RED, blame=blame)], state).notes == ()


def test_the_five_latest_notes_reach_a_prompt():
    """docs/github-actions.md: the five latest notes reach one prompt."""
    assert MAX_NOTES == 5
    state = fold([_note(str(i), i) for i in range(8)])
    assert [n.text for n in state.notes] == ["3", "4", "5", "6", "7"]


def test_a_note_is_kept_once_per_comment_and_notes_without_a_source_each_count():
    """A job that runs twice records a comment's note once (same source); notes without a source are distinct."""
    assert [n.text for n in fold([_note("a", 1, source="u1"), _note("a", 2, source="u1")]).notes] == ["a"]
    assert [n.text for n in fold([_note("a", 1, source="u1"), _note("b", 2, source="u2")]).notes] == ["a", "b"]
    assert [n.text for n in fold([_note("a", 1, source=""), _note("b", 2, source="")]).notes] == ["a", "b"]


def test_with_notes_puts_the_reply_first_then_each_note_attributed():
    note = _note("use tabs", user="octo")
    quoted = "Note from @octo on the plan's pull request:\nuse tabs"
    assert with_notes(" English. ", [note]) == "English.\n\n" + quoted
    assert with_notes("   ", [note]) == quoted  # a blank reply adds nothing, not an empty paragraph
    assert with_notes(None, [note]) == quoted
    assert with_notes("English.", []) == "English."
    assert with_notes("English.", [_note("  ")]) == "English."  # a blank note adds nothing
    assert with_notes(None, []) is None and with_notes("  ", [_note(" ")]) is None


def test_a_place_entry_sets_where_the_plan_talks_and_the_latest_wins():
    first = Place(at=T0, issue=7, url="https://github.com/o/r/issues/7", user="octo")
    second = Place(at=T0, issue=9, url="https://github.com/o/r/issues/9")
    assert fold([first]).place == first
    assert fold([first, second]).place == second


def test_a_started_session_sets_the_ref_and_one_without_a_ref_keeps_the_last():
    def started(n, ref):
        return SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0, base_sha="0" * 40,
                              ref=ref)
    assert fold([started(1, "feature")]).ref == "feature"
    assert fold([started(1, "feature"), started(2, "")]).ref == "feature"
    assert fold([started(1, "feature"), started(2, "other")]).ref == "other"
    assert fold([started(1, "")]).ref is None


def _summary(state, **kw):
    return Summary(at=T0, entries=40, fold=FOLD_VERSION, state=state, **kw)


def test_a_compactions_summary_stands_for_the_state_it_replaced():
    """A compacted ledger folds to the state the full one did: fold continues from the summary's state."""
    h = [record(1, Outcome.GATES_RED, Blame.AGENT, fingerprint="a", tokens=100, cost_usd=0.5),
         record(2, Outcome.PROGRESS, tokens=50)]
    full = fold(h)
    compacted = fold([_summary(full.model_dump(mode="json"), sessions=2, tokens=150, cost_usd=0.5)])
    assert compacted == full
    nxt = record(3, Outcome.PROGRESS, tokens=10)
    assert fold([_summary(full.model_dump(mode="json"), sessions=2), nxt]) == fold([*h, nxt])


def test_a_summary_whose_state_does_not_read_carries_its_totals_on():
    """A summary's state another version wrote that does not read as a RunState: its totals carry on alone."""
    state = fold([_summary({"sessions": "many", "bogus": []}, sessions=12, tokens=3400, cost_usd=1.25)])
    assert state == RunState(sessions=12, tokens=3400, cost_usd=1.25)


def test_advice_not_asked_for_parks_with_the_reason_alone():
    """The advisor consulted on its own (a circuit breaker, a budget: `asked=False`): its `park` says what
    happened, not "the advisor asks"; its ledger entry records that action."""
    state = fold([record(1, Outcome.NO_PROGRESS, Blame.AGENT)])
    entry = advice_entry("human", "the stage's budget is spent", state, plan(), at=T0, asked=False)
    assert entry.next_action == Park(reason="the stage's budget is spent")
    asked = advice_entry("human", "unclear spec", state, plan(), at=T0)
    assert asked.next_action == Park(reason="the advisor asks for a human: unclear spec")
