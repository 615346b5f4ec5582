"""collect_evidence: read the world after a session into an `Evidence` record.

Also the two repairs that must happen before anything is judged or pushed:
uncommitted leftovers become a marked WIP commit (never lost, never progress),
and agent edits of protected configuration are reverted (and reported).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from runner.adapters.git import work as gitwork
from runner.core.bounds import bound_evidence, plan_too_big
from runner.core.evidence import CommitInfo, Evidence, Flip, GateResult, SessionSignals
from runner.adapters.judge.gates import ChecksRunner, GateCache, GateEvent, run_gates
from runner.adapters.judge.setup import SETUP_FIX
from runner.core.plan import GateConfig, Plan
from runner.adapters.sandbox.identity import Identity
from runner.core.planfile import diff_tracker, protected_changes, restore_protected, set_checkpoint_state, with_tracker

PROTECTED_PATHS = [".github/workflows/", ".github/actions/", "action.yml"]
# The agent CLIs' own configuration in the project (settings, hooks, MCP servers): a later session must not start
# with what an earlier one wrote there (the CLIs are also started to ignore them: runner.backends.claude_code, codex).
AGENT_CONFIG_PATHS = [".claude/", ".mcp.json", ".codex/"]
# What looks like a test file in the common layouts; deleting one can turn a red gate green.
_TEST_FILE = re.compile(r"(^|/)(tests?|__tests__|specs?)/|(^|/)test_[^/]*$|_test\.[^/]+$|\.(test|spec)\.[^/]+$"
                        r"|(^|/)[^/]*Tests?\.(java|kt|cs|swift)$")


@dataclass(frozen=True)
class SessionScene:
    """What was true when the session started."""

    repo: Path | gitwork.Repository  # the judge's work tree: the session's reads of it (a path in tests)
    plan: Plan  # configuration from the base commit, tracker as of base_sha
    plan_text: str  # the plan file at base_sha
    base_sha: str
    handoff_path: str
    started_at: datetime
    session_number: int
    session_kind: str
    checkpoint: str | None


class Judge(Protocol):
    """The port through which collect_evidence judges a session's commit beyond git (implemented once:
    runner.adapters.judge.base.GatesTree): the tree `verify:` and the gates run on (plan-runner's checkout of the
    commit, set up), who runs them (`identity`) with which environment (`env`), remote `checks:`, the gates on the
    base commit, and the early push the remote checks judge."""

    @property
    def identity(self) -> Identity | None: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def checks_runner(self) -> ChecksRunner | None: ...

    def tree(self, sha: str) -> Path: ...

    def on_base(self, gates: Sequence[GateConfig]) -> tuple[tuple[GateResult, ...], str]: ...

    def push_early(self, head: str) -> None: ...


def handoff_path_of(plan: Plan) -> str:
    if plan.config.handoff:
        return plan.config.handoff
    stem = plan.path[:-3] if plan.path.endswith(".md") else plan.path
    return f"{stem}.handoff.md"


def _repair_tampering(scene: SessionScene, head: str) -> tuple[list[str], str]:
    """Revert protected edits on the work branch; returns (what was changed, new head)."""
    repo, path = scene.repo, scene.plan.path
    found: list[str] = []
    changes: dict[str, str | None] = {}
    head_text = gitwork.read_file_at(repo, head, path)
    if head_text is not None and gitwork.is_symlink_at(repo, head, path):
        found.append(f"the plan file {path} was replaced by a symbolic link")
        changes[path] = scene.plan_text
    elif head_text is None:
        found.append(f"the plan file {path} was deleted")
        changes[path] = scene.plan_text
    elif too_big := plan_too_big(scene.plan_text, head_text):  # read no further: parsing it is the attack
        found.append(f"{path}: {too_big}")
        changes[path] = scene.plan_text
    else:
        problems = protected_changes(scene.plan_text, head_text, path)
        if problems:
            found += [f"{path}: {p}" for p in problems]
            changes[path] = restore_protected(scene.plan_text, head_text)
    # Files, not patterns: a pattern such as ".github/workflows/" names a folder, which cannot be restored.
    for changed in gitwork.files_changed(repo, scene.base_sha, head, PROTECTED_PATHS):
        found.append(f"{gitwork.display_path(changed)} (workflow/action files are not the agent's to change)")
        changes[changed] = gitwork.read_file_at(repo, scene.base_sha, changed)
    agent_config = AGENT_CONFIG_PATHS if scene.plan.config.agent_config_protected else []
    for changed in gitwork.files_changed(repo, scene.base_sha, head, agent_config):
        if changed not in changes:
            found.append(f"{gitwork.display_path(changed)} (the agent CLIs' own settings are plan-runner's to set)")
            changes[changed] = gitwork.read_file_at(repo, scene.base_sha, changed)
    for changed in gitwork.files_changed(repo, scene.base_sha, head, list(scene.plan.config.protected)):
        if changed in changes:
            continue
        found.append(f"{gitwork.display_path(changed)} (listed under `protected:` in the plan)")
        changes[changed] = gitwork.read_file_at(repo, scene.base_sha, changed)
    if not changes:
        return found, head
    new_head = gitwork.commit_files(repo, changes, "plan-runner: revert protected changes made by the agent")
    return found, new_head


def _flips(scene: SessionScene, agent_head_text: str | None, final_text: str) -> tuple[Flip, ...]:
    after = with_tracker(scene.plan, final_text)
    if agent_head_text is not None and plan_too_big(scene.plan_text, agent_head_text):
        agent_head_text = None  # not read (see _repair_tampering): none of its ticks is in the session's commits
    by_agent = with_tracker(scene.plan, agent_head_text) if agent_head_text is not None else None
    flips = []
    for f in diff_tracker(scene.plan, after):
        agent_cp = by_agent.checkpoint(f.checkpoint_id) if by_agent else None
        in_commits = agent_cp is not None and agent_cp.state == f.after
        flips.append(f.model_copy(update={"in_session_commits": in_commits}))
    return tuple(flips)


def _verify(flips: tuple[Flip, ...], plan: Plan, workdir: Path, env: Mapping[str, str],
            identity: Identity | None) -> tuple[Flip, ...]:
    out = []
    for f in flips:
        cp = plan.checkpoint(f.checkpoint_id)
        if cp is not None and cp.verify and f.after is not None and f.after.value == "DONE":
            gate = GateConfig(name=f"verify {cp.id}", run=cp.verify)
            (result,) = run_gates([gate], workdir=workdir, env=env, identity=identity)
            f = f.model_copy(update={"verify_passed": result.passed, "verify_output": result.output_tail[-2000:]})
        out.append(f)
    return tuple(out)


def cannot_start(g: GateResult) -> bool:
    """A command gate that did not get to run its program: not found (127), not executable (126), no shell."""
    return (g.kind == "command" and not g.passed and not g.timed_out
            and (g.exit_code in (126, 127) or (g.error or "").startswith("could not start")))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _set_up_problems(gates: tuple[GateResult, ...], plan: Plan,
                     on_base: Callable[[Sequence[GateConfig]], tuple[tuple[GateResult, ...], str]] | None,
                     first_work: bool = False) -> tuple[GateResult, ...]:
    """Required gates that cannot start are run once on a fresh, set-up checkout of the base commit: one that
    cannot start there either is a set-up problem (blamed on nobody); one that starts there the agent broke.
    Before the agent's first work (`first_work`: the session began on the maintainer's base commit), any required
    gate red is run there too: red on the base commit as well, whatever its exit code, it is marked `red_on_base`
    (a failing test the plan asks to fix looks the same as a missing test runner: the agent is not blamed, rule 8,
    and the same failure again is the circuit breaker's, with the base's failing line in the record)."""
    suspects = {g.name for g in gates if g.required and cannot_start(g)}
    if first_work:
        suspects |= {g.name for g in gates if g.required and not g.passed and not g.needs_human
                     and not g.timed_out and g.kind == "command"}
    if not suspects or on_base is None:
        return gates
    base_results, base_sha = on_base([c for c in plan.config.gates if c.name in suspects])
    on_base_too = {r.name: r for r in base_results if cannot_start(r)}
    red_on_base = {r.name: r for r in base_results if first_work and not r.passed and r.name not in on_base_too}
    out = []
    for g in gates:
        if g.name in red_on_base:
            base = red_on_base[g.name]
            seen = _last_line(base.output_tail) or base.error or ""
            g = g.model_copy(update={"red_on_base": (
                f"it was red on a fresh checkout of the base commit {base_sha[:12]} too (exit {base.exit_code}"
                + (f": {seen}" if seen else "") + "), before any work of the agent: either the work the plan asks "
                "for, or a set-up problem; if the gate needs something `setup:` does not install, fix: " + SETUP_FIX)})
        elif g.name in on_base_too:
            seen = _last_line(g.output_tail) or g.error or ""
            why = "exit 126: not executable" if g.exit_code == 126 else (
                "exit 127: command not found" if g.exit_code == 127 else (g.error or "it could not start"))
            g = g.model_copy(update={"setup_problem": (
                f"the gate cannot start on a fresh checkout of the base commit {base_sha[:12]} either ({why}"
                + (f": {seen}" if seen else "") + "), so it fails whatever the agent does; fix: " + SETUP_FIX)})
        out.append(g)
    return tuple(out)


def _discard_gate_byproducts(repo: Path | gitwork.Repository) -> None:
    """The tree was clean (leftovers committed) before the gates ran in it: whatever they changed or
    created (caches, coverage files, a formatter's rewrite) is theirs, not the agent's work."""
    gitwork.run_git(repo, "checkout", "--", ".")
    gitwork.run_git(repo, "clean", "-fdq")


def collect_evidence(scene: SessionScene, signals: SessionSignals, *, env: Mapping[str, str],
                     observed_at: datetime, cache: GateCache | None = None,
                     on_gate: Callable[[GateEvent], None] | None = None,
                     extra_tampering: tuple[str, ...] = (),
                     secrets: Sequence[str] = (), unpushed_from: str | None = None,
                     carry_from: str | None = None, judge: Judge | None = None, unreached: bool = False,
                     first_work: bool = False) -> Evidence:
    """Commit leftovers as WIP, revert tampering, then gather commits, flips, gates and the handoff.

    `secrets` are values that must never leave the machine in a commit: everything the work branch
    would publish (from `unpushed_from`, the remote's head of it, else the session base) is searched
    for them first, and `before_gates` (the early push) is skipped when one is found. `carry_from`
    is where the interrupted sessions before this one began: their commits are carried into the
    evidence for the verdict to judge.

    `judge.tree(sha)` is the tree of the judged commit, set up, that `verify:` and the gates run on (as
    `judge.identity`, with `judge.env`), whatever the session did (a leaked secret included); without a judge they
    run in `scene.repo` with `env` (tests of this function). `judge.on_base(gates)` runs gates on the base commit,
    set up (results, its sha): a required gate that cannot start there either is a set-up problem; one red there
    too when `first_work` (the session began on the base commit: the agent has done nothing yet) is marked.
    `judge.push_early(head)` pushes the commit remote `checks:` judge, before the gates.

    `unreached`: the agent never reached its model (an unreachable endpoint): when it also left nothing,
    there is nothing to judge, so no checkout, no `setup:`, no `verify:` and no gates."""
    repo, path = scene.repo, scene.plan.path
    agent_head = gitwork.head_sha(repo)
    agent_text = gitwork.read_file_at(repo, agent_head, path)
    if not gitwork.is_ancestor(repo, scene.base_sha, agent_head):
        extra_tampering += (f"the work branch was rewritten: the session base {scene.base_sha[:12]} "
                            "is no longer in its history",)
    if judge is None:  # the agent worked in `repo` itself (tests of this function); a session's judge tree
        gitwork.commit_leftovers(repo)  # holds no files (gitwork.attach_tree): the agent's work came in as commits
    head = gitwork.head_sha(repo)
    handoff = gitwork.read_file_at(repo, head, scene.handoff_path)
    if handoff == gitwork.read_file_at(repo, scene.base_sha, scene.handoff_path):
        handoff = None  # an earlier session's handoff, already read; only this session's words count
    tampering, head = _repair_tampering(scene, head)
    final_text = gitwork.read_file_at(repo, head, path) or scene.plan_text
    gate_env = env if judge is None else judge.env
    identity = None if judge is None else judge.identity
    flips = _flips(scene, agent_text, final_text)
    since = unpushed_from or scene.base_sha
    # Everything that is pushed: added lines, file names, and the commits themselves (messages, identities).
    leaked = tuple(gitwork.paths_adding(repo, since, head, secrets)
                   + gitwork.commits_carrying(repo, since, head, secrets)) if secrets else ()
    idle = unreached and head == scene.base_sha
    workdir = judge.tree(head) if judge is not None and not idle else Path(repo)
    flips = flips if idle else _verify(flips, scene.plan, workdir, gate_env, identity)
    commits = gitwork.collect_commits(repo, scene.base_sha, head, {path, scene.handoff_path})
    carried: tuple[CommitInfo, ...] = ()
    if carry_from and carry_from != scene.base_sha and gitwork.is_ancestor(repo, carry_from, scene.base_sha):
        carried = gitwork.collect_commits(repo, carry_from, scene.base_sha, {path, scene.handoff_path})
    deleted_tests = tuple(gitwork.display_path(p) for p in gitwork.deleted_files(repo, scene.base_sha, head)
                          if _TEST_FILE.search(p))
    if judge is not None and not leaked:
        judge.push_early(head)  # remote `checks:` gates judge the pushed commit
    # A leaked secret decides the outcome (row 1) and the commit is not pushed, so remote `checks:`
    # would wait for a commit GitHub never sees: the gates are not run.
    gates: tuple[GateResult, ...] = () if leaked or idle else run_gates(
        scene.plan.config.gates, workdir=workdir, env=gate_env, tree_hash=gitwork.tree_hash(repo, head),
        cache=cache, on_event=on_gate, checks_runner=None if judge is None else judge.checks_runner,
        identity=identity)
    gates = _set_up_problems(gates, scene.plan, None if judge is None else judge.on_base, first_work)
    if judge is None:  # the gates ran in `repo` (a session's judge tree has no files: nothing to discard there)
        _discard_gate_byproducts(repo)
    return bound_evidence(Evidence(
        plan_id=scene.plan.id, session_number=scene.session_number, session_kind=scene.session_kind,
        started_at=scene.started_at, observed_at=observed_at, base_sha=scene.base_sha, head_sha=head,
        commits=commits, flips=flips, tampering=tuple(extra_tampering) + tuple(tampering), gates=gates,
        deleted_tests=deleted_tests, leaked_secrets=leaked, carried_commits=carried,
        signals=signals, handoff=handoff, next_checkpoint=scene.checkpoint,
        token_budget=scene.plan.config.agent.session_tokens,
    ))


def revert_rejected_flips(scene: SessionScene, evidence: Evidence, rejected: tuple[str, ...]) -> str:
    """Put rejected flips back to their state at the session base; returns the head sha."""
    if not rejected:
        return evidence.head_sha
    text = gitwork.read_file_at(scene.repo, evidence.head_sha, scene.plan.path) or scene.plan_text
    ids = {r.split(":", 1)[0] for r in rejected}
    for f in evidence.flips:
        if f.checkpoint_id in ids and f.before is not None:
            text = set_checkpoint_state(text, f.checkpoint_id, f.before)
    return gitwork.commit_files(scene.repo, {scene.plan.path: text},
                                "plan-runner: revert checkpoint claims the evidence does not support\n\n"
                                + "\n".join(rejected))
