"""Issue 27, item 1: commands are checked as they will run (a fresh checkout after set-up, the gates' PATH,
which holds nothing of plan-runner's installation nor of the user's working copy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runner.adapters.sandbox.agentenv import build_agent_env, clean_path
from runner.drivers.session.preflight import command_problem

VENV_BIN = str(Path(sys.prefix) / "bin")  # plan-runner's own virtualenv (the tests run in one)


def test_the_gates_path_holds_nothing_of_plan_runner_nor_of_the_working_copy(tmp_path):
    assert sys.prefix != sys.base_prefix, "the test needs plan-runner installed in a virtualenv"
    user_venv = tmp_path / ".venv" / "bin"
    user_venv.mkdir(parents=True)
    path = os.pathsep.join([VENV_BIN, str(user_venv), "/usr/local/bin", "/usr/bin", "", ".", "/bin"])
    assert clean_path(path, also=(tmp_path,)) == "/usr/local/bin:/usr/bin:/bin"
    assert build_agent_env({"PATH": path})["PATH"] == f"{user_venv}:/usr/local/bin:/usr/bin:/bin"
    # plan-runner's own `python3 -m pytest` is exactly what the gate ran by mistake
    assert (Path(VENV_BIN) / "pytest").exists()


def test_a_program_only_in_plan_runners_venv_is_an_error_naming_setup(tmp_path):
    env = {"PATH": os.pathsep.join([VENV_BIN, "/usr/bin", "/bin"])}
    problem = command_problem("gate 'tests'", "pytest -q", env, tmp_path)
    assert problem is not None and problem.level == "error" and "not on the gates' PATH" in problem.what
    assert "setup:" in problem.fix and "python3 -m venv .venv" in problem.fix


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "pytest").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".venv" / "bin" / "pytest").chmod(0o755)
    (repo / ".gitignore").write_text(".venv/\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    return repo


def test_an_ignored_program_is_a_warning_in_the_working_copy_and_an_error_on_the_fresh_checkout(tmp_path):
    repo = _repo(tmp_path)
    env = {"PATH": "/usr/bin:/bin"}
    here = command_problem("gate 'tests'", ".venv/bin/pytest -q", env, repo)  # validate: no checkout
    assert here is not None and here.level == "warning" and "not tracked by git" in here.what
    assert "setup:" in here.fix
    checkout = tmp_path / "checkout"  # the fresh checkout (after set-up): tracked files only
    checkout.mkdir()
    there = command_problem("gate 'tests'", ".venv/bin/pytest -q", env, repo, checkout=checkout)
    assert there is not None and there.level == "error" and "fresh checkout" in there.what
    assert "setup:" in there.fix
    (checkout / ".venv" / "bin").mkdir(parents=True)  # set-up made it there: fine
    (checkout / ".venv" / "bin" / "pytest").write_text("#!/bin/sh\n")
    (checkout / ".venv" / "bin" / "pytest").chmod(0o755)
    assert command_problem("gate 'tests'", ".venv/bin/pytest -q", env, repo, checkout=checkout) is None
