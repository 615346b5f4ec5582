"""The session as explicit phases, each a function from small frozen values to the next (docs/design.md;
docs/reliability.md, "Fault points"):

    load -> begin -> run_agent -> import_work -> judge -> decide -> persist -> apply

`run_session` is the whole session, read top to bottom; the crash-consistency fault points
(runner.drivers.session.faults) sit at the boundaries between the phases. Order matters for crash
consistency: the start is recorded before the agent runs; the work branch is pushed with the verdict, in one
atomic write; the next action is applied only after the ledger says what it is. The one mutable thing is the
plan's ledger handle (`Session`: its compare-and-swap version moves with each write). A session cut short
takes the one path of runner.drivers.session.cut_short.
"""

from __future__ import annotations

import shutil
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from runner.adapters.git import work as gitwork
from runner.adapters.judge import guard, setup
from runner.adapters.judge.agent_state import keep_resumable
from runner.adapters.judge.base import BaseTree, GatesTree, gate_env
from runner.adapters.judge.collect import SessionScene, collect_evidence, handoff_path_of, revert_rejected_flips
from runner.adapters.judge.gates import GateCache
from runner.core.network import model_access, refusals_line
from runner.adapters.secrets import key_like, redact, redact_evidence
from runner.adapters.render.prompts import PromptContext, render_handoff_from_evidence, render_prompt
from runner.adapters.sandbox import agent_clone as agentarea
from runner.adapters.sandbox import identity as sandbox
from runner.adapters.sandbox import agent_creds
from runner.adapters.sandbox import sweep
from runner.core.backend_spec import BACKENDS
from runner.adapters.sandbox.agentenv import backend_agent_env, clean_path
from runner.backends import SessionRequest, get_backend
from runner.backends.common.endpoint import is_unreachable
from runner.core.actions import ConsultAdvisor, Finish, Park, RunSession, SessionKind, Verdict, Wait, describe
from runner.core.errors import PlanRunnerError, Refused, StateConflict
from runner.core.evidence import Evidence, SessionSignals
from runner.core.ledger import Dispatched, GateSummary, SessionRecord, SessionStarted
from runner.core.outcome import classify
from runner.core.plan import Plan
from runner.core.planfile import with_tracker
from runner.core.policy import AnyAction, decide as decide_by_rules, decide_start, fold, with_notes
from runner.core.session_record import session_record
from runner.drivers.session.context import (
    EVIDENCE_FILE, TRANSCRIPTS_DIR, Ports, Session, SessionResult, Workspace, agent_pid_file, isolation_of,
    judge_tree, load_session,
)
from runner.drivers.session.cut_short import reconcile_orphan, session_ref
from runner.drivers.session.faults import fault_point
from runner.drivers.session.lock import start_lock


AGENT_STATE = "agent-state"


def _take_in(repo, branch: str, base_sha: str, imported: agentarea.Imported, tree=None) -> list[str]:
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
    gitwork.fast_forward(repo, branch, head, own=tree)
    return []


def _prompt(s: Session, action: RunSession, plan_text: str, handoff_path: str) -> str:
    last = s.last_evidence()
    previous_handoff = last.handoff if last else None
    if action.kind is SessionKind.HANDOFF and not previous_handoff and last is not None:
        previous_handoff = render_handoff_from_evidence(s.plan, [last])
    ctx = PromptContext(plan=s.plan, plan_text=plan_text, handoff_path=handoff_path,
                        previous_handoff=previous_handoff, last_evidence=last,
                        rejected_flips=s.state.last.rejected_flips if s.state.last else (),
                        instructions=with_notes(action.instructions, s.state.notes), session_number=s.state.sessions + 1,
                        trusted_text=s.trusted_text)  # the stage's text as the maintainer wrote it
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


def _push_early(ws: Workspace, plan, n: int, expected_remote_sha: str | None):
    """With `checks:` gates the work branch goes to the remote before the gates: the repository's own CI judges
    that commit."""
    remote = ws.remote
    if not remote or not any(g.kind == "checks" for g in plan.config.gates):
        return None

    def push(head: str) -> None:
        gitwork.push_branch(ws.repo, plan.work_branch, remote, expected_remote_sha)
    return push


def push_session_ref(ws: Workspace, plan_id: str, n: int, head: str) -> None:
    assert ws.remote, "a session's ref is pushed only where there is a remote"  # (its one caller checked)
    gitwork.push_ref(ws.repo, ws.remote, head, session_ref(plan_id, n), None, what="the session's commits")


def _work_updates(ws: Workspace, plan) -> list[tuple[str | None, str, str | None]]:
    """The work branch (compare-and-swap on the remote's copy as last seen), to push atomically with the state; a
    secret in a commit never leaves this machine. (A session's own ref is pushed only after its last write was lost,
    and the session ends there: no write of it follows to delete the ref.)"""
    branch = f"refs/heads/{plan.work_branch}"
    head = gitwork.ref_sha(ws.repo, branch)
    expected = gitwork.ref_sha(ws.repo, f"refs/remotes/{ws.remote}/{plan.work_branch}")
    if expected and head and expected != head and not gitwork.is_ancestor(ws.repo, expected, head):
        # The remote only moves forward (docs/security.md, "The mechanism"): every commit it holds stays reachable.
        raise PlanRunnerError(
            what=f"refusing to push the work branch {plan.work_branch!r}: it would drop commits from {ws.remote!r}",
            why=f"the remote's {expected[:12]} is not in the history of {head[:12]}; plan-runner never "
                "force-pushes a rewritten history",
            fix=f"inspect `git -C {ws.repo} log {head}...{expected}`; merge the remote's commits into the "
                "work branch by hand, push, then run again")
    return [(head, branch, expected)]


def _secure_judge_repo(repo) -> None:
    """The judge's repository is private: the agent's identity cannot read its config (on GitHub it holds
    the checkout's token) nor write anything in it."""
    git_dir = gitwork.git_dir(repo)
    mode = git_dir.stat().st_mode & 0o7777
    if mode & 0o077:
        git_dir.chmod(mode & ~0o077)


def gates_tree_for(ws, plan: Plan, identity: sandbox.Identity, area: agentarea.AgentArea,
                   network_refused: list | None = None, *, shown: agentarea.AgentArea | None = None,
                   checks_runner=None, push=None) -> GatesTree:
    """One "check out the trusted base and set it up" for the session (its collect.Judge), the preflight and the
    Actions cache: the plan's base (in `area`, the plan's) shown in `shown` (the preflight's own area), else `area`,
    with the gates' environment (judge.base.gate_env: its HOME the shown area's gate-home)."""
    trusted = setup.trusted_commit(ws.repo, ws.remote, plan.config.base)
    where = shown or area
    return GatesTree(base=BaseTree(area, Path(ws.repo)), area=where, identity=identity,
                     scratch=ws.scratch_dir / plan.id, env=gate_env(ws.env, plan, where.gate_home, Path(ws.repo)),
                     setup=plan.config.setup, trusted=trusted, on_event=ws.on_event,
                     network=lambda: identity.network("setup", plan.config.network, refused=network_refused),
                     checks_runner=checks_runner, push=push)


def _agent_tree(s: Session, identity: sandbox.Identity, area: agentarea.AgentArea, base_sha: str,
                transcripts) -> None:
    """The agent's tree at the session's base: the base brought to it (the caller holds it), the set-up layer
    (the plan's `setup:`, same commands and cache rules as the gates', restored at the tree's path), the area
    (agent_clone.prepare), and set-up run in the tree itself when nothing of it could be cached."""
    ws, plan = s.ws, s.trusted
    scratch = ws.scratch_dir / plan.id
    BaseTree(area, Path(ws.repo)).at(base_sha)
    config = plan.config.setup
    env = gate_env(ws.env, plan, area.home, Path(ws.repo))  # no credentials for set-up
    trusted = setup.trusted_commit(s.repo, ws.remote, plan.config.base) if config is not None and config.run else None
    network = (identity.network("setup", plan.config.network, refused=s.refused["setup"])
               if config is not None and config.run else nullcontext())
    with network:  # in a room: the registries (or the plan's list) only
        layered, failed = setup.agent_layer(config, sha=base_sha, repo=s.repo, area=area, identity=identity,
                                            env=env, cache_dir=scratch / "setup-cache", trusted_sha=trusted,
                                            on_event=ws.on_event)
    agentarea.prepare(area, identity, ws.repo, plan.work_branch, transcripts / AGENT_STATE, scratch)
    if config is not None and config.run:
        with identity.network("setup", plan.config.network, refused=s.refused["setup"]):
            failed = setup.run_in_tree(config, sha=base_sha, repo=s.repo, area=area, identity=identity, env=env,
                                       layered=layered, on_event=ws.on_event) or failed
    if failed:
        ws.on_event("warning", f"setup: failed in the agent's tree: {failed}")


# --- the values passed from one phase to the next ---------------------------------------------------------


@dataclass(frozen=True)
class Begun:
    """begin -> run_agent: the session's number and base, recorded as started."""

    action: RunSession
    started: SessionStarted  # as recorded
    n: int
    started_at: datetime
    base_sha: str
    work_remote_sha: str | None  # the remote's work branch as last seen (the final push's lease)
    plan_text: str  # the plan as on the session base (the tracker the agent starts from)
    tracked: Plan
    handoff_path: str
    transcripts: Path


@dataclass(frozen=True)
class AgentRan:
    """run_agent -> import_work: what the agent's backend reported; its processes are all gone."""

    signals: SessionSignals
    area: agentarea.AgentArea
    agent_env: dict[str, str]
    control: guard.Snapshot


@dataclass(frozen=True)
class Imported:
    """import_work -> judge: the agent's work is on the judge's work branch (or why not, in `moved`)."""

    ran: AgentRan
    moved: tuple[str, ...]  # tampering found and undone, and what could not be imported


@dataclass(frozen=True)
class Judged:
    """judge -> decide: the evidence and the verdict computed from it."""

    scene: SessionScene
    evidence: Evidence
    verdict: Verdict
    head: str  # the work branch after rejected claims were reverted


@dataclass(frozen=True)
class Decided:
    """decide -> persist: the record, holding the next action."""

    plan: Plan  # the plan with its tracker as on the judged head
    record: SessionRecord
    next_action: AnyAction


# --- the whole session ----------------------------------------------------------------------------------


def run_session(ws: Workspace, ports: Ports, session: Session | None = None) -> SessionResult:
    """Run at most one session of the plan and apply what follows from it (`session`: already read)."""
    s, action = load(ws, ports, session)
    if isinstance(action, SessionResult):
        s.close()
        return action
    begun = None
    try:
        with sandbox.leased(isolation_of(ws, s.trusted), actions=ws.actions, repo=ws.repo) as identity:
            ws.on_event("isolation", identity.describe())
            begun = begin(s, action)
            if isinstance(begun, SessionResult):
                return begun
            try:
                fault_point(ws.env, "after-start")
                # the base is the agent's tree's lowest layer, then the gates' tree: nothing else writes it meanwhile
                with BaseTree(agentarea.area_for(ws.repo, s.trusted.id), Path(ws.repo)).held():
                    imported = import_work(s, begun, run_agent(s, begun, identity), identity)
                    fault_point(ws.env, "after-agent")
                    judged = judge(s, begun, imported, identity)
                fault_point(ws.env, "after-gates")
                decided = decide(s, begun, judged)
                fault_point(ws.env, "before-persist")
                recorded_intent = persist(s, begun, judged, decided)
                fault_point(ws.env, "after-persist")
                return finish(s, begun, judged, decided, recorded_intent)
            finally:
                # The previous session's parts, moved aside by prepare/checkout: deleted in a detached process.
                agentarea.discard_trash(agentarea.area_for(ws.repo, s.trusted.id), identity)
                sweep.start()  # at most hourly, detached: the areas and seed stores of repositories now gone
    finally:
        if not (isinstance(begun, SessionResult) and begun.status == "superseded"):  # (the winner's tree is its own)
            gitwork.release_tree(judge_tree(ws, s.trusted.id))  # between sessions the branch is the user's to check out
        s.close()  # its git readers: nothing it read outlives it


# --- the phases -----------------------------------------------------------------------------------------


def load(ws: Workspace, ports: Ports, session: Session | None = None) -> tuple[Session, RunSession | SessionResult]:
    """The plan and its ledger (a session cut short before is settled first), and the session to run now,
    or the result that says why none runs."""
    s = session or load_session(ws, ports)
    if not reconcile_orphan(s):
        open_ = s.state.open_session
        assert open_ is not None  # reconcile_orphan says False only of an open session still running
        return s, SessionResult("busy", s.plan, s.state, None, f"session {open_.n} is still running in {open_.job}")
    action = decide_start(s.state, s.plan)
    for _ in range(5):
        if isinstance(action, RunSession):
            return s, action
        if isinstance(action, Park):
            return s, s.apply_park(action, again=True)  # a person started this run
        if isinstance(action, Finish):
            return s, s.apply_finish(action)
        if isinstance(action, Wait):
            if action.until > ws.clock():
                return s, SessionResult("waiting", s.plan, s.state, action,
                                        f"waiting until {action.until.isoformat(timespec='seconds')}: {action.reason}")
            action = action.then
        elif isinstance(action, ConsultAdvisor):
            action = s.consult(action)
    raise PlanRunnerError(what="the policy did not settle on an action", why=describe(action),
                          fix="report this as a bug with the plan's ledger attached")


def begin(s: Session, action: RunSession) -> Begun | SessionResult:
    """The work branch at its base, and the start recorded (a lost race: the other job's result)."""
    ws, plan = s.ws, s.trusted
    superseded = SessionResult("superseded", s.plan, s.state, action, "another job started this session first")
    # Two sessions of one plan started at once in one clone take turns here: the second finds the first's start
    # recorded and yields, never touching the work tree the first one works in.
    with start_lock(ws, plan.id):
        if s.d.store.local_version(plan.id) != s.version:  # no fetch: the other start was in this clone
            return superseded
        try:
            # plan-runner's own work tree of the plan: the user's HEAD, index, work tree and branch are never
            # touched, so their uncommitted changes are no reason to refuse.
            base_sha = gitwork.ensure_work_branch(s.repo, plan.work_branch, plan.config.base, ws.remote,
                                                  fetched=getattr(s, "branches_fetched", False),
                                                  tree=judge_tree(ws, plan.id))
        except StateConflict:
            return superseded  # something else moved the work branch meanwhile: a lost compare-and-swap
        work_remote_sha = gitwork.ref_sha(s.repo, f"refs/remotes/{ws.remote}/{plan.work_branch}") if ws.remote else None
        plan_text = gitwork.read_file_at(s.repo, base_sha, plan.path) or s.trusted_text
        n = s.state.next_n
        started_at = ws.clock()
        started = SessionStarted(n=n, kind=action.kind, checkpoint=action.checkpoint, started_at=started_at,
                                 base_sha=base_sha, job=ws.job, resume_session_id=action.resume_session_id,
                                 ref=ws.ref)
        # The start goes to the remote only when nothing there says this session is due: a session a plan-runner
        # job dispatched has its intent (`Dispatched`) on the remote already, and the tick finds it by that intent
        # if this job dies without a word (action_tick). A session started by hand pushes it, so it is found too.
        push_start = not ws.remote or s.state.last_dispatch < n
        try:
            s.write([started], push=push_start)
        except StateConflict:
            return superseded
    return Begun(action=action, started=started, n=n, started_at=started_at, base_sha=base_sha, work_remote_sha=work_remote_sha,
                 plan_text=plan_text, tracked=with_tracker(plan, plan_text), handoff_path=handoff_path_of(plan),
                 transcripts=ws.scratch_dir / plan.id / "transcripts")


def run_agent(s: Session, b: Begun, identity: sandbox.Identity) -> AgentRan:
    """The agent in a fresh tree of its own, as its identity; nothing it started outlives it."""
    ws, plan, action = s.ws, s.trusted, b.action
    ws.on_event("session", f"{b.n} {action.kind.value} {action.checkpoint or ''}".strip())
    shutil.rmtree(b.transcripts, ignore_errors=True)
    s.d.store.read_dir(plan.id, TRANSCRIPTS_DIR, b.transcripts)
    if identity.isolated:
        _secure_judge_repo(ws.repo)
    area = agentarea.area_for(ws.repo, plan.id)
    _agent_tree(s, identity, area, b.base_sha, b.transcripts)
    agent = plan.config.agent
    spec = BACKENDS[agent.backend]
    agent_env = backend_agent_env(ws.env, agent.backend, agent.passed_env, agent.provider)
    agent_env["HOME"] = str(area.home)
    agent_env["PATH"] = clean_path(agent_env.get("PATH", ""), also=(ws.repo,))
    # its credential files, in a folder of its user's alone (never the job's copies: agent_creds says why)
    creds = agent_creds.place(spec, agent.provider, ws.env, agent_env, area.creds, identity)
    for name in creds.drop:
        agent_env.pop(name, None)
    agent_env.update(creds.env)
    s.secrets = sorted({*s.secrets, *creds.secrets}, key=lambda v: (-len(v), v))
    request = SessionRequest(
        workdir=area.work, prompt=_prompt(s, action, b.plan_text, b.handoff_path), agent=plan.config.agent,
        env=agent_env, transcript_dir=b.transcripts, resume_session_id=action.resume_session_id,
        plan_path=area.work / plan.path, handoff_path=area.work / b.handoff_path,
        pid_file=agent_pid_file(ws, plan.id),
        on_event=lambda kind, detail: ws.on_event(kind, redact(detail, s.secrets)),  # its words may hold a key
        identity=identity, agent_state_dir=area.state, input_dir=area.inputs, credential_files=creds.files)
    control = guard.snapshot(ws.repo)
    if creds.renewal is not None:  # a fresh OIDC token for the agent's Google library, while it runs
        def fetched(token: str) -> None:
            s.secrets = sorted({*s.secrets, token}, key=lambda v: (-len(v), v))
        creds.renewal.start(identity, on_token=fetched)
    try:
        # in a room (kernel namespaces), the agent's network is the plan's allow-list and its model's route only
        with identity.network("agent", plan.config.network, model_access(spec, agent.provider, ws.env),
                              refused=s.refused["agent"]):
            signals = get_backend(plan.config.agent.backend).run(request)
    finally:
        if creds.renewal is not None:
            creds.renewal.stop()
        # nothing the agent started outlives it (invariant 2): its room's PID namespace ended with it
        agent_creds.remove(area.creds, identity)
    return AgentRan(signals=signals, area=area, agent_env=agent_env, control=control)


def import_work(s: Session, b: Begun, ran: AgentRan, identity: sandbox.Identity) -> Imported:
    """The agent's commits (and its leftovers as a WIP commit) onto the judge's work branch, forward only;
    first of all, what it may have done to git itself undone."""
    ws, plan = s.ws, s.trusted
    # First thing after the agent: undo what it may have done to git itself, before any git command of ours.
    moved = guard.restore(ran.control)
    imported = agentarea.export_work(ran.area, identity, ws.repo, plan.work_branch, b.base_sha, plan.id,
                                     ws.scratch_dir / plan.id)
    skipped = agentarea.save_state(ran.area, identity, b.transcripts / AGENT_STATE)
    skipped += keep_resumable(b.transcripts / AGENT_STATE)  # an allow-list: transcripts, read as JSON lines
    moved += _take_in(s.repo, plan.work_branch, b.base_sha, imported, judge_tree(ws, plan.id))
    for note in imported.notes:
        ws.on_event("warning", note)
    if skipped:
        ws.on_event("warning", "not kept from the agent's state: " + "; ".join(skipped[:5]))
    # This plan's own ref only: other plans' jobs write theirs meanwhile. No fetch to check the remote: the final
    # push's lease finds any move of it, and `_final_write` checks it then (one fetch on that path only).
    moved += s.d.store.restore_own(plan.id, s.version, remote=False)
    ws.on_event("agent", f"{ran.signals.exit_kind.value}, {ran.signals.total_tokens} tokens")
    return Imported(ran=ran, moved=tuple(moved))


def judge(s: Session, b: Begun, imp: Imported, identity: sandbox.Identity) -> Judged:
    """Evidence from git, the tracker and the gates re-run on a fresh checkout; the verdict computed from it."""
    ws, plan, action, ran = s.ws, s.trusted, b.action, imp.ran
    gates = gates_tree_for(ws, plan, identity, ran.area, s.refused["setup"], checks_runner=s.d.checks_runner,
                           push=_push_early(ws, plan, b.n, b.work_remote_sha))
    scene = SessionScene(repo=s.tree, plan=b.tracked, plan_text=b.plan_text, base_sha=b.base_sha,
                         handoff_path=b.handoff_path, started_at=b.started_at, session_number=b.n,
                         session_kind=action.kind.value, checkpoint=action.checkpoint)
    # in a room: nothing unless the plan lists it (the base: held by run_session)
    with identity.network("gates", plan.config.network, refused=s.refused["gates"]):
        try:
            evidence = collect_evidence(scene, ran.signals, env=ran.agent_env, observed_at=ws.clock(),
                                        cache=GateCache(ws.scratch_dir / plan.id / "gate-cache.json"),
                                        on_gate=lambda e: ws.on_event("gate", f"{e.kind} {e.gate}"),
                                        extra_tampering=imp.moved, secrets=key_like(s.secrets),
                                        unpushed_from=b.work_remote_sha, carry_from=_carry_from(s, action),
                                        judge=gates, unreached=is_unreachable(ran.signals),
                                        first_work=b.base_sha == gates.trusted)
        finally:
            gates.close()
    if gates.failures:
        evidence = evidence.model_copy(update={"gates": tuple(gates.failures) + evidence.gates})
    evidence = redact_evidence(evidence, s.secrets)  # gate output and the agent's words are kept and published
    verdict = classify(evidence)
    head = revert_rejected_flips(scene, evidence, verdict.rejected_flips)
    refused = refusals_line(s.refused)  # the session's network refusals, once (in a room)
    if refused is not None:
        ws.on_event("warning", refused)
    return Judged(scene=scene, evidence=evidence, verdict=verdict, head=head)


def decide(s: Session, b: Begun, j: Judged) -> Decided:
    """The session's record and what follows from it (the policy decides, never acts)."""
    ws, plan, action, verdict, evidence = s.ws, s.trusted, b.action, j.verdict, j.evidence
    signals = evidence.signals
    tracked = with_tracker(plan, gitwork.read_file_at(s.repo, j.head, plan.path) or b.plan_text)
    record = session_record(
        b.started, verdict, plan, backend=signals.backend,
        tokens=signals.total_tokens, cost_usd=signals.cost_usd, cost_lower_bound=signals.cost_lower_bound,
        head_sha=j.head, work_commits=len(evidence.work_commits), gates=_gate_summaries(evidence),
        hints=signals.hints, instructions=with_notes(action.instructions, s.state.notes))
    decision = decide_by_rules(verdict, fold([record], s.state), tracked)
    next_action = decision.action
    ws.on_event("outcome", f"{verdict.outcome.value}: {describe(next_action)}")
    return Decided(plan=tracked, record=record.model_copy(update={"next_action": next_action,
                                                                  "decided_by": decision.rule}),
                   next_action=next_action)


def persist(s: Session, b: Begun, j: Judged, d: Decided) -> bool:
    """One write, one atomic push: the verdict (with the intent to dispatch the next run, when that is what
    follows), the work branch and the removal of the session ref land together or not at all. Returns whether
    the dispatch intent was written with it."""
    ws, plan = s.ws, s.trusted
    s.plan = d.plan
    intent = _dispatch_intent(s, d.next_action)
    _final_write(s, b.n, b.base_sha, [d.record, *intent], files={EVIDENCE_FILE: j.evidence.model_dump_json().encode()},
                 dirs={TRANSCRIPTS_DIR: b.transcripts},
                 also_push=_work_updates(ws, plan) if ws.remote and not j.evidence.leaked_secrets else ())
    return bool(intent)


def finish(s: Session, b: Begun, j: Judged, d: Decided, intent_recorded: bool) -> SessionResult:
    """Apply the recorded next action, and say what the session was."""
    verdict, evidence = j.verdict, j.evidence
    result = apply_action(s, d.next_action, evidence, verdict, dispatch_recorded=intent_recorded)
    return SessionResult(result.status if result.status != "waiting" else "ran", s.plan, s.state, result.action,
                         result.message, verdict=verdict, evidence=evidence, record=d.record,
                         report_text=result.report_text, url=result.url,
                         report_fn=lambda: s.report(f"session {b.n}: {verdict.outcome.value}", result.action,
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
        moved = s.d.store.restore_own(plan.id, s.version, remote=True)
        if moved:
            ws.on_event("warning", "; ".join(moved))
            try:
                s.write(entries, **kw)
                return
            except StateConflict:
                pass
        head = gitwork.ref_sha(s.repo, f"refs/heads/{plan.work_branch}")
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
        fault_point(ws.env, "before-park")
        result = s.apply_park(action, evidence, verdict)
        fault_point(ws.env, "after-park")
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
    fault_point(s.ws.env, "before-dispatch")
    if not recorded:
        s.write([Dispatched(at=s.ws.clock(), for_session=n, key=key)])
    fault_point(s.ws.env, "dispatch-recorded")
    try:
        run_id = s.d.dispatcher.dispatch_next(s.trusted.path, key, ref=s.state.ref)
    except Refused as err:
        return park_refused_dispatch(s, err)
    fault_point(s.ws.env, "after-dispatch")
    record_dispatched_run(s, n, key, run_id)
    return SessionResult("ran", s.plan, s.state, action, describe(action))


def record_dispatched_run(s: Session, n: int, key: str, run_id: int | None) -> bool:
    """The run GitHub started for the dispatch, in the ledger: a `workflow_run` event for that run that did not
    succeed then names this plan (mode reconcile, without waiting out a deadline). Best effort: without it the
    clock's deadline finds the run (the session enables the clock then: action.py)."""
    if run_id is None:
        return False
    try:
        s.write([Dispatched(at=s.ws.clock(), for_session=n, key=key, confirmed=True, run_id=run_id)])
    except PlanRunnerError:  # another job moved the plan (the dispatched run itself), or the push failed
        return False
    return True


def park_refused_dispatch(s: Session, err: Refused) -> SessionResult:
    """GitHub refused the dispatch for a reason only a person can change (the token lacks `actions: write`, the
    workflow has no `workflow_dispatch` trigger): park once with the fix. The park voids the dispatch intent,
    so no tick redoes it; a maintainer's `/plan-runner resume` dispatches again."""
    return s.apply_park(Park(reason=f"the next run could not be started: {err.what}",
                             details=(f"why: {err.why}", *err.fix.splitlines())))
