"""End to end under act with the `claude-code` backend, as `plan-runner init` scaffolds it: the action installs
the agent's CLI with npm at the pinned version into the runner's tool cache, exactly as on a hosted runner,
and every session runs the installed CLI.

The CLI is a scripted stand-in published under the real package's name and version by a local npm registry
(tests/e2e_act/npm_registry.py); the only test-specific setting is npm's own `npm_config_registry`, given to
the job as an environment variable (a mirror set with actions/setup-node's `registry-url` works the same
way). The plan is init's example plan, unchanged; the gate is init's `make test` for a repository with a
Makefile. No network beyond 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil

import pytest

from runner.drivers.actions.install import CLIS
from tests.e2e_act import world as w
from tests.e2e_act.npm_registry import NpmRegistry, standin_tarball
from tests.servers.github import GitHubServer
from tests.integration.test_action_watch import finish_posts
from tests.e2e.test_act_e2e import ActWorld

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(400)]
PLAN = "plans/example.md"

TEST_CALC = ("import unittest\\n\\nfrom calc import add\\n\\n\\nclass T(unittest.TestCase):\\n"
             "    def test_add(self):\\n        self.assertEqual(add(2, 3), 5)\\n")
# What the stand-in agent does for each checkpoint of init's example plan: Bash commands, as Claude would run.
SCENARIO = {
    "1.1": [
        "printf '# Architecture\\n\\n`calc.py` holds the arithmetic; `test_ok.py` its tests.\\n' > ARCHITECTURE.md",
        "git add ARCHITECTURE.md && git commit -qm 'Describe the architecture'",
        "sed -i 's/^- \\[ \\] 1.1 /- [x] 1.1 /' plans/example.md && git commit -qam 'Tick 1.1'",
        "HANDOFF: ARCHITECTURE.md describes the modules; next: a test for calc.py.",
    ],
    "2.1": [
        f"printf '{TEST_CALC}' > test_calc.py",
        "printf 'def add(a, b):\\n    return a + b\\n' > calc.py",
        "python3 -m unittest -q",
        "git add calc.py test_calc.py && git commit -qm 'Test calc.add'",
        "sed -i 's/^- \\[ \\] 2.1 /- [x] 2.1 /' plans/example.md && git commit -qam 'Tick 2.1'",
        "HANDOFF: test_calc.py tests add(); it passes.",
    ],
    "2.2": [
        "printf 'def add(a, b):\\n    \"\"\"The sum of a and b.\"\"\"\\n    return a + b\\n' > calc.py",
        "python3 -m unittest -q && git commit -qam 'Document calc.add'",
        "sed -i 's/^- \\[ \\] 2.2 /- [x] 2.2 /' plans/example.md && git commit -qam 'Tick 2.2'",
        "HANDOFF: the test passes without being weakened.",
    ],
}
REPO = {
    "Makefile": "test:\n\tpython3 -m unittest -q\n",
    "calc.py": "def add(a, b):\n    raise NotImplementedError\n",
    "test_ok.py": "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n",
    ".gitignore": "__pycache__/\n",
}


def interpreter() -> str:
    """A Python the agent's unprivileged user may run (not one under /root)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("no system-wide python3 for the agent's user")


def test_the_action_installs_the_pinned_cli_and_every_session_runs_it(tmp_path) -> None:
    assert shutil.which("act") and shutil.which("npm"), "act and npm are needed (scripts/test installs them)"
    cli = CLIS["claude-code"]
    with GitHubServer() as srv, NpmRegistry(standin_tarball(SCENARIO, interpreter())) as npm:
        srv.actions_can_create_prs = False  # GitHub's default for a repository: the finish's pull request is refused
        world = ActWorld(tmp_path, srv, files=REPO, init_plan=True, plan_id="example",
                         env={"npm_config_registry": npm.url, "npm_config_cache": str(tmp_path / "npm-cache")})
        plan_text = (world.clone / PLAN).read_text()
        assert "backend: claude-code" in plan_text and 'run: "make test"' in plan_text  # init's, unchanged

        world.act("workflow_dispatch", w.dispatch_event(PLAN))
        # In plan-runner's root-owned install directory (fresh, as on a hosted runner), not act's tool cache.
        installed = world.image.install_root / cli.key / "node_modules" / ".bin" / cli.binary
        assert installed.is_symlink() and "stand-in" in installed.resolve().read_text()
        tarballs = [p for p in npm.requests if p.endswith(".tgz")]
        assert tarballs == [f"/{cli.package}/-/claude-code-{cli.version}.tgz"]  # the pinned version
        assert world.outcomes() == ["Advanced"]
        assert world.follow_dispatches() == 2  # 2.1, then 2.2, whose job asks for the pull request
        assert [p for p in npm.requests if p.endswith(".tgz")] == tarballs  # installed once per runner

        assert world.outcomes() == ["Advanced", "Advanced", "Advanced"]
        sessions = [e for e in world.ledger() if e["type"] == "session"]
        assert [e["backend"] for e in sessions] == ["claude-code"] * 3
        assert all(e["agent_session_id"] and e["cost_usd"] > 0 for e in sessions)  # parsed from its stream

        # The work is done, but "Allow GitHub Actions to create and approve pull requests" is off: one refused
        # pull request, one park issue that names the setting, and a tick that does not ask GitHub again.
        assert [i for i in srv.issues.values() if i.get("pull")] == []
        (park,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"] and i["state"] == "open"]
        assert "Allow GitHub Actions to create and approve pull requests" in park["body"]
        world.act("schedule", w.schedule_event())
        assert world.new_dispatches() == [] and finish_posts(srv) == 1

        # The maintainer turns the setting on and answers; the next run opens the pull request.
        srv.actions_can_create_prs = True
        body = "/plan-runner resume"
        cid = srv.add_comment(park["number"], body, user="maintainer")
        world.act("issue_comment", w.comment_event(park, body, "maintainer", cid))
        assert world.follow_dispatches() == 1
        (pr,) = [i for i in srv.issues.values() if i.get("pull")]
        assert pr["pull"]["head"] == "plan-runner/example" and park["state"] == "closed"
        assert [p for p in npm.requests if p.endswith(".tgz")] == tarballs  # still installed once

    log = w.git(world.bare, "log", "--format=%s", "main..plan-runner/example").splitlines()
    assert {"Describe the architecture", "Test calc.add", "Document calc.add", "Tick 2.2"} <= set(log)
    assert w.git(world.bare, "show", f"plan-runner/example:{PLAN}").count("- [x]") == 3
    # The stream the installed CLI wrote is what plan-runner parsed (kept with the state).
    streams = w.git(world.bare, "ls-tree", "-r", "--name-only", "refs/plan-runner/state/example")
    assert "transcripts/claude-stream.jsonl" in streams.splitlines()

