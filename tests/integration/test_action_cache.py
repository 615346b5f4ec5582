"""A session job does not install again what an earlier job installed (issue 23): the composite action persists
plan-runner's venv, uv and the agent's CLI with `actions/cache/restore` and `actions/cache/save`, keyed by what the
install depends on, saved before the session's step (so an entry holds only what plan-runner's own install
produced), adopted only as root-owned copies that run. The cache service is a stand-in with the actions' documented
semantics (tests/e2e_act/hosted.py `ActionsCache`: exact key, a key never overwritten); act has none, so under act
the restore misses and the save stores nothing (tests/e2e/test_act_e2e.py still runs every step)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import yaml

from runner.drivers.actions import install_cache as ac
from tests.other_users import again_as_root
from tests.e2e_act import world as w
from tests.e2e_act.hosted import ActionsCache, CompositeRunner, HostedImage
from tests.servers.github import GitHubServer
from tests.e2e.test_act_e2e import copy_action_source

ROOT = Path(__file__).resolve().parents[2]
PLAN_TEXT = "---\nbase: main\nagent:\n  backend: claude-code\n---\n# P\n"


def test_the_key_names_what_the_install_depends_on_and_nothing_else(tmp_path):
    action = copy_action_source(tmp_path / "action")
    key = ac.cache_key(action, PLAN_TEXT, system="Linux", machine="x86_64", python_version="3.12.1")
    assert key.startswith("plan-runner-install-v1-linux-x86_64-claude-code-")
    assert key == ac.cache_key(action, PLAN_TEXT + "\nmore prose\n", system="Linux", machine="x86_64",
                               python_version="3.12.1")  # the plan's prose is not an input
    others = {
        ac.cache_key(action, PLAN_TEXT, system="Linux", machine="aarch64", python_version="3.12.1"),
        ac.cache_key(action, PLAN_TEXT, system="Linux", machine="x86_64", python_version="3.11.9"),
        ac.cache_key(action, PLAN_TEXT.replace("claude-code", "codex"), system="Linux", machine="x86_64",
                     python_version="3.12.1"),
    }
    pins = action / "runner" / "core" / "backend_spec.py"  # the CLIs' npm pins (one table of backends)
    assert "2.1.332" in pins.read_text()
    pins.write_text(pins.read_text().replace("2.1.332", "2.1.333"))  # a new pin
    others.add(ac.cache_key(action, PLAN_TEXT, system="Linux", machine="x86_64", python_version="3.12.1"))
    assert key not in others and len(others) == 4
    assert ac.plan_backend("# no front matter\nbackend: codex\n") == "default"


def test_only_a_session_jobs_miss_is_saved():
    assert ac.should_save("session", "false", ["venv-x"]) and ac.should_save("session", "", ["venv-x"])
    assert not ac.should_save("session", "true", ["venv-x"])  # a hit: the key exists, nothing new
    assert not ac.should_save("tick", "false", ["venv-x"]) and not ac.should_save("reply", "false", ["venv-x"])
    assert not ac.should_save("session", "false", [])


def test_the_save_step_comes_before_anything_of_the_session_runs():
    """In action.yml the save step precedes the step that runs plan-runner (agent, gates, set-up), and every cache
    step's key and path come from the key step (a `run:` step, before any of them)."""
    steps = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
    names = [s.get("id") or s.get("name") for s in steps]
    assert names.index("cache") < names.index("restore") < names.index("install") \
        < names.index("prepare") < names.index("Save the install") < names.index("run")
    # the plan's set-up (runner/drivers/actions/setup_cache.py): built and saved before the session's step too
    assert names.index("prepare") < names.index("setup-restore") < names.index("setup") \
        < names.index("Save the set-up") < names.index("run")
    cache_steps = {s.get("id") or s["name"]: s for s in steps if s.get("uses", "").startswith("actions/cache/")}
    assert sorted(cache_steps) == ["Save the install", "Save the set-up", "restore", "setup-restore"]
    for name in ("restore", "Save the install"):
        assert cache_steps[name]["with"] == {"path": "${{ steps.cache.outputs.dir }}",
                                             "key": "${{ steps.cache.outputs.key }}"}
    assert cache_steps["setup-restore"]["with"] == {"path": "${{ steps.prepare.outputs.setup-dir }}",
                                                    "key": "${{ steps.prepare.outputs.setup-restore-key }}"}
    assert cache_steps["Save the set-up"]["with"] == {"path": "${{ steps.prepare.outputs.setup-dir }}",
                                                      "key": "${{ steps.prepare.outputs.setup-save-key }}"}
    assert cache_steps["Save the install"]["if"] == ("steps.prepare.outputs.save == 'true' "
                                                      "|| steps.install.outputs.save == 'true'")
    assert cache_steps["Save the set-up"]["if"] == "steps.setup.outputs.save == 'true'"
    for name in ("cache", "prepare"):  # the keys come from `run:` steps, which get no cache token
        assert "run" in steps[names.index(name)] and "uses" not in steps[names.index(name)]


def test_stage_and_adopt(tmp_path):
    root = tmp_path / "root"
    (root / "venv-a" / "bin").mkdir(parents=True)
    (root / "venv-a" / "bin" / "python").write_text("x")
    os.symlink("python", root / "venv-a" / "bin" / "python3")
    staging = tmp_path / "staging"
    (staging / "stale").mkdir(parents=True)
    assert ac.stage(root, ["venv-a", "missing"], staging) == ["venv-a"]
    assert sorted(p.name for p in staging.iterdir()) == ["venv-a"]  # a fresh folder: nothing stale is saved
    assert (staging / "venv-a" / "bin" / "python3").is_symlink()
    placed = []
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert ac.adopt(staging, "venv-a", fresh, lambda s, d: placed.append((s, d)))
    assert not ac.adopt(staging, "venv-a", root, lambda s, d: placed.append((s, d)))  # already there: kept
    os.symlink(root, staging / "linked")
    assert not ac.adopt(staging, "linked", fresh, lambda s, d: placed.append((s, d)))  # a link is never adopted
    assert placed == [(staging / "venv-a", fresh / "venv-a")]


def session_job(tmp_path: Path, name: str, cache: ActionsCache, offline: bool = False):
    """A session job's install steps (a dry run) on a fresh runner: its own image, install directory and temp."""
    plan = "plans/greeter.md"
    (tmp_path / name).mkdir()
    with GitHubServer() as srv:
        bare = w.make_remote(tmp_path / name, {plan: w.PLAN, "plans/greeter.script.yaml": w.SCRIPT})
        srv.branches = w.BareBranches(bare)
        ws = w.checkout(bare, tmp_path / name / "job")
        image = HostedImage(tmp_path / name / "image")
        host = {k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "GITHUB_", "VIRTUAL_ENV"))}
        env = {**host, **w.job_env(srv, ws, tmp_path / name / "runner", "workflow_dispatch", w.dispatch_event(plan))}
        for var in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_TOKEN", "ANTHROPIC_API_KEY"):
            env.pop(var)
        action = tmp_path / "action-src"
        job = CompositeRunner(action if action.exists() else copy_action_source(action), image, env,
                              inputs={"mode": "session", "plan": plan, "dry-run": "true"},
                              github={"token": srv.token, "server_url": "https://github.example.invalid"})
        job.cache = cache
        if offline:  # no package index and empty caches: an install would fail the job
            job.job_env.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE="/dev/null", UV_OFFLINE="1",
                               UV_CACHE_DIR=str(tmp_path / name / "uv-cache"), PIP_CACHE_DIR=str(tmp_path / name / "pip"))
        started = time.monotonic()
        run = job.run()
        return image, run, time.monotonic() - started


@pytest.mark.integration
@pytest.mark.sudo_user  # the hosted image's root-owned install: run again as root (tests/other_users.py)
def test_a_second_session_job_on_a_fresh_runner_restores_the_install_instead_of_installing(tmp_path, request):
    if again_as_root(request):
        return
    cache = ActionsCache(tmp_path / "cache-service")
    image1, first, first_s = session_job(tmp_path, "job1", cache)
    assert first.status == "success", first.text
    assert first.step("restore").outputs["cache-hit"] == "false"
    # a plan needing no agent CLI and no set-up cache: the install step stages the new install itself
    assert not first.step("prepare").ran and first.step("install").outputs["save"] == "true" and len(cache.saved) == 1
    assert first.step("run").outputs["outcome"] == "dry-run"
    _, cold, _ = session_job(tmp_path, "control", ActionsCache(None), offline=True)
    assert cold.status == "failure", "the offline control must need the network to install"
    image2, second, second_s = session_job(tmp_path, "job2", cache, offline=True)
    assert second.status == "success", second.text
    assert second.step("restore").outputs["cache-hit"] == "true" and cache.restored == cache.saved
    # a hit saves nothing, and a plan needing no agent CLI and no set-up cache starts no second plan-runner process
    assert second.step("install").outputs["built"] == "false" and first.step("install").outputs["built"] == "true"
    assert not second.step("prepare").ran and len(cache.saved) == 1
    assert not second.step(next(s.id for s in second.steps if s.name == "Save the install")).ran
    venv = Path(second.step("install").outputs["python"]).parent.parent
    assert venv.parent == image2.install_root
    loose = [p for p in image2.install_root.rglob("*") if not p.is_symlink()
             and (p.stat().st_uid != 0 or p.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH))]
    assert loose == []  # adopted as root-owned copies, read-only for everyone else
    def spent(job):  # the steps before the session's own (`run`): what a job pays beyond its agent and gates
        return sum(s.seconds for s in job.steps[:[s.id for s in job.steps].index("run")])

    print(f"before the session step: first job (miss: installs, saves) {spent(first):.1f} s, second (hit: restores, "
          f"adopts) {spent(second):.1f} s; whole jobs (dry runs) {first_s:.1f} s and {second_s:.1f} s")
