"""run_session: steps 3 to 7 of SPEC section 4 for one session, from a `Session`.

Order matters for crash consistency: the start is recorded before the agent
runs; the work branch is pushed before the ledger records the verdict; the
next action is applied only after the ledger says what it is.
"""

from __future__ import annotations

import shutil
import time

from runner.adapters.sandbox import agent_clone as agentarea

from runner.adapters.git import work as gitwork

from runner.adapters.judge import guard

from runner.adapters.sandbox import identity as sandbox

from runner.adapters.judge import setup
from runner.core.actions import ConsultAdvisor, Finish, Park, RunSession, SessionKind, Wait, describe
from runner.adapters.sandbox.agentenv import build_agent_env, clean_path, credential_vars, key_like
from runner.backends import SessionRequest, get_backend
from runner.adapters.judge.collect import SessionScene, collect_evidence, handoff_path_of, revert_rejected_flips
from runner.core.errors import PlanRunnerError, Refused, StateConflict
from runner.adapters.judge.gates import GateCache, run_gates
from runner.adapters.judge.guard import redact_text
from runner.core.ledger import Dispatched, GateSummary, SessionRecord, SessionStarted
from runner.core.outcome import classify
from runner.core.planfile import with_tracker
from runner.core.policy import decide_next, fold
from runner.adapters.render.prompts import PromptContext, render_handoff_from_evidence, render_prompt
from runner.drivers.session import (  # noqa: F401 - FAULT_POINTS and fault_point are re-exported for tests
    EVIDENCE_FILE, FAULT_POINTS, TRANSCRIPTS_DIR, Drivers, Session, SessionResult, Workspace, agent_pid_file,
    fault_point, isolation_of,
)


AGENT_STATE = "agent-state"


def _take_in(repo, branch: str, base_sha: str, imported: agentarea.Imported) -> list[str]:
    """Move the judge's work branch to the agent's imported head when it builds on the session base;
    what the verdict must know otherwise (a rewrite is never taken: the remote only moves forward)."""
    if imported.problem:
        return [f"the agent's work could not be imported: {imported.problem}"]
    head = imported.head
    if head is None or head == base_sha:
        return []
    if not gitwork.is_ancestor(repo, base_sha, head):
        return [f"the work branch was rewritten: the session base {base_sha[:12]} is no longer in its "
                f"history (the agent's head {head[:12]} is kept locally, never pushed)"]
    gitwork.fast_forward(repo, branch, head)
    return []


def _prompt(s: Session, action: RunSession, plan_text: str, handoff_path: str) -> str:
    last = s.last_evidence()
    previous_handoff = last.handoff if last else None
    if action.kind is SessionKind.HANDOFF and not previous_handoff and last is not None:
        previous_handoff = render_handoff_from_evidence(s.plan, [last])
    ctx = PromptContext(plan=s.plan, plan_text=plan_text, handoff_path=handoff_path,
                        previous_handoff=previous_handoff, last_evidence=last,
                        rejected_flips=s.state.last.rejected_flips if s.state.last else (),
                        instructions=action.instructions, session_number=s.state.sessions + 1)
    return render_prompt(action, ctx)


def _carry_from(s: Session, action: RunSession) -> str | None:
    """Where the unjudged sessions before this one began, when they worked on the same checkpoint."""
    last = s.state.last
    if last is None or last.checkpoint != action.checkpoint:
        return None
    return s.state.uncredited_base


def _gate_summaries(evidence) -> tuple[GateSummary, ...]:
    return tuple(GateSummary(name=g.name, required=g.required, passed=g.passed, duration_s=g.duration_s,
                             fingerprint=g.fingerprint) for g in evidence.gates)


_early_pushed: dict[tuple[str, str, int], str] = {}  # session refs pushed before the gates, to delete atomically


def session_ref(plan_id: str, n: int) -> str:
    return f"refs/plan-runner/sessions/{plan_id}/{n}"


EARLY_PUSH = "PLAN_RUNNER_EARLY_PUSH"


def early_push(ws: Workspace) -> bool:
    """Opt-in (PLAN_RUNNER_EARLY_PUSH=1): the extra pushes a session made before issue 11 (its `started` entry
    before the agent, the agent's commits under a session ref before the gates, a fetch checking the remote
    state for tampering after the agent), so a job *killed outright* (SIGKILL, a lost runner) during the agent
    or the gates still leaves its commits on the remote. By default a cancelled job pushes them on the stop
    signal instead, and the next tick finds a killed session by its dispatch intent (docs/reliability.md)."""
    return (ws.env.get(EARLY_PUSH) or "").strip().lower() in ("1", "true", "yes")


def _push_early(ws: Workspace, plan, n: int, expected_remote_sha: str | None):
    """Right after the agent (leftovers committed, tampering reverted), with `early_push`: its commits go to
    the remote under a session ref, so a job killed before the final push loses none of them.
    With `checks:` gates the work branch goes (always): the repository's own CI judges that commit."""
    if not ws.remote:
        return None
    checks = any(g.kind == "checks" for g in plan.config.gates)
    early = early_push(ws)
    if not checks and not early:
        return None

    def push(head: str) -> None:
        if early:
            push_session_ref(ws, plan.id, n, head)
        if checks:
            gitwork.push_branch(ws.repo, plan.work_branch, ws.remote, expected_remote_sha)
    return push


def push_session_ref(ws: Workspace, plan_id: str, n: int, head: str) -> None:
    gitwork.push_ref(ws.repo, ws.remote, head, session_ref(plan_id, n), None, what="the session's commits")
    _early_pushed[(str(ws.repo), plan_id, n)] = head


def _work_updates(ws: Workspace, plan, n: int) -> list[tuple[str | None, str, str | None]]:
    """The work branch (compare-and-swap on the remote's copy as last seen) and the deletion of the session
    ref (if it was pushed), to push atomically with the state; a secret in a commit never leaves this machine."""
    branch = f"refs/heads/{plan.work_branch}"
    head = gitwork.ref_sha(ws.repo, branch)
    expected = gitwork.ref_sha(ws.repo, f"refs/remotes/{ws.remote}/{plan.work_branch}")
    if expected and head and expected != head and not gitwork.is_ancestor(ws.repo, expected, head):
        # The remote only moves forward (SPEC 4b, invariant 5): every commit it holds stays reachable.
        raise PlanRunnerError(
            what=f"refusing to push the work branch {plan.work_branch!r}: it would drop commits from {ws.remote!r}",
            why=f"the remote's {expected[:12]} is not in the history of {head[:12]}; plan-runner never "
                "force-pushes a rewritten history",
            fix=f"inspect `git -C {ws.repo} log {head}...{expected}`; merge the remote's commits into the "
                "work branch by hand, push, then run again")
    updates = [(head, branch, expected)]
    pushed = _early_pushed.pop((str(ws.repo), plan.id, n), None)
    if pushed is not None:
        updates.append((None, session_ref(plan.id, n), pushed))
    return updates


def run_session(ws: Workspace, drivers: Drivers, session: Session | None = None) -> SessionResult:
    """Run at most one session of the plan and apply what follows from it (`session`: already read)."""
    s = session or Session(ws, drivers)
    action = s.next_run()
    if isinstance(action, SessionResult):
        return action
    with sandbox.leased(isolation_of(ws, s.trusted), actions=ws.actions) as identity:
        return _run(s, action, identity)


def _secure_judge_repo(repo) -> None:
    """The judge's repository is private: the agent's identity cannot read its config (on GitHub it holds
    the checkout's token) nor write anything in it."""
    git_dir = gitwork.git_dir(repo)
    mode = git_dir.stat().st_mode & 0o7777
    if mode & 0o077:
        git_dir.chmod(mode & ~0o077)


def _gate_env(ws: Workspace, plan, area: agentarea.AgentArea) -> dict[str, str]:
    """Gates get the basics and the plan's own names, no credentials of the backend, and a clean HOME."""
    env = build_agent_env(ws.env, allow=plan.config.agent.env, api_key_vars=())
    env["HOME"] = str(area.gate_home)
    env["PATH"] = clean_path(env.get("PATH", ""), also=(ws.repo,))  # never the user's working copy's venv
    return env


def _setup_and_checkout(s: Session, identity: sandbox.Identity, area: agentarea.AgentArea, env: dict[str, str],
                        failures: list):
    """The fresh checkout the gates judge, with the plan's `setup:` commands run in it first (a failed
    one is added to `failures`, reported as a red gate)."""
    ws, plan = s.ws, s.trusted
    scratch = ws.scratch_dir / plan.id

    trusted = setup.trusted_commit(ws.repo, ws.remote, plan.config.base)

    def fresh(sha: str):
        return agentarea.checkout(area, identity, ws.repo, sha, scratch)

    def make(sha: str):
        workdir = fresh(sha)
        if plan.config.setup is not None:
            failures.extend(setup.run_setup(plan.config.setup, sha=sha, repo=ws.repo, workdir=workdir, env=env,
                                            identity=identity, cache_dir=scratch / "setup-cache",
                                            trusted_sha=trusted, checkout=fresh, on_event=ws.on_event))
        return workdir

    def on_base(gates):
        """The gates given, on a fresh checkout of the trusted base commit after its set-up (issue 27)."""
        if trusted is None:
            return (), ""
        workdir = fresh(trusted)
        if plan.config.setup is not None:
            setup.run_setup(plan.config.setup, sha=trusted, repo=ws.repo, workdir=workdir, env=env,
                            identity=identity, cache_dir=scratch / "setup-cache", trusted_sha=trusted,
                            checkout=fresh, on_event=ws.on_event)
        return run_gates(gates, workdir=workdir, env=env, identity=identity), trusted
    make.on_base = on_base  # type: ignore[attr-defined]
    return make


def _set_up_clone(s: Session, identity: sandbox.Identity, area: agentarea.AgentArea, base_sha: str,
                  transcripts) -> None:
    """The plan's `setup:` in the agent's clone too (same commands, same cache rules), before the agent."""
    ws, plan = s.ws, s.trusted
    if plan.config.setup is None or not plan.config.setup.run:
        return
    scratch = ws.scratch_dir / plan.id
    env = build_agent_env(ws.env, allow=plan.config.agent.env, api_key_vars=())  # no credentials for set-up
    env["HOME"] = str(area.home)
    env["PATH"] = clean_path(env.get("PATH", ""), also=(ws.repo,))

    def reclone():
        agentarea.prepare(area, identity, ws.repo, plan.work_branch, transcripts / AGENT_STATE, scratch)
        return area.work
    failed = setup.set_up_clone(
        plan.config.setup, sha=base_sha, repo=ws.repo, workdir=area.work, env=env, identity=identity,
        cache_dir=scratch / "setup-cache", trusted_sha=setup.trusted_commit(ws.repo, ws.remote, plan.config.base),
        checkout=lambda rev: agentarea.checkout(area, identity, ws.repo, rev, scratch, into=area.work),
        reclone=reclone, on_event=ws.on_event)
    if failed:
        ws.on_event("warning", f"setup: failed in the agent's clone: {failed}")


def _run(s: Session, action: RunSession, identity: sandbox.Identity) -> SessionResult:
    ws, plan = s.ws, s.trusted
    ws.on_event("isolation", identity.describe())
    try:
        if gitwork.is_dirty(ws.repo):
            raise PlanRunnerError(
                what=f"the work tree {ws.repo} has uncommitted changes",
                why="plan-runner checks out the work branch and commits the agent's leftovers; your changes would mix in",
                fix="commit or stash them (`git stash -u`), then run again")
        base_sha = gitwork.ensure_work_branch(ws.repo, plan.work_branch, plan.config.base, ws.remote,
                                              fetched=getattr(s, "branches_fetched", False))
    except PlanRunnerError:
        # Two sessions of one plan started at once in one clone: the other one is already moving this work
        # tree (its start is recorded a moment later). That is a lost race, not the user's mistake: yield to
        # it, as a lost compare-and-swap would.
        for _ in range(10):
            if s.d.store.read(plan.id)[1] != s.version:
                return SessionResult("superseded", s.plan, s.state, action, "another job started this session first")
            time.sleep(0.5)
        raise
    work_remote_sha = gitwork.ref_sha(ws.repo, f"refs/remotes/{ws.remote}/{plan.work_branch}") if ws.remote else None
    plan_text = gitwork.read_file_at(ws.repo, base_sha, plan.path) or s.trusted_text
    tracked = with_tracker(plan, plan_text)
    n = s.state.next_n
    started_at = ws.clock()
    started = SessionStarted(n=n, kind=action.kind, checkpoint=action.checkpoint, started_at=started_at,
                             base_sha=base_sha, job=ws.job, resume_session_id=action.resume_session_id)
    # The start goes to the remote only when nothing there says this session is due: a session a plan-runner
    # job dispatched has its intent (`Dispatched`) on the remote already, and the tick finds it by that intent
    # if this job dies without a word (action_tick). A session started by hand pushes it, so it is found too.
    push_start = not ws.remote or early_push(ws) or s.state.last_dispatch < n
    try:
        s.write([started], push=push_start)
    except StateConflict:
        return SessionResult("superseded", s.plan, s.state, action, "another job started this session first")
    fault_point(ws, "after-start")
    ws.on_event("session", f"{n} {action.kind.value} {action.checkpoint or ''}".strip())

    handoff_path = handoff_path_of(plan)
    transcripts = ws.scratch_dir / plan.id / "transcripts"
    shutil.rmtree(transcripts, ignore_errors=True)
    s.d.store.read_dir(plan.id, TRANSCRIPTS_DIR, transcripts)
    if identity.isolated:
        _secure_judge_repo(ws.repo)
    area = agentarea.area_for(ws.repo, plan.id)
    agentarea.prepare(area, identity, ws.repo, plan.work_branch, transcripts / AGENT_STATE, ws.scratch_dir / plan.id)
    _set_up_clone(s, identity, area, base_sha, transcripts)
    agent_env = build_agent_env(ws.env, allow=plan.config.agent.env,
                                api_key_vars=credential_vars(plan.config.agent.backend))
    agent_env["HOME"] = str(area.home)
    agent_env["PATH"] = clean_path(agent_env.get("PATH", ""), also=(ws.repo,))
    request = SessionRequest(
        workdir=area.work, prompt=_prompt(s, action, plan_text, handoff_path), agent=plan.config.agent,
        env=agent_env, transcript_dir=transcripts, resume_session_id=action.resume_session_id,
        plan_path=area.work / plan.path, handoff_path=area.work / handoff_path, pid_file=agent_pid_file(ws, plan.id),
        on_event=lambda kind, detail: ws.on_event(kind, redact_text(detail, s.secrets)),  # its words may hold a key
        identity=identity, agent_state_dir=area.state, input_dir=area.inputs)
    control = guard.snapshot(ws.repo)
    try:
        signals = get_backend(plan.config.agent.backend).run(request)
    finally:
        identity.kill_all()  # nothing the agent started outlives it (invariant 2)
    # First thing after the agent: undo what it may have done to git itself, before any git command of ours.
    moved = guard.restore(control)
    imported = agentarea.export_work(area, identity, ws.repo, plan.work_branch, base_sha, plan.id,
                                     ws.scratch_dir / plan.id)
    skipped = agentarea.save_state(area, identity, transcripts / AGENT_STATE)
    moved += _take_in(ws.repo, plan.work_branch, base_sha, imported)
    for note in imported.notes:
        ws.on_event("warning", note)
    if skipped:
        ws.on_event("warning", "not kept from the agent's state: " + "; ".join(skipped[:5]))
    restore_state = getattr(s.d.store, "restore_own", None)
    if restore_state is not None:  # this plan's own ref only: other plans' jobs write theirs meanwhile
        # An isolated agent can reach neither this repository nor its remote's credentials: no fetch to check it.
        # The remote is checked only with `early_push`: otherwise the final push's lease finds any move of it,
        # and `_final_write` checks it then (one fetch on that path only).
        moved += restore_state(plan.id, s.version, remote=early_push(ws) and not identity.isolated)
    fault_point(ws, "after-agent")
    ws.on_event("agent", f"{signals.exit_kind.value}, {signals.total_tokens} tokens")

    gate_env = _gate_env(ws, plan, area)
    setup_failures: list = []
    make_checkout = _setup_and_checkout(s, identity, area, gate_env, setup_failures)
    scene = SessionScene(repo=ws.repo, plan=tracked, plan_text=plan_text, base_sha=base_sha,
                         handoff_path=handoff_path, started_at=started_at, session_number=n,
                         session_kind=action.kind.value, checkpoint=action.checkpoint)
    evidence = collect_evidence(scene, signals, env=agent_env, observed_at=ws.clock(),
                                cache=GateCache(ws.scratch_dir / plan.id / "gate-cache.json"),
                                on_gate=lambda e: ws.on_event("gate", f"{e.kind} {e.gate}"),
                                checks_runner=s.d.checks_runner, extra_tampering=tuple(moved),
                                before_gates=_push_early(ws, plan, n, work_remote_sha),
                                secrets=key_like(s.secrets), unpushed_from=work_remote_sha,
                                carry_from=_carry_from(s, action), identity=identity,
                                checkout=make_checkout, gate_env=gate_env, on_base=make_checkout.on_base)
    if setup_failures:
        evidence = evidence.model_copy(update={"gates": tuple(setup_failures) + evidence.gates})
    evidence = guard.redact_evidence(evidence, s.secrets)  # gate output and the agent's words are kept and published
    signals = evidence.signals
    fault_point(ws, "after-gates")
    verdict = classify(evidence)
    head = revert_rejected_flips(scene, evidence, verdict.rejected_flips)
    s.plan = with_tracker(plan, gitwork.read_file_at(ws.repo, head, plan.path) or plan_text)
    stage = plan.stage_of(action.checkpoint) if action.checkpoint else None
    record = SessionRecord(
        n=n, kind=action.kind, checkpoint=action.checkpoint, stage=stage.number if stage else None,
        started_at=started_at, finished_at=evidence.observed_at, outcome=verdict.outcome, blame=verdict.blame,
        rule=verdict.rule, reasons=verdict.reasons, fingerprint=verdict.fingerprint, zero_output=verdict.zero_output,
        advanced=verdict.advanced, rejected_flips=verdict.rejected_flips, agent_session_id=verdict.agent_session_id, backend=signals.backend,
        tokens=signals.total_tokens, cost_usd=signals.cost_usd, base_sha=base_sha, head_sha=head,
        work_commits=len(evidence.work_commits), gates=_gate_summaries(evidence), hints=signals.hints,
        resume_session_id=action.resume_session_id, instructions=action.instructions)
    next_action = decide_next(verdict, fold([record], s.state), s.plan)
    record = record.model_copy(update={"next_action": next_action})
    ws.on_event("outcome", f"{verdict.outcome.value}: {describe(next_action)}")

    fault_point(ws, "before-push")
    fault_point(ws, "after-push")
    fault_point(ws, "before-ledger")
    # One write, one atomic push: the verdict (with the intent to dispatch the next run, when that is what
    # follows), the work branch and the removal of the session ref land together or not at all.
    intent = _dispatch_intent(s, next_action)
    _final_write(s, n, base_sha, [record, *intent], files={EVIDENCE_FILE: evidence.model_dump_json().encode()},
                 dirs={TRANSCRIPTS_DIR: transcripts},
                 also_push=_work_updates(ws, plan, n) if ws.remote and not evidence.leaked_secrets else ())
    fault_point(ws, "after-ledger")
    result = apply_action(s, next_action, evidence, verdict, dispatch_recorded=bool(intent))
    return SessionResult(result.status if result.status != "waiting" else "ran", s.plan, s.state, result.action,
                         result.message, verdict=verdict, evidence=evidence, record=record,
                         report_text=result.report_text, url=result.url,
                         report_fn=lambda: s.report(f"session {n}: {verdict.outcome.value}", result.action,
                                                    evidence, verdict))


def _final_write(s: Session, n: int, base_sha: str, entries, **kw) -> None:
    """The session's one atomic push. A lost lease means the remote state moved during the session: a
    tick or reply wrote to the plan (this session yields to it), or something else moved it (the agent, where
    it shares credentials with plan-runner): then it is put back and the write tried once more. A session that
    yields pushes the agent's commits to its session ref first, so none is lost."""
    ws, plan = s.ws, s.trusted
    try:
        s.write(entries, **kw)
        return
    except StateConflict:
        if not ws.remote:
            raise
        restore_state = getattr(s.d.store, "restore_own", None)
        moved = restore_state(plan.id, s.version, remote=True) if restore_state is not None else []
        if moved:
            ws.on_event("warning", "; ".join(moved))
            try:
                s.write(entries, **kw)
                return
            except StateConflict:
                pass
        head = gitwork.ref_sha(ws.repo, f"refs/heads/{plan.work_branch}")
        if head is not None and head != base_sha:
            try:
                push_session_ref(ws, plan.id, n, head)
            except PlanRunnerError:
                pass
        raise


def _dispatch_intent(s: Session, action) -> list[Dispatched]:
    """The Dispatched entry `dispatch` would write right after the record, written with it instead (one push
    less); only for a plain next session, the one action that is dispatched without another decision first.
    `s.state` is the state before the record: `dispatch` numbers the next run one past the record."""
    nxt = s.state.sessions + 2
    if not isinstance(action, RunSession) or s.state.last_dispatch >= nxt:
        return []
    return [Dispatched(at=s.ws.clock(), for_session=nxt, key=f"{s.trusted.id}#{nxt}")]


def apply_action(s: Session, action, evidence=None, verdict=None, dispatch_recorded: bool = False) -> SessionResult:
    """Apply the decided next action: the one place that changes the world after a decision."""
    ws = s.ws
    while isinstance(action, ConsultAdvisor):
        action = s.consult(action)
    if isinstance(action, Park):
        fault_point(ws, "before-park")
        result = s.apply_park(action, evidence, verdict)
        fault_point(ws, "after-park")
        return result
    if isinstance(action, Finish):
        return s.apply_finish(action, evidence, verdict)
    if isinstance(action, RunSession) or (isinstance(action, Wait) and action.until <= ws.clock()):
        return dispatch(s, action, recorded=dispatch_recorded)
    return SessionResult("waiting", s.plan, s.state, action, describe(action))


def dispatch(s: Session, action, recorded: bool = False) -> SessionResult:
    """Dispatch the next run once: the intent is in the ledger before the call, so a crash after it never
    dispatches twice; a call lost to a crash before it is redone by the tick after a while. `recorded`: this
    session wrote the intent with its record (so it was not dispatched yet)."""
    n = s.state.sessions + 1
    if s.state.last_dispatch >= n and not recorded:
        return SessionResult("ran", s.plan, s.state, action, f"next run already dispatched: {describe(action)}")
    key = f"{s.trusted.id}#{n}"
    fault_point(s.ws, "before-dispatch")
    if not recorded:
        s.write([Dispatched(at=s.ws.clock(), for_session=n, key=key)])
    fault_point(s.ws, "dispatch-recorded")
    try:
        s.d.dispatcher.dispatch_next(s.trusted.path, key)
    except Refused as err:
        return park_refused_dispatch(s, err)
    fault_point(s.ws, "after-dispatch")
    return SessionResult("ran", s.plan, s.state, action, describe(action))


def park_refused_dispatch(s: Session, err: Refused) -> SessionResult:
    """GitHub refused the dispatch for a reason only a person can change (the token lacks `actions: write`, the
    workflow has no `workflow_dispatch` trigger): park once with the fix. The park voids the dispatch intent,
    so no tick redoes it; a maintainer's `/plan-runner resume` dispatches again."""
    return s.apply_park(Park(reason=f"the next run could not be started: {err.what}",
                             details=(f"why: {err.why}", *err.fix.splitlines())))
