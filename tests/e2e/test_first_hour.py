"""A user's first hour, through the real CLI (`python -m runner ...` in a child process) on real
repositories: local replies, the preflight, honest interruptions, `status`, `logs`, and the
reports a person reads on a terminal. Codex and Claude Code runs are in test_first_hour_agents.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent_helpers import interruptible
from tests.reliability_world import fold_ledger, git, ledger, write_calc_project

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The agent commits in a clone of its own, with an empty HOME: its git identity comes from the environment.
AGENT_IDENTITY = dict(GIT_AUTHOR_NAME="Agent", GIT_AUTHOR_EMAIL="agent@example.invalid",
                      GIT_COMMITTER_NAME="Agent", GIT_COMMITTER_EMAIL="agent@example.invalid")

PLAN = """\
---
agent:
  backend: {backend}
  {agent_extra}
  stall_minutes: 20s
  time_limit_minutes: 60s
  session_tokens: 10000
# the agent records what it saw in the test's own folder: it runs as the test's user
isolation: none
gates:
  - name: tests
    run: {gate}
budget:
  max_sessions: 10
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 2 -->
- [ ] 1.1 Multiplication
"""

# A command agent: the first session writes mul.py but no test of it and asks for a human; the
# second (after a reply) finishes the work. It records its environment each time.
AGENT = """\
#!/bin/sh
env > "{dump}.$(date +%s%N)"
if [ -f {tmp}/sleep ]; then sleep 30; fi
if [ ! -f {tmp}/second ]; then
  touch {tmp}/second
  printf 'def mul(a, b):\\n    return a * b\\n' > calc/mul.py
  git add calc/mul.py && git commit -q -m 'Add mul'
  printf 'HUMAN: should mul accept floats?\\n' > plans/calc.handoff.md
  git add plans/calc.handoff.md && git commit -q -m 'Ask'
  echo "I need a human <details>"
  exit 0
fi
printf 'import unittest\\nfrom calc.mul import mul\\n\\n\\nclass T(unittest.TestCase):\\n    def test_mul(self):\\n        self.assertEqual(mul(2, 3), 6)\\n' > tests/test_mul.py
git add tests/test_mul.py && git commit -q -m 'Test mul'
sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/calc.md
git commit -q -am 'Tick 1.1'
echo "Done."
"""


def make_repo(tmp_path: Path, *, backend: str = "command", agent_extra: str | None = None,
              gate: str | None = None, extra_plans: dict[str, str] | None = None) -> Path:
    repo = tmp_path / "repo"
    write_calc_project(repo)
    if agent_extra is None:
        agent = tmp_path / "agent.sh"
        agent.write_text(AGENT.format(dump=tmp_path / "env", tmp=tmp_path))
        agent.chmod(0o755)
        agent_extra = f"executable: {agent}"
    gate = gate or f"{sys.executable} -m unittest discover -s tests -q"
    (repo / "plans" / "calc.md").write_text(PLAN.format(backend=backend, agent_extra=agent_extra, gate=gate))
    for name, text in (extra_plans or {}).items():
        (repo / "plans" / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Maintainer")
    git(repo, "config", "user.email", "m@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def cli(repo: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    e.update(PYTHONPATH=str(ROOT), **AGENT_IDENTITY, **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd or repo, capture_output=True, text=True,
                          env=e, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def has_state(repo: Path) -> bool:
    return bool(git(repo, "for-each-ref", "refs/heads/plan-runner/state", "refs/plan-runner/"))


# --- 1. least credentials ------------------------------------------------------------------------


def test_command_agent_gets_no_api_key_of_any_backend(tmp_path):
    """A `command` agent's environment holds neither the Anthropic nor the OpenAI key, only what the plan names."""
    repo = make_repo(tmp_path)
    cli(repo, "session", "plans/calc.md", env={"ANTHROPIC_API_KEY": "sk-ant-secret-1234567890",
                                              "OPENAI_API_KEY": "sk-openai-secret-1234567890",
                                              "CODEX_HOME": "/nonexistent", "MY_TOOL_HOME": "/opt/tool"})
    dumps = list(tmp_path.glob("env.*"))
    assert len(dumps) == 1
    names = {line.split("=", 1)[0] for line in dumps[0].read_text().splitlines() if "=" in line}
    assert "PATH" in names
    assert not names & {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_HOME", "MY_TOOL_HOME"}


# --- 2. a park answered locally --------------------------------------------------------------------


def test_park_is_answered_locally_and_run_then_finishes(tmp_path):
    """`run` parks with a terminal report that names `plan-runner reply`; `reply retry` records it and `run` finishes."""
    repo = make_repo(tmp_path)
    first = cli(repo, "run", "plans/calc.md")
    assert first.returncode == 3, first.stderr
    shown = first.stdout + first.stderr
    assert "plan-runner reply plans/calc.md resume" in shown and "/plan-runner resume" not in shown
    # plan-runner's own markup is gone on the terminal; the agent's words (which hold a `<details>`) are shown as
    # written, as data
    assert first.stdout.count("<details>") == first.stdout.count("I need a human <details>")
    assert "<!--" not in first.stdout and "**" not in first.stdout
    assert "parked: parked" not in shown and "plan-runner logs plans/calc.md" in shown
    assert "Comment on this issue" not in shown

    again = cli(repo, "run", "plans/calc.md")  # unanswered: still parked, nothing runs
    assert again.returncode == 3 and len(list(tmp_path.glob("env.*"))) == 1

    reply = cli(repo, "reply", "plans/calc.md", "retry", "floats", "are", "fine")
    assert reply.returncode == 0, reply.stderr
    assert "plan-runner run plans/calc.md" in reply.stderr
    entry = [e for e in ledger(repo) if e["type"] == "reply"][-1]
    assert (entry["command"], entry["text"], entry["user"]) == ("retry", "floats are fine", "Maintainer")

    done = cli(repo, "run", "plans/calc.md")
    assert done.returncode == 0, done.stderr
    assert "git merge --no-ff plan-runner/calc" in done.stderr and "git switch main" in done.stderr
    state = fold_ledger(repo)
    assert state.finished and state.last.outcome.value == "Advanced"


def test_reply_to_a_plan_that_is_not_parked_is_a_clear_error(tmp_path):
    """`reply` on a plan that never ran says so (exit 2) and records nothing."""
    repo = make_repo(tmp_path)
    proc = cli(repo, "reply", "plans/calc.md", "resume")
    assert proc.returncode == 2 and "nothing to answer" in proc.stderr and "fix:" in proc.stderr
    assert not has_state(repo)


def test_reply_stop_then_run_stays_parked(tmp_path):
    """`reply stop` ends the plan: `run` starts no session and exits parked."""
    repo = make_repo(tmp_path)
    assert cli(repo, "run", "plans/calc.md").returncode == 3
    assert cli(repo, "reply", "plans/calc.md", "stop").returncode == 0
    proc = cli(repo, "run", "plans/calc.md")
    assert proc.returncode == 3 and "stopped by" in proc.stderr
    assert len(list(tmp_path.glob("env.*"))) == 1


# --- 3. preflight ------------------------------------------------------------------------------------


def test_preflight_missing_claude_binary_stops_before_recording_anything(tmp_path):
    """A claude-code plan whose `claude` does not exist stops with what/why/fix, exit 2, no state written."""
    repo = make_repo(tmp_path, backend="claude-code", agent_extra=f"executable: {tmp_path / 'no-such-claude'}")
    proc = cli(repo, "run", "plans/calc.md", env={"ANTHROPIC_API_KEY": "sk-ant-test"})
    assert proc.returncode == 2
    assert "preflight" in proc.stderr and "cannot be found" in proc.stderr and "fix:" in proc.stderr
    assert not has_state(repo) and git(repo, "branch", "--list", "plan-runner/calc") == ""


def test_preflight_missing_credentials_for_the_backend(tmp_path):
    """A codex plan without OPENAI_API_KEY stops before any session, even when an Anthropic key is set."""
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    repo = make_repo(tmp_path, backend="codex", agent_extra=f"executable: {fake}")
    env = {"ANTHROPIC_API_KEY": "sk-ant-test", "HOME": str(tmp_path)}
    proc = cli(repo, "session", "plans/calc.md", env={**env, "OPENAI_API_KEY": ""})
    assert proc.returncode == 2 and "no credentials for the codex backend" in proc.stderr
    assert "OPENAI_API_KEY" in proc.stderr and not has_state(repo)


def test_preflight_gate_command_not_found_and_validate_warns(tmp_path):
    """A gate whose command is on no PATH stops `run` (not GatesRed blamed on the agent); `validate` warns of it."""
    repo = make_repo(tmp_path, gate="no-such-test-runner-xyz --all")
    proc = cli(repo, "run", "plans/calc.md")
    assert proc.returncode == 2 and "no-such-test-runner-xyz" in proc.stderr and "not found" in proc.stderr
    assert not has_state(repo) and not list(tmp_path.glob("env.*"))
    checked = cli(repo, "validate", "plans/calc.md")
    assert checked.returncode == 0 and "warning" in checked.stdout and "no-such-test-runner-xyz" in checked.stdout


def test_a_later_session_checks_the_agent_only_and_run_checks_everything(tmp_path):
    """The commands are checked on a fresh, set-up checkout before a plan's first session and at every `run`;
    a later `session` (an Actions job) checks the agent only, sparing a second checkout of the whole tree: a gate
    the maintainer broke since is met by the session itself, which blames no one."""
    from tests.reliability_world import MUL_STEP, make_repo as make_plan_repo, run_session, script

    repo = make_plan_repo(tmp_path, script([MUL_STEP, {"commit": "Add mul"}], [{"say": "second"}],
                                           [{"say": "third"}]), remote=False)
    assert run_session(repo).returncode == 0
    plan = repo / "plans" / "calc.md"
    plan.write_text(plan.read_text().replace(f"run: {sys.executable} -m unittest", "run: no-such-test-runner-xyz"))
    git(repo, "commit", "-qam", "a gate that runs nothing")
    run = cli(repo, "run", "plans/calc.md")
    assert run.returncode == 2 and "preflight" in run.stderr and "no-such-test-runner-xyz" in run.stderr
    assert [e["type"] for e in ledger(repo)].count("session") == 1  # `run` stopped before recording anything
    later = run_session(repo)
    assert "preflight" not in later.stderr and "Traceback" not in later.stderr, later.stderr
    record = [e for e in ledger(repo) if e["type"] == "session"][-1]
    assert record["n"] == 2 and record["blame"] != "agent", record


# --- 6. interruptions -------------------------------------------------------------------------------


def test_ctrl_c_is_recorded_as_interrupted_and_burns_nothing(tmp_path):
    """SIGINT mid-session: exit 130, the agent stopped, an `Interrupted` record with no blame and no attempt
    or resume used; the next run runs the same session again."""
    repo = make_repo(tmp_path)
    (tmp_path / "sleep").touch()
    e = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    e.update(PYTHONPATH=str(ROOT), **AGENT_IDENTITY)
    proc = subprocess.Popen([sys.executable, "-m", "runner", "run", "plans/calc.md"], cwd=repo, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("env.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    records = [x for x in ledger(repo) if x["type"] == "session"]
    assert [(r["outcome"], r["blame"]) for r in records] == [("Interrupted", "none")]
    state = fold_ledger(repo)
    assert state.stage_attempts.get(1, 0) == 0 and state.consecutive_stalls == 0 and state.open_session is None
    assert state.pending.kind.value == "delivery" and state.pending.checkpoint == "1.1"
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "agent.sh")], capture_output=True).returncode == 1

    (tmp_path / "sleep").unlink()
    status = cli(repo, "status", "--json")
    assert json.loads(status.stdout)[0]["last_outcome"] == "Interrupted"
    assert cli(repo, "run", "plans/calc.md").returncode == 3  # the same session ran again (and asked a human)
    assert [x["outcome"] for x in ledger(repo) if x["type"] == "session"] == ["Interrupted", "NeedsHuman"]


# --- 7. logs -----------------------------------------------------------------------------------------


def test_logs_show_what_a_scripted_agent_did(tmp_path):
    """`plan-runner logs PLAN [N]` prints the agent's words, tool calls and their results as text."""
    script = tmp_path / "script.yaml"
    script.write_text("sessions:\n"
                      "  - - say: \"I will add mul.\"\n"
                      "    - write: {path: calc/mul.py, content: \"def mul(a, b):\\n    return a * b\\n\"}\n"
                      "    - run: \"echo written-by-the-agent\"\n"
                      "    - commit: \"Add mul\"\n")
    repo = make_repo(tmp_path, backend="script", agent_extra=f"script: {script}")
    assert cli(repo, "session", "plans/calc.md").returncode == 0
    proc = cli(repo, "logs", "plans/calc.md", "1")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("session 1 (delivery on 1.1): Progress")
    assert "agent: I will add mul." in text and "tool write: calc/mul.py" in text
    assert "written-by-the-agent" in text and "tool commit" in text
    missing = cli(repo, "logs", "plans/calc.md", "7")
    assert missing.returncode == 2 and "no session 7" in missing.stderr


# --- 8. status -----------------------------------------------------------------------------------------


def test_status_survives_an_invalid_plan_and_works_from_a_subdirectory(tmp_path):
    """One invalid plan is reported on its own row; the others still show, in the table and in --json,
    from any subdirectory of the repository."""
    repo = make_repo(tmp_path, extra_plans={"broken.md": "---\nagent: [\n---\n# Broken\n"})
    sub = repo / "calc"
    table = cli(repo, "status", cwd=sub)
    assert table.returncode == 1
    assert "calc" in table.stdout and "broken.md" in table.stderr
    rows = json.loads(cli(repo, "status", "--json", cwd=sub).stdout)
    assert {r["plan"] for r in rows} == {"broken", "calc"}
    assert [r for r in rows if r["plan"] == "calc"][0]["sessions"] == 0
    assert [r for r in rows if r["plan"] == "broken"][0]["error"]


def test_status_outside_a_repository_is_a_clear_error(tmp_path):
    """Outside any git repository `status` exits 2 with what/why/fix, not an empty table."""
    outside = tmp_path / "nowhere"
    outside.mkdir()
    proc = cli(outside, "status", env={"GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert proc.returncode == 2 and "not inside a git repository" in proc.stderr and proc.stdout == ""


# --- 9. costs in tables -------------------------------------------------------------------------------


def test_sessions_table_and_status_have_a_cost_column(tmp_path):
    """The sessions table and `status` show a cost column (`-` when the backend reports none)."""
    repo = make_repo(tmp_path)
    proc = cli(repo, "run", "plans/calc.md")
    assert "cost" in proc.stdout.splitlines()[2] or any("cost" in line for line in proc.stdout.splitlines()[:5])
    status = cli(repo, "status")
    assert "cost" in status.stdout
    assert "cost_usd" in json.loads(cli(repo, "status", "--json").stdout)[0]


def test_a_failed_start_is_recorded_as_interrupted_not_timed_out(tmp_path):
    """An agent that cannot start (its interpreter is missing) stops `session` with what/why/fix and is
    recorded as Interrupted with no blame; once it is fixed, the next session runs the same checkpoint."""
    agent = tmp_path / "agent.sh"
    repo = make_repo(tmp_path)
    agent.write_text("#!/nonexistent/interpreter\n" + agent.read_text().split("\n", 1)[1])
    proc = cli(repo, "session", "plans/calc.md")
    assert proc.returncode == 2 and "cannot start the agent" in proc.stderr and "fix:" in proc.stderr
    records = [x for x in ledger(repo) if x["type"] == "session"]
    assert [(r["outcome"], r["blame"]) for r in records] == [("Interrupted", "none")]
    assert "cannot start the agent" in records[0]["reasons"][0]
    assert fold_ledger(repo).stage_attempts.get(1, 0) == 0

    agent.write_text(AGENT.format(dump=tmp_path / "env", tmp=tmp_path))
    assert cli(repo, "session", "plans/calc.md").returncode == 3  # it ran (and asked for a human)
    assert [x["outcome"] for x in ledger(repo) if x["type"] == "session"] == ["Interrupted", "NeedsHuman"]
