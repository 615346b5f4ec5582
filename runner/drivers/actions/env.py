"""The Actions job's surroundings, shared by every mode: the checkout, the plans in it, the remote, the
work branch, and what a mode reports (runner.drivers.actions.main turns it into outputs, a summary and annotations)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from runner.adapters.git import work as gitwork
from runner.core.errors import PlanRunnerError
from runner.adapters.github.events import GitHubContext, WorkflowDispatch
from runner.drivers.session import Workspace

REMOTE = "origin"
PLANS_DIR = "plans"


@dataclass
class ModeResult:
    """What a mode reports; `run_action` turns it into outputs, a summary and annotations."""

    outcome: str
    next_action: str = ""
    issue_url: str = ""
    pull_request_url: str = ""
    record: str = ""  # the session's record (JSON), when the job recorded one
    record_name: str = ""  # its artifact's name: plan-runner-<plan>-session-<n>
    unpushed_file: str = ""  # a bundle of the commits the remote refused (runner.drivers.actions.unpushed)
    unpushed_name: str = ""  # its artifact's name: plan-runner-<plan>-session-<n>-unpushed
    summary: str = ""
    annotations: list[tuple[str, str, str]] = field(default_factory=list)  # (level, message, title)
    exit_code: int = 0
    detail: str = ""  # an error's what, why and fix, for the job's log (the annotation holds the what alone)


# --- the environment --------------------------------------------------------------------------


def workspace_root(env: Mapping[str, str]) -> Path:
    root = env.get("GITHUB_WORKSPACE") or ""
    if not root or not Path(root, ".git").exists():
        raise PlanRunnerError(
            what=f"GITHUB_WORKSPACE is {root!r}, not a git checkout",
            why="plan-runner works on the repository checked out in the job",
            fix="add `- uses: actions/checkout@<sha>` with `fetch-depth: 0` and `persist-credentials: false` "
                "before the plan-runner step")
    return Path(root)


def normalise_plan_path(raw: str) -> str:
    """A repository-relative POSIX path, or a PlanRunnerError for an absolute or escaping one."""
    text = raw.strip().replace("\\", "/")
    path = PurePosixPath(text)
    if not text or path.is_absolute() or ".." in path.parts:
        raise PlanRunnerError(
            what=f"the plan input {raw!r} is not a path inside the repository",
            why="plans live in the repository the job checked out; absolute paths and `..` are refused",
            fix="pass a repository-relative path such as `plans/add-auth.md`")
    return path.as_posix()


def plan_input(env: Mapping[str, str], ctx: GitHubContext) -> str:
    raw = env.get("PLAN_RUNNER_PLAN", "")
    if not raw.strip() and isinstance(ctx.event, WorkflowDispatch):
        raw = ctx.event.inputs.get("plan", "")
    if not raw.strip():
        raise PlanRunnerError(
            what="no plan given",
            why="`mode: session` runs one plan: the `plan` input of the action (or of workflow_dispatch) is empty",
            fix="pass `plan: ${{ inputs.plan }}` to the action and start the workflow with a plan path")
    return normalise_plan_path(raw)


def github_workspace(env: Mapping[str, str], plan_path: str) -> Workspace:
    repo = workspace_root(env)
    if not (repo / plan_path).is_file():
        raise PlanRunnerError(
            what=f"no plan file {plan_path} in the checked-out repository",
            why=f"{repo / plan_path} does not exist on the ref this workflow runs on",
            fix="commit the plan on the default branch, or pass the right path as the `plan` input")
    return Workspace(repo=repo, plan_path=plan_path, env=dict(env), remote=REMOTE,
                     job=env.get("GITHUB_RUN_ID", "") or "actions", actions=True, ref=env.get("GITHUB_REF_NAME", ""))


def plan_files(repo: Path) -> list[str]:
    folder = repo / PLANS_DIR
    return sorted(p.relative_to(repo).as_posix() for p in folder.glob("*.md")
                  if p.is_file() and not p.name.endswith(".handoff.md")) if folder.is_dir() else []


def fetch_work_branch(ws: Workspace, branch: str) -> None:
    """Bring the remote's work branch in, so checkpoint states are read from the work, not the base (a branch
    never pushed is no error: the tracker then is the base's)."""
    gitwork.fetch_branch(ws.repo, REMOTE, branch)


def plan_on_its_branch(repo: Path, store, plan_id: str) -> tuple[str, str] | None:
    """(path, branch) of a plan that has state but no file on the checked-out branch: a plan started with *Run
    workflow* on another branch (its sessions run there, the ledger's `ref`), while ticks, reconciles and replies
    run on the default branch. The branch is fetched and its commit named the plan's base (Workspace.base), so
    the plan is read from that branch's commit, never from a work tree. None: no such branch, or no such plan on
    it."""
    from runner.core.planfile import plan_id_from_path
    from runner.core.policy import folded

    entries, _ = store.read(plan_id)
    branch = folded(entries).ref if entries else ""
    if not branch or branch.startswith("-") or not _branch_name(repo, branch):
        return None
    sha = gitwork.fetch_branch(repo, REMOTE, branch)
    if sha is None:
        return None
    listed = gitwork.run_git(repo, "ls-tree", "--name-only", "-z", sha, f"{PLANS_DIR}/").decode("utf-8", "replace")
    for path in listed.split("\0"):
        if path.endswith(".md") and not path.endswith(".handoff.md") and plan_id_from_path(path) == plan_id:
            return path, branch
    return None


def plan_workspace(repo: Path, env: Mapping[str, str], plan_id: str, store) -> Workspace | None:
    """The Workspace of a plan with state for a job on the default branch (a tick, a reconcile, a reply): its file
    on the checked-out branch, else on the branch its sessions run on (`plan_on_its_branch`). None: neither."""
    job = env.get("GITHUB_RUN_ID", "") or "actions"
    for path in plan_files(repo):
        from runner.core.planfile import plan_id_from_path

        if plan_id_from_path(path) == plan_id:
            return Workspace(repo=repo, plan_path=path, env=dict(env), remote=REMOTE, job=job)
    found = plan_on_its_branch(repo, store, plan_id)
    if found is None:
        return None
    return Workspace(repo=repo, plan_path=found[0], env=dict(env), remote=REMOTE, job=job, base=found[1])


def _branch_name(repo: Path, name: str) -> bool:
    """Whether `name` (from the ledger) is a valid branch name, as git says (`check-ref-format --branch`)."""
    try:
        gitwork.run_git(repo, "check-ref-format", "--branch", name)
    except gitwork.GitCommandError:
        return False
    return True
