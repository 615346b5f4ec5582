"""Up-front check of the permissions the job's GITHUB_TOKEN was given, before anything is recorded.

GitHub offers no endpoint that lists a GITHUB_TOKEN's permissions (it is an app installation token; GET
/repos/{owner}/{repo} reports the *actor's* role in `permissions`, admin/push/pull, not the token's). What
decides them is the workflow file: the job's `permissions:` block, else the workflow's top-level one, else
the repository's default ("Workflow permissions" setting, read-only for repositories created since
February 2023). GitHub's documentation ("Controlling permissions for GITHUB_TOKEN"): "If you specify the
access for any of these permissions, all of those that are not specified are set to none", and a job's
block replaces the workflow's. The runner tells the job which workflow file runs (GITHUB_WORKFLOW_REF) and
which job (GITHUB_JOB), and the job checked the file out: so plan-runner reads the block the token was made
from and compares it with what the mode needs, failing with what/why/fix before a session is recorded.

When the block cannot be read (no checkout of the workflow, no block at all, a reusable workflow's job),
nothing is claimed: a warning says so, and a 403 later names the permission GitHub asked for
(`X-Accepted-GitHub-Permissions`, runner/adapters/github/api.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from runner.core.errors import PlanRunnerError
from runner.core.plan import Plan

# What each mode does with the token (docs/github-actions.md, "Permissions and tokens").
NEEDED: dict[str, dict[str, str]] = {
    "session": {"contents": "write", "issues": "write", "pull-requests": "write", "actions": "write"},
    "tick": {"contents": "write", "actions": "write"},
    "reply": {"contents": "write", "issues": "write", "actions": "write"},
    "reconcile": {"contents": "write", "actions": "write"},
}
WHY = {
    "contents": "push the work branch and plan-runner's state refs",
    "issues": "open the park issue, react to and answer replies",
    "pull-requests": "open the pull request when the plan is finished",
    "actions": "dispatch the next session of this workflow (POST .../actions/workflows/{id}/dispatches)",
    "checks": "read the check runs a `checks:` gate waits for",
    "statuses": "read the commit statuses a `checks:` gate waits for",
}
CHECKS_GATE_NEEDS = {"checks": "read", "statuses": "read"}
_LEVEL = {"none": 0, "read": 1, "write": 2}
# Set by action.yml: "true" when the `github-token` input is the job's own token (the default).
JOB_TOKEN_FLAG = "PLAN_RUNNER_TOKEN_IS_JOB_TOKEN"


def needed(mode: str, plan: Plan | None = None) -> dict[str, str]:
    want = dict(NEEDED.get(mode, {}))
    if plan is not None and any(g.checks is not None for g in plan.config.gates):
        want.update(CHECKS_GATE_NEEDS)
    return want


def granted_by(block: object) -> dict[str, str] | None:
    """The permissions a `permissions:` value grants, as GitHub reads it; None when it is not a valid block."""
    if block == "read-all":
        return {name: "read" for name in [*WHY, "metadata"]}
    if block == "write-all":
        return {name: "write" for name in [*WHY, "metadata"]}
    if isinstance(block, dict) and all(isinstance(k, str) and v in _LEVEL for k, v in block.items()):
        return {k: str(v) for k, v in block.items()}
    return None


def job_block(workflow: object, job: str) -> tuple[object, str] | None:
    """(the `permissions:` value that applies to `job`, where it was found), or None when neither the job
    nor the workflow sets one (the repository's default applies)."""
    if not isinstance(workflow, dict):
        return None
    jobs = workflow.get("jobs")
    spec = jobs.get(job) if isinstance(jobs, dict) else None
    if isinstance(spec, dict) and "permissions" in spec:
        return spec["permissions"], f"jobs.{job}.permissions"
    if "permissions" in workflow:
        return workflow["permissions"], "the workflow's top-level permissions"
    return None


def missing(want: Mapping[str, str], granted: Mapping[str, str]) -> dict[str, str]:
    return {name: level for name, level in want.items() if _LEVEL[granted.get(name, "none")] < _LEVEL[level]}


def _fix(file: str, job: str, want: Mapping[str, str], granted: Mapping[str, str]) -> str:
    merged = {k: v for k, v in granted.items() if v != "none"}
    for name, level in want.items():
        merged[name] = max(level, merged.get(name, "none"), key=_LEVEL.__getitem__)
    lines = [f"        {name}: {level}" + (f"  # {WHY[name]}" if name in want else "")
             for name, level in sorted(merged.items())]
    return (f"in {file}, give the job `{job}` these permissions (GitHub sets every one a block leaves out "
            f"to none):\n  jobs:\n    {job}:\n      permissions:\n" + "\n".join(lines)
            + "\nor pass a GitHub App or fine-grained token with these permissions as `github-token`")


def check_job_permissions(env: Mapping[str, str], mode: str, plan: Plan | None = None,
                          warn: Callable[[str], None] = lambda text: None) -> None:
    """Raise PlanRunnerError when the running job's `permissions:` lack what `mode` needs."""
    if env.get(JOB_TOKEN_FLAG, "true").strip().lower() != "true":
        return  # a token of the user's own (an app or a PAT): its permissions are not in the workflow file
    job = env.get("GITHUB_JOB", "")
    ref = env.get("GITHUB_WORKFLOW_REF", "")
    repo_path = env.get("GITHUB_REPOSITORY", "")
    if not job or "/.github/workflows/" not in ref:
        return  # not in a GitHub Actions job (tests, a local run): nothing to read
    file = ".github/workflows/" + ref.split("/.github/workflows/", 1)[1].split("@", 1)[0]
    if repo_path and not ref.startswith(repo_path + "/"):
        warn(f"permissions: the workflow {ref} is not in {repo_path} (a reusable workflow?); its permissions "
             "were not checked")
        return
    path = Path(env.get("GITHUB_WORKSPACE") or ".") / file
    try:
        workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        warn(f"permissions: could not read {file} from the checkout ({type(exc).__name__}); the job's token "
             "permissions were not checked")
        return
    found = job_block(workflow, job)
    want = needed(mode, plan)
    if found is None:
        warn(f"permissions: {file} sets no `permissions:` for the job `{job}`, so the repository's default "
             "applies (read-only unless Settings > Actions > General > Workflow permissions says read and write); "
             "plan-runner needs " + ", ".join(f"{k}: {v}" for k, v in want.items()))
        return
    block, where = found
    granted = granted_by(block)
    if granted is None:
        raise PlanRunnerError(
            what=f"{where} in {file} is not a permissions block GitHub accepts",
            why="it must be read-all, write-all, {} or a mapping of permission: read | write | none",
            fix=_fix(file, job, want, {}))
    lack = missing(want, granted)
    if lack:
        raise PlanRunnerError(
            what=f"the job `{job}` in {file} does not give its token "
                 + ", ".join(f"`{name}: {level}`" for name, level in lack.items()),
            why=f"{where} grants {_describe(granted)}; plan-runner's {mode} job needs "
                + "; ".join(f"{name}: {level} to {WHY[name]}" for name, level in lack.items())
                + ". Nothing was recorded",
            fix=_fix(file, job, want, granted))


def _describe(granted: Mapping[str, str]) -> str:
    given = [f"{k}: {v}" for k, v in sorted(granted.items()) if v != "none"]
    return ", ".join(given) if given else "nothing"
