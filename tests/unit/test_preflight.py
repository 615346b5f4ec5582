"""The preflight's checks, one by one, on real files and the real PATH (the CLI-level tests are in test_first_hour.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runner.adapters.sandbox.agentenv import credential_vars, build_agent_env
from runner.core.plan import GateConfig
from runner.core.planfile import parse_plan
from runner.drivers.session.preflight import PreflightError, check, gate_command_problem, problems

PLAN = """\
---
agent:
  backend: {backend}
  {extra}
gates:
  - name: tests
    run: {gate}
---
# P

## Stage 1: S <!-- sessions: 1 -->
- [ ] 1.1 thing
"""


def plan(backend: str = "command", extra: str = "executable: sh", gate: str = "exit 0"):
    return parse_plan(PLAN.format(backend=backend, extra=extra, gate=gate), "plans/p.md")


@pytest.mark.parametrize("command", [
    "true", "test -f x && echo y", "cd sub && make", "FOO=1 BAR=2 sh -c 'exit 0'", "$PYTHON -m pytest",
    f"{sys.executable} -m unittest", "[ -f x ]", "if true; then :; fi", "# comment only",
])
def test_gate_commands_the_shell_resolves_pass(command, tmp_path):
    """Builtins, keywords, assignments, expansions, absolute paths and names on the PATH are not problems."""
    assert gate_command_problem(GateConfig(name="g", run=command), {"PATH": "/usr/bin:/bin"}, tmp_path) is None


def test_a_gate_command_on_no_path_is_an_error_and_a_missing_script_a_warning(tmp_path):
    """A bare name the PATH lacks would exit 127: an error; a relative path the work may create: a warning."""
    env = {"PATH": "/usr/bin:/bin"}
    missing = gate_command_problem(GateConfig(name="g", run="pytestx -q"), env, tmp_path)
    assert missing is not None and missing.level == "error" and "'pytestx'" in missing.what
    script = gate_command_problem(GateConfig(name="g", run="./scripts/check.sh --all"), env, tmp_path)
    assert script is not None and script.level == "warning"
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "check.sh").write_text("#!/bin/sh\n")
    (tmp_path / "scripts" / "check.sh").chmod(0o755)
    assert gate_command_problem(GateConfig(name="g", run="./scripts/check.sh --all"), env, tmp_path) is None


def test_credentials_are_checked_per_backend(tmp_path):
    """A codex plan needs OPENAI_API_KEY (an Anthropic key does not do); a command plan needs none."""
    env = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "sk-ant"}
    found = problems(plan("codex", "executable: sh"), env, tmp_path)
    assert [p.what for p in found] == ["no credentials for the codex backend"]
    assert problems(plan("codex", "executable: sh"), {**env, "OPENAI_API_KEY": "sk-o"}, tmp_path) == []
    assert problems(plan("command", "executable: sh"), {"PATH": "/usr/bin:/bin"}, tmp_path) == []
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "auth.json").write_text("{}")
    assert problems(plan("codex", "executable: sh"), {**env, "CODEX_HOME": str(codex_home)}, tmp_path) == []


def test_every_error_is_listed_in_one_error(tmp_path):
    """Two problems (no executable, no gate command) come out together, each with its fix."""
    with pytest.raises(PreflightError) as err:
        check(plan("claude-code", f"executable: {tmp_path / 'nope'}", "nosuchcmd-1"),
              {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "k"}, tmp_path)
    text = err.value.render()
    assert "2 problems" in text and "nosuchcmd-1" in text and "cannot be found" in text and "nothing was run" in text


def test_each_backend_gets_only_its_own_credentials():
    """claude-code/anthropic (and the scripted stand-in for them) get Anthropic variables, codex the OpenAI key,
    base URL and CODEX_*, command none."""
    parent = {"PATH": "/bin", "ANTHROPIC_API_KEY": "a", "CLAUDE_CODE_OAUTH_TOKEN": "c", "OPENAI_API_KEY": "o",
              "OPENAI_BASE_URL": "u", "OPENAI_ORG_SECRET": "x", "CODEX_HOME": "h"}
    names = {b: set(build_agent_env(parent, api_key_vars=credential_vars(b))) - {"PATH"}
             for b in ("claude-code", "anthropic", "codex", "command", "script")}
    anthropic = {"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"}
    assert names["claude-code"] == names["anthropic"] == names["script"] == anthropic
    assert names["codex"] == {"OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME"}
    assert names["command"] == set()


def test_the_preflight_checks_the_agent_only_when_a_session_will_run(tmp_path):
    """A plan whose next step is the finish's pull request (a maintainer resumed it after GitHub refused the
    pull request) runs no agent: a missing agent CLI is no reason to stop it. A session due is checked."""
    from types import SimpleNamespace

    from runner.core.actions import Finish, RunSession, SessionKind
    from runner.core.policy import RunState
    from runner.drivers.session.preflight import before_first_session

    broken = plan("claude-code", f"executable: {tmp_path / 'nope'}")
    ws = SimpleNamespace(env={"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "k"}, repo=tmp_path, plan_path="plans/p.md",
                         isolation="none", actions=False)
    finish = SimpleNamespace(trusted=broken, plan=broken, state=RunState(pending=Finish(reason="every checkpoint done")))
    before_first_session(ws, None, session=finish)  # nothing to check: no agent runs
    due = SimpleNamespace(trusted=broken, plan=broken,
                          state=RunState(pending=RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="go")))
    with pytest.raises(PreflightError, match="cannot be found"):
        before_first_session(ws, None, session=due)
