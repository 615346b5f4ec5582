"""`plan-runner init`: the workflow and example plan it writes, pinning, and refusing to overwrite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner.core.errors import PlanRunnerError
from runner.adapters.init import parse_action_ref, pin_action_ref, resolve_ref, write_init
from runner.adapters.plan_io import load_plan
from runner.adapters.source import Source, read_checkout, record_source

ROOT = Path(__file__).resolve().parents[2]
SHA_REF = "octo-org/plan-runner@0123456789abcdef0123456789abcdef01234567"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


def test_init_writes_a_workflow_with_three_triggers_and_least_permissions(tmp_path):
    """Three files: the session workflow (dispatch, comment), the clock (schedule) and reconcile (workflow_run);
    no top-level permissions, per-job write scopes only where needed."""
    write_init(tmp_path, action_ref=SHA_REF)
    wf = yaml.safe_load((tmp_path / ".github/workflows/plan-runner.yml").read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as True
    # nothing on a schedule in the session workflow
    assert set(on) == {"workflow_dispatch", "issue_comment", "issues", "pull_request_review_comment"}
    assert on["issues"]["types"] == ["labeled"] and on["pull_request_review_comment"]["types"] == ["created"]
    assert on["workflow_dispatch"]["inputs"]["plan"]["default"] == "plans/example.md"
    assert on["issue_comment"]["types"] == ["created"]
    assert wf["permissions"] == {}
    jobs = wf["jobs"]
    assert set(jobs) == {"session", "reply"}
    assert jobs["session"]["permissions"] == {"contents": "write", "issues": "write", "pull-requests": "write",
                                              "actions": "write", "checks": "write"}
    assert jobs["reply"]["permissions"] == {"contents": "write", "issues": "write", "pull-requests": "write",
                                           "actions": "write"}  # the last to react to a review comment
    assert jobs["session"]["concurrency"] == {"group": "plan-runner-${{ inputs.plan }}", "cancel-in-progress": False}
    clock = yaml.safe_load((tmp_path / ".github/workflows/plan-runner-clock.yml").read_text())
    assert clock[True] == {"schedule": [{"cron": "17,47 * * * *"}]} and clock["permissions"] == {}
    # checks: the verdict of a session the tick reconciles (a killed job's) as its check run
    assert clock["jobs"]["tick"]["permissions"] == {"contents": "write", "actions": "write", "checks": "write"}
    assert clock["jobs"]["tick"]["env"] == {"PLAN_RUNNER_SESSION_WORKFLOW": "plan-runner.yml"}
    rec = yaml.safe_load((tmp_path / ".github/workflows/plan-runner-reconcile.yml").read_text())
    assert rec[True] == {"workflow_run": {"workflows": [wf["name"]], "types": ["completed"]}}
    assert rec["permissions"] == {} and rec["jobs"]["reconcile"]["permissions"] == {"contents": "write",
                                                                                   "actions": "write",
                                                                                   "checks": "write"}
    cond = rec["jobs"]["reconcile"]["if"]
    assert "workflow_run.event == 'workflow_dispatch'" in cond and "conclusion != 'success'" in cond
    every = {**jobs, "tick": clock["jobs"]["tick"], "reconcile": rec["jobs"]["reconcile"]}
    for name, job in every.items():
        checkout, action = job["steps"]
        assert checkout["with"]["persist-credentials"] is False, name
        assert action["uses"] == SHA_REF and action["with"]["mode"] == name
    assert jobs["session"]["steps"][1]["with"]["anthropic-api-key"] == "${{ secrets.ANTHROPIC_API_KEY }}"
    assert "github-token" not in jobs["session"]["steps"][1]["with"]  # the default, never a broader secret


def test_a_repository_with_the_old_single_workflow_is_told_how_to_migrate(tmp_path):
    """The old plan-runner.yml (its tick on a schedule in the session workflow) is refused with what to do;
    `--force` writes the three files."""
    old = tmp_path / ".github/workflows/plan-runner.yml"
    old.parent.mkdir(parents=True)
    old.write_text((ROOT / "tests/data/old-single-workflow.yml").read_text())
    with pytest.raises(PlanRunnerError) as err:
        write_init(tmp_path, action_ref=SHA_REF)
    assert "old single workflow" in err.value.what and "1,440 billable minutes" in err.value.why
    assert "plan-runner init --force" in err.value.fix and "plan-runner-clock.yml" in err.value.fix
    assert not (tmp_path / ".github/workflows/plan-runner-clock.yml").exists()
    write_init(tmp_path, action_ref=SHA_REF, force=True)
    assert "schedule" not in yaml.safe_load(old.read_text())[True]
    assert (tmp_path / ".github/workflows/plan-runner-clock.yml").exists()


def test_init_says_what_the_repository_will_be_billed(tmp_path):
    """`init`'s last lines: 0 while nothing waits, a wait's ticks, sessions their own minutes."""
    out = _cli("init", str(tmp_path), "--action-ref", SHA_REF, cwd=tmp_path)
    last = out.stdout.strip().splitlines()[-4:]
    assert all(line.startswith("billing: ") for line in last), out.stdout
    assert "billed 0 minutes a month" in last[1] and "at most 11 minutes" in last[2]


def test_init_example_plan_is_valid(tmp_path):
    """The example plan passes `plan-runner validate`'s checks, with `base` the repository's branch."""
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(tmp_path)], check=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    write_init(tmp_path, action_ref=SHA_REF)
    plan = load_plan(tmp_path / "plans/example.md", tmp_path)
    assert plan.config.base == "trunk" and len(plan.checkpoints) == 3
    assert plan.config.gates[0].run == ".venv/bin/python -m pytest -q"  # the project's venv, made by setup:
    # no `test` extra in this pyproject.toml: the gate's pytest is named itself (pip only warns of a missing extra)
    assert plan.config.setup.run == ("python3 -m venv .venv", ".venv/bin/pip install -q -e . pytest")
    assert plan.config.setup.cache == (".venv",) and plan.config.setup.key == ("pyproject.toml",)


def test_init_installs_the_test_extra_only_where_the_project_declares_it(tmp_path):
    """A pyproject.toml with a `test` extra: the example set-up installs `.[test]` (issue 46)."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n[project.optional-dependencies]\n"
                                             "test = ['pytest']\n")
    write_init(tmp_path, action_ref=SHA_REF)
    plan = load_plan(tmp_path / "plans/example.md", tmp_path)
    assert plan.config.setup.run == ("python3 -m venv .venv", ".venv/bin/pip install -q -e .[test]")


def test_init_installs_the_dev_requirement_files_pip_install_e_never_reads(tmp_path):
    """requirements-dev.txt / requirements-test.txt name what the tests import beyond the project's dependencies:
    the example set-up installs them, besides pytest by name or the `test` extra."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    for name in ("pyproject.toml", "requirements.txt", "requirements-dev.txt", "requirements-test.txt"):
        (tmp_path / name).write_text("[project]\nname='x'\n" if name == "pyproject.toml" else "pytest\n")
    write_init(tmp_path, action_ref=SHA_REF)
    plan = load_plan(tmp_path / "plans/example.md", tmp_path)
    assert plan.config.setup.run[1] == (".venv/bin/pip install -q -e . pytest -r requirements-dev.txt "
                                        "-r requirements-test.txt")
    assert plan.config.setup.key == ("pyproject.toml", "requirements.txt", "requirements-dev.txt",
                                     "requirements-test.txt")


def test_init_keys_the_cache_on_the_files_a_setuptools_project_installs_from(tmp_path):
    """python-slugify's shape (setup.py, setup.cfg, a pyproject.toml for the build only): all three are the cache's
    key, or an edit of setup.cfg's dependencies would keep a stale venv."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "requirements.txt"):
        (tmp_path / name).write_text("[build-system]\n" if name == "pyproject.toml" else "")
    write_init(tmp_path, action_ref=SHA_REF)
    plan = load_plan(tmp_path / "plans/example.md", tmp_path)
    assert plan.config.setup.key == ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt")


@pytest.mark.parametrize("marker, setup_run, gate", [
    ("package.json", ("npm ci",), "npm test"), ("go.mod", None, "go test ./..."), (None, None, "make test")])
def test_init_example_plan_sets_up_node_and_leaves_others_a_commented_example(tmp_path, marker, setup_run, gate):
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    if marker:
        (tmp_path / marker).write_text("{}\n")
    write_init(tmp_path, action_ref=SHA_REF)
    plan = load_plan(tmp_path / "plans/example.md", tmp_path)
    assert plan.config.gates[0].run == gate
    assert (plan.config.setup.run if plan.config.setup else None) == setup_run
    assert "setup:" in (tmp_path / "plans/example.md").read_text()


def test_init_refuses_to_overwrite_without_force(tmp_path):
    """A second init fails with a clear error and leaves edited files alone; --force overwrites."""
    write_init(tmp_path, action_ref=SHA_REF)
    plan = tmp_path / "plans/example.md"
    plan.write_text("my edits")
    with pytest.raises(PlanRunnerError) as err:
        write_init(tmp_path, action_ref=SHA_REF)
    assert "refusing to overwrite" in err.value.what and "--force" in err.value.fix
    assert plan.read_text() == "my edits"
    write_init(tmp_path, action_ref=SHA_REF, force=True)
    assert plan.read_text() != "my edits"


@pytest.mark.integration
def test_init_cli_writes_files_and_exits_2_on_a_second_run(tmp_path):
    """`plan-runner init DIR` prints what it wrote; a second run exits 2 with the error on stderr."""
    first = _cli("init", str(tmp_path), "--action-ref", SHA_REF, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert ".github/workflows/plan-runner.yml" in first.stdout
    second = _cli("init", str(tmp_path), "--action-ref", SHA_REF, cwd=tmp_path)
    assert second.returncode == 2 and "refusing to overwrite" in second.stderr and "Traceback" not in second.stderr


@pytest.mark.integration
def test_a_tag_is_pinned_to_its_commit_sha(tmp_path):
    """A tag in --action-ref is resolved with `git ls-remote` and written as `@sha # tag`."""
    repo = tmp_path / "octo-org" / "plan-runner"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q",
                    "--allow-empty", "-m", "release"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b", "tag", "-a", "v0", "-m", "v0"],
                   check=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert resolve_ref(str(repo), "v0") == sha  # the peeled commit, not the tag object
    assert pin_action_ref("octo-org/plan-runner@v0", server=str(tmp_path)) == (
        f"octo-org/plan-runner@{sha}", " # v0", True)
    assert pin_action_ref("octo-org/plan-runner@nope", server=str(tmp_path))[2] is False


def test_unresolvable_tag_warns(tmp_path):
    """When the tag cannot be resolved, the tag is written as given and the user is told to pin it."""
    warnings = []
    write_init(tmp_path, action_ref="octo-org/plan-runner@v9", server=str(tmp_path / "none"), warn=warnings.append)
    assert "uses: octo-org/plan-runner@v9" in (tmp_path / ".github/workflows/plan-runner.yml").read_text()
    assert warnings and "Pin it" in warnings[0]


def test_bad_action_refs_are_user_errors():
    """An action reference without a version is refused with a fix."""
    for bad in ("plan-runner", "a/b@", "@v1"):
        with pytest.raises(PlanRunnerError):
            parse_action_ref(bad)


def test_this_repository_dogfoods_the_workflow_init_writes(tmp_path):
    """.github/workflows/plan-runner{,-clock,-reconcile}.yml are exactly `plan-runner init --action-ref ./` output."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git/HEAD").write_text("ref: refs/heads/main\n")
    write_init(tmp_path, action_ref="./")
    for name in ("plan-runner.yml", "plan-runner-clock.yml", "plan-runner-reconcile.yml"):
        assert ((ROOT / ".github/workflows" / name).read_text()
                == (tmp_path / ".github/workflows" / name).read_text()), name


def _release_checkout(path: Path, origin: str) -> str:
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README.md").write_text("plan-runner\n")
    subprocess.run(["git", "-C", str(path), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(path), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "r"],
                   check=True)
    subprocess.run(["git", "-C", str(path), "remote", "add", "origin", origin], check=True)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.integration
def test_init_pins_the_commit_plan_runner_was_installed_from(tmp_path):
    """Without --action-ref the workflow uses the installed source's repository at its full commit sha, with the
    version in a comment; the sha is the one recorded at build time from the checkout."""
    sha = _release_checkout(tmp_path / "src", "https://github.com/octo-org/plan-runner.git")
    assert record_source(tmp_path / "src", tmp_path / "source.json", "1.2.3")
    assert json.loads((tmp_path / "source.json").read_text()) == {
        "repository": "octo-org/plan-runner", "commit": sha, "version": "1.2.3"}
    found = read_checkout(tmp_path / "src", "1.2.3")
    assert found == Source("octo-org/plan-runner", sha, "1.2.3", "read from the checkout")
    warnings: list[str] = []
    (tmp_path / "user").mkdir()
    write_init(tmp_path / "user", warn=warnings.append, source=found)
    text = "".join((tmp_path / "user/.github/workflows" / name).read_text()
                   for name in ("plan-runner.yml", "plan-runner-clock.yml", "plan-runner-reconcile.yml"))
    assert text.count(f"uses: octo-org/plan-runner@{sha} # v1.2.3") == 4 and warnings == []


@pytest.mark.integration
def test_init_says_plainly_when_it_cannot_know_the_commit(tmp_path):
    """No recorded commit and no checkout: init warns that it cannot pin and how to; a dirty or non-GitHub
    checkout is named too, and a dirty tree is never recorded at build time."""
    warnings: list[str] = []
    write_init(tmp_path, warn=warnings.append, source=None, server=str(tmp_path / "nowhere"))
    assert "cannot tell which commit it was installed from" in warnings[0]
    _release_checkout(tmp_path / "src", "https://example.org/mirror/plan-runner.git")
    assert read_checkout(tmp_path / "src").repository == ""
    (tmp_path / "src/README.md").write_text("changed\n")
    assert read_checkout(tmp_path / "src").dirty
    assert not record_source(tmp_path / "src", tmp_path / "source.json", "1.2.3")
    assert read_checkout(tmp_path / "not-a-repo") is None


@pytest.mark.parametrize("auth", sorted(__import__("runner.adapters.init", fromlist=["AUTHS"]).AUTHS))
def test_init_asks_for_each_way_of_paying_and_for_oidc_only_when_it_needs_it(tmp_path, auth):
    """`init --auth NAME`: the session step passes that way's inputs (each one the action declares), the job asks
    for `id-token: write` only for Bedrock and Vertex (whose cloud step comes before plan-runner's), and the example
    plan names the backend and provider, valid as written."""
    from runner.adapters.init import AUTHS

    way = AUTHS[auth]
    write_init(tmp_path, action_ref=SHA_REF, auth=auth)
    wf = yaml.safe_load((tmp_path / ".github/workflows/plan-runner.yml").read_text())
    session = wf["jobs"]["session"]
    assert ("id-token" in session["permissions"]) is way.id_token is (auth in ("bedrock", "vertex"))
    clock = yaml.safe_load((tmp_path / ".github/workflows/plan-runner-clock.yml").read_text())
    reconcile = yaml.safe_load((tmp_path / ".github/workflows/plan-runner-reconcile.yml").read_text())
    for job in (wf["jobs"]["reply"], clock["jobs"]["tick"], reconcile["jobs"]["reconcile"]):
        assert "id-token" not in job["permissions"]
    step = session["steps"][-1]
    assert step["uses"] == SHA_REF
    declared = yaml.safe_load((ROOT / "action.yml").read_text())["inputs"]
    assert set(step["with"]) - {"mode", "plan"} == {k for k, _ in way.inputs} <= set(declared)
    assert len(session["steps"]) == 2 + len(way.steps)
    if way.steps:
        assert session["steps"][1]["uses"].split("@")[0] in ("aws-actions/configure-aws-credentials",
                                                             "google-github-actions/auth")
    plan = load_plan(tmp_path / "plans/example.md", tmp_path)
    assert (plan.config.agent.backend, plan.config.agent.provider) == (way.backend, way.provider)


def test_init_refuses_an_unknown_way_of_paying(tmp_path):
    with pytest.raises(PlanRunnerError) as err:
        write_init(tmp_path, action_ref=SHA_REF, auth="paypal")
    assert "bedrock" in err.value.render()
    assert not (tmp_path / ".github").exists()


def test_init_ends_with_every_step_left_on_github_in_order(tmp_path):
    """Outside GitHub, `init`'s last lines are what is left to do there: the action's home first when the workflow
    names the placeholder (it cannot run until then), the secret, the setting that lets Actions open the plan's
    pull request, then commit, push and run."""
    placeholder = tmp_path / "a"
    placeholder.mkdir()
    out = _cli("init", str(placeholder), "--action-ref", "plan-runner/plan-runner@v0", cwd=placeholder)
    assert out.returncode == 0, out.stderr
    steps = out.stdout.split("\nnext:\n", 1)[1].splitlines()
    assert steps[0].startswith("  1. replace `plan-runner/plan-runner@v0` in the workflow files"), out.stdout
    assert steps[1].startswith("  2. add the ANTHROPIC_API_KEY secret")
    assert steps[2].startswith("  3. let Actions open the plan's pull request") and "Workflow permissions" in steps[2]
    assert steps[3].startswith("  4. commit the files on the default branch and push")
    pinned = tmp_path / "b"
    pinned.mkdir()
    out = _cli("init", str(pinned), "--action-ref", SHA_REF, cwd=pinned)
    steps = out.stdout.split("\nnext:\n", 1)[1].splitlines()
    assert steps[0].startswith("  1. add the ANTHROPIC_API_KEY secret") and "replace" not in out.stdout, out.stdout
