"""Issue 48, item 5: `agent.executable` was resolved on the invoking user's PATH, while the agent starts on its
own (that PATH without plan-runner's installation and the working copy's folders). Through the real CLI: a name
found only in the working copy stops the preflight with where it was found and the fix, before anything is
recorded; the same program on a folder the agent's PATH keeps runs."""

from __future__ import annotations

import os

import pytest

from tests.e2e.test_first_hour import AGENT, cli, git, make_repo

pytestmark = pytest.mark.integration


def _repo_with_agent_named(tmp_path, where):
    repo = make_repo(tmp_path, agent_extra="executable: my-agent")
    where.mkdir(parents=True, exist_ok=True)
    agent = where / "my-agent"
    agent.write_text(AGENT.format(dump=tmp_path / "env", tmp=tmp_path))
    agent.chmod(0o755)
    return repo


def test_an_executable_only_on_the_users_path_in_the_working_copy_is_refused_by_the_preflight(tmp_path):
    repo = make_repo(tmp_path, agent_extra="executable: my-agent")
    tools = repo / "tools"  # the user's own folder of the working copy, on their PATH
    tools.mkdir()
    (tools / "my-agent").write_text("#!/bin/sh\nexit 0\n")
    (tools / "my-agent").chmod(0o755)
    path = f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    done = cli(repo, "run", "plans/calc.md", env={"PATH": path})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'my-agent' (command backend) is not on the agent's PATH" in done.stderr, done.stderr
    assert f"found at {tools / 'my-agent'}" in done.stderr
    assert git(repo, "for-each-ref", "refs/plan-runner/") == ""  # nothing recorded


def test_the_same_name_on_a_folder_the_agents_path_keeps_runs(tmp_path):
    shared = tmp_path / "shared-bin"  # outside the working copy and plan-runner's installation
    repo = _repo_with_agent_named(tmp_path, shared)
    done = cli(repo, "run", "plans/calc.md", env={"PATH": f"{shared}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
    assert "not on the agent's PATH" not in done.stderr and "cannot be found" not in done.stderr, done.stderr
    assert done.returncode in (0, 3), done.stdout + done.stderr  # the session ran (this agent asks a human first)
