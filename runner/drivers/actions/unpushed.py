"""The agent's commits when the remote refused every token plan-runner had (runner.drivers.actions.push_auth: the
App's token, minted again once, then the job's GITHUB_TOKEN): without this they would live only in the job's
checkout, which goes with the runner.

They are written as a git bundle of the work branch's commits the remote has not got (`git bundle create <file>
refs/heads/<branch> --not --remotes=origin`), which the action's step *Keep the unpushed commits* uploads as an
artifact of the run (actions/upload-artifact; a composite step with a status function, `!cancelled()`, runs after a
failed step: GitHub's "Metadata syntax", `runs.steps[*].if`). The job's error says what was refused and why, and
how to fix it: the token, then the commands that fetch the artifact and push its commits by hand to the session's
own ref, `refs/plan-runner/sessions/<plan>/<n>`, the ref the session's reconciliation names (TimedOut), where a
cancelled job's salvage keeps an agent's work too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.adapters.git.branches import PUSH_TOKEN_FIX, PushRefused
from runner.adapters.git.invoke import run_git
from runner.drivers.actions.env import REMOTE
from runner.drivers.session.cut_short import session_ref


@dataclass(frozen=True)
class Unpushed:
    file: str  # the bundle, for the upload step
    artifact: str  # the artifact's name: plan-runner-<plan>-session-<n>-unpushed
    commits: int


class RefusedKept(PushRefused):
    """A refused push whose commits were kept as a bundle (`unpushed`), its fix naming the artifact."""

    def __init__(self, what: str, why: str, fix: str, unpushed: Unpushed) -> None:
        super().__init__(what=what, why=why, fix=fix)
        self.unpushed = unpushed


def artifact_name(plan_id: str, n: int) -> str:
    return f"plan-runner-{plan_id}-session-{n}-unpushed"


def bundle_unpushed(repo: Path, env: Mapping[str, str], plan_id: str, branch: str, n: int) -> Unpushed | None:
    """The work branch's commits `origin` has not got, as a bundle under RUNNER_TEMP; None when there are none (or
    no RUNNER_TEMP, or git could not write it)."""
    temp = env.get("RUNNER_TEMP", "")
    if not temp:
        return None
    ref = f"refs/heads/{branch}"
    try:
        count = int(run_git(repo, "rev-list", "--count", ref, "--not", f"--remotes={REMOTE}").decode().strip() or 0)
        if count == 0:
            return None
        name = artifact_name(plan_id, n)
        folder = Path(temp) / "plan-runner-unpushed"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.bundle"
        run_git(repo, "bundle", "create", "--quiet", str(path), ref, "--not", f"--remotes={REMOTE}")
        return Unpushed(str(path), name, count)
    except Exception:  # noqa: BLE001 - git could not count or write them: the error stands without the bundle
        return None


def keep_unpushed(err: PushRefused, repo: Path, env: Mapping[str, str], plan_id: str, branch: str,
                  n: int) -> PushRefused:
    """`err` with the bundle made, and its artifact and the commands that push it by hand in its fix (a RefusedKept);
    `err` as it is when there is nothing to keep."""
    kept = bundle_unpushed(repo, env, plan_id, branch, n)
    if kept is None:
        return err
    run, repository = env.get("GITHUB_RUN_ID", "<run id>"), env.get("GITHUB_REPOSITORY", "<owner>/<repo>")
    local = f"{branch}-session-{n}"
    fix = (f"{PUSH_TOKEN_FIX[0].upper()}{PUSH_TOKEN_FIX[1:]}.\n"
           f"The agent's {kept.commits} commit{'s' if kept.commits != 1 else ''} on {branch} that the remote has not "
           f"got are kept in this run's artifact {kept.artifact} (a git bundle; artifacts are kept for the "
           "repository's retention, 90 days by default). To keep them on the remote, in a clone of the repository:\n"
           f"  gh run download {run} --repo {repository} --name {kept.artifact}\n"
           f"  git fetch {kept.artifact}.bundle {'refs/heads/' + branch}:refs/heads/{local}\n"
           f"  git push origin refs/heads/{local}:{session_ref(plan_id, n)}\n"
           f"(the ref the session's reconciliation names; or push {local} as a branch of its own to review it).")
    return RefusedKept(what=err.what, why=err.why, fix=fix, unpushed=kept)
