"""The action, the project's workflows and `plan-runner init`'s output pass actionlint and zizmor."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from runner.adapters.init import write_init
from runner.adapters.source import Source

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PINNED = "octo-org/plan-runner@0123456789abcdef0123456789abcdef01234567"


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: `pip install -e '.[test]'` brings it (scripts/test does)"
    return path


def workflows() -> list[Path]:
    return sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.fixture(scope="module")
def init_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("init")
    repository, sha = PINNED.split("@")
    write_init(repo, source=Source(repository, sha, "0.1.0", "recorded at build time"))  # init's default path
    assert f"uses: {PINNED} # v0.1.0" in (repo / ".github/workflows/plan-runner.yml").read_text()
    return repo


def actionlint(cwd: Path, files: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([tool("actionlint"), "-no-color", *map(str, files)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def zizmor(files: list[Path]) -> tuple[int, list]:
    proc = subprocess.run([tool("zizmor"), "--offline", "--no-progress", "--format", "json", *map(str, files)],
                          capture_output=True, text=True, timeout=120, env={"PATH": str(Path(tool("zizmor")).parent) + ":/usr/bin:/bin"})
    return proc.returncode, json.loads(proc.stdout or "[]")


def test_project_workflows_pass_actionlint():
    """ci.yml and plan-runner.yml have no actionlint finding (the local action's inputs are checked too)."""
    proc = actionlint(ROOT, workflows())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {p.name for p in workflows()} >= {"ci.yml", "plan-runner.yml"}


INIT_FILES = ("plan-runner.yml", "plan-runner-clock.yml", "plan-runner-reconcile.yml")


def test_init_output_passes_actionlint(init_repo):
    """The workflows `plan-runner init` writes have no actionlint finding."""
    proc = actionlint(init_repo, [init_repo / ".github/workflows" / name for name in INIT_FILES])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_finds_nothing_offline_and_deterministically(init_repo):
    """zizmor (offline) reports no finding on action.yml, the workflows and init's output, twice the same way."""
    files = [ROOT / "action.yml", *workflows(), *(init_repo / ".github/workflows" / name for name in INIT_FILES)]
    first = zizmor(files)
    assert first == (0, []), json.dumps(first[1], indent=1)[:4000]
    assert zizmor(files) == first


def test_zizmor_catches_an_injection_so_the_lint_test_can_fail(tmp_path):
    """The same zizmor run flags `${{ }}` inside `run:` (the rule the action keeps)."""
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\non: issue_comment\npermissions: {}\njobs:\n  x:\n    name: x\n    runs-on: ubuntu-latest\n"
                   "    steps:\n      - run: echo \"${{ github.event.comment.body }}\"\n")
    code, findings = zizmor([bad])
    assert code != 0 and any(f["ident"] == "template-injection" for f in findings)


def test_action_inputs_reach_code_only_through_env():
    """Every action input has a description and a default, and no `run:` contains `${{ }}`."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    for name, spec in action["inputs"].items():
        assert spec.get("description") and "default" in spec, name
    assert set(action["outputs"]) == {"outcome", "next-action", "issue-url", "pull-request-url", "record",
                                      "record-artifact", "unpushed-artifact"}
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")
    run = [s for s in action["runs"]["steps"] if s.get("id") == "run"][0]
    assert run["env"]["GITHUB_TOKEN"] == "${{ inputs.github-token }}"


def test_action_shell_scripts_parse():
    """Each `run:` script of the action is valid bash (`bash -n`)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    for step in action["runs"]["steps"]:
        if "run" in step:
            proc = subprocess.run(["bash", "-n"], input=step["run"], capture_output=True, text=True)
            assert proc.returncode == 0, (step.get("name"), proc.stderr)


@pytest.mark.parametrize("auth", ["oauth-token", "bedrock", "vertex", "codex-api-key", "codex-login"])
def test_every_way_of_paying_init_writes_passes_actionlint_and_zizmor(tmp_path, auth):
    """`init --auth` for each way users pay: the workflow (its OIDC steps pinned by sha) has no finding."""
    write_init(tmp_path, action_ref=PINNED, auth=auth)
    workflow = tmp_path / ".github/workflows/plan-runner.yml"
    proc = actionlint(tmp_path, [workflow])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = zizmor([workflow])
    assert found == (0, []), json.dumps(found[1], indent=1)[:4000]


@pytest.mark.parametrize("auth", ["api-key", "bedrock"])
def test_init_github_app_writes_the_apps_inputs_from_a_variable_and_a_secret_lint_clean(tmp_path, auth):
    """`plan-runner init --github-app` (the real CLI): the session job passes `app-id` from the repository variable
    PLAN_RUNNER_APP_ID and `app-private-key` from the secret PLAN_RUNNER_APP_PRIVATE_KEY, nothing else changes (no
    other job gets them, no `run:` step sees them), `next:` says what to create, and actionlint and zizmor find
    nothing in what it wrote."""
    import sys

    proc = subprocess.run([sys.executable, "-m", "runner", "init", "--github-app", "--auth", auth,
                           "--action-ref", PINNED, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PLAN_RUNNER_APP_ID" in proc.stdout and "PLAN_RUNNER_APP_PRIVATE_KEY" in proc.stdout  # next: steps
    workflow = tmp_path / ".github/workflows/plan-runner.yml"
    flow = yaml.safe_load(workflow.read_text())
    steps = flow["jobs"]["session"]["steps"]
    action = [s for s in steps if s.get("uses", "").startswith(PINNED.split("@")[0])]
    assert len(action) == 1
    given = action[0]["with"]
    assert given["app-id"] == "${{ vars.PLAN_RUNNER_APP_ID }}"
    assert given["app-private-key"] == "${{ secrets.PLAN_RUNNER_APP_PRIVATE_KEY }}"
    assert "push-token" not in given
    for name, job in flow["jobs"].items():  # only the session job's action step is given them
        for step in job["steps"]:
            assert "PLAN_RUNNER_APP" not in step.get("run", ""), (name, step)
            if step is not action[0]:
                assert "app-id" not in (step.get("with") or {}), (name, step)
    # without the flag, the workflow is what it was
    plain = tmp_path / "plain"
    plain.mkdir()
    write_init(plain, action_ref=PINNED, auth=auth)
    assert "app-id" not in (plain / ".github/workflows/plan-runner.yml").read_text()
    files = [tmp_path / ".github/workflows" / name for name in INIT_FILES]
    lint = actionlint(tmp_path, files)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    found = zizmor(files)
    assert found == (0, []), json.dumps(found[1], indent=1)[:4000]
