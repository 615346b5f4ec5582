"""Sessions on real repositories, driven through the real CLI by scripted and hand-written agents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.reliability_world import git, write_calc_project
from runner.adapters.sandbox.agent_clone import area_for
from runner.adapters.store.state import ledger_text

pytestmark = pytest.mark.integration

PLAN = """\
---
agent:
  backend: {backend}
  {agent_extra}
  stall_minutes: 1.5s
  time_limit_minutes: 20s
  session_tokens: 10000
gates:
  - name: tests
    run: {python} -m unittest discover -s tests -q
budget:
  max_sessions: 10
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 2 -->
- [ ] 1.1 Multiplication
- [ ] 1.2 Division

## Stage 2: Docs <!-- sessions: 1 -->
- [ ] 2.1 README
"""


def make_repo(tmp_path: Path, script: str | None = None, agent: str | None = None) -> Path:
    repo = tmp_path / "repo"
    write_calc_project(repo)
    if script is not None:
        (tmp_path / "script.yaml").write_text(textwrap.dedent(script))
        extra, backend = f"script: {tmp_path / 'script.yaml'}", "script"
    else:
        (tmp_path / "agent.sh").write_text(agent)
        (tmp_path / "agent.sh").chmod(0o755)
        extra, backend = f"executable: {tmp_path / 'agent.sh'}", "command"
    (repo / "plans" / "calc.md").write_text(PLAN.format(backend=backend, agent_extra=extra, python=sys.executable))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "T")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def session(repo: Path, *extra: str, env: dict | None = None) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md", "--json", *extra],
                          cwd=repo, capture_output=True, text=True, env=env or dict(os.environ), timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


MUL = "{path: calc/mul.py, content: \"def mul(a, b):\\n    return a * b\\n\"}"


def test_genuine_work_advances_and_is_recorded_in_the_ledger(tmp_path):
    """Work commits plus a flip with green gates is Advanced; the ledger on refs/plan-runner/state/calc records it."""
    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
            - commit: "Add mul"
            - check: "1.1"
            - commit: "Tick 1.1"
            - tokens: 1234
        """)
    code, out, _ = session(repo)
    assert code == 0 and out["outcome"] == "Advanced" and out["blame"] == "none"
    assert out["next_action"]["kind"] == "delivery" and out["next_action"]["checkpoint"] == "1.2"
    assert len(out["work_commits"]) == 1 and out["gates"][0]["passed"] is True
    ledger = ledger_text(repo, "refs/plan-runner/state/calc").splitlines()
    assert [json.loads(x)["type"] for x in ledger] == ["started", "session", "dispatch"]
    assert git(repo, "status", "--porcelain") == ""


def test_lying_agent_is_no_progress_whatever_it_says(tmp_path):
    """An agent that claims success and did nothing is NoProgress; the claim appears only as a hint."""
    repo = make_repo(tmp_path, """
        sessions:
          - - say: "All done. All tests pass. Checkpoint 1.1 complete."
        """)
    code, out, _ = session(repo)
    assert out["outcome"] == "NoProgress" and out["blame"] == "agent"
    assert out["attempts"]["1"]["used"] == 1
    assert any("claimed" in r for r in out["reasons"])


def test_ticking_the_tracker_only_is_rejected_and_reverted(tmp_path):
    """A checkpoint flipped without work is a rejected claim, reverted on the work branch."""
    repo = make_repo(tmp_path, """
        sessions:
          - - check: "1.1"
            - commit: "Tick 1.1"
            - say: "Done"
        """)
    _, out, _ = session(repo)
    assert out["outcome"] == "NoProgress"
    assert out["rejected_flips"] == ["1.1: no work commits back it"]
    assert "- [ ] 1.1" in git(repo, "show", "plan-runner/calc:plans/calc.md")


def test_uncommitted_work_becomes_a_wip_commit_that_is_not_progress(tmp_path):
    """Leftovers are committed as a marked WIP commit: never lost, never counted."""
    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
        """)
    _, out, _ = session(repo)
    assert out["outcome"] == "NoProgress"
    log = git(repo, "log", "--format=%s%n%b", "plan-runner/calc")
    assert "plan-runner: WIP" in log and "Plan-Runner-WIP: true" in log
    assert git(repo, "show", "plan-runner/calc:calc/mul.py").startswith("def mul")


def test_editing_the_gates_parks_and_is_reverted(tmp_path):
    """An agent edit of the front matter is tampering: parked, reverted, reported."""
    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
            - edit_front_matter: {{replace: "-m unittest discover -s tests -q", with: "-c 'print(1)'"}}
            - commit: "Make the gates easier"
        """)
    code, out, _ = session(repo)
    assert code == 3 and out["outcome"] == "NeedsHuman"
    assert any("protected configuration" in r for r in out["reasons"])
    assert "unittest discover" in git(repo, "show", "plan-runner/calc:plans/calc.md")
    report = Path(out["url"]).read_text()
    assert "needs a human" in report and "plan-runner reply plans/calc.md resume" in report and "/plan-runner resume" not in report


def test_silent_agent_stalls_and_the_next_session_resumes_it(tmp_path):
    """No output for stall_minutes is Stalled; the next session resumes the same agent session."""
    repo = make_repo(tmp_path, """
        sessions:
          - id: quiet
            steps:
              - say: "thinking"
              - silent: 20
        """)
    _, out, _ = session(repo)
    assert out["outcome"] == "Stalled"
    assert out["next_action"]["kind"] == "resume" and out["next_action"]["resume_session_id"]


def test_work_committed_before_a_stall_backs_the_resumed_session_that_ticks(tmp_path):
    """The agent commits its work, then goes quiet; the resumed session only ticks the checkpoint. The stalled
    session's commit was never judged, so it backs the flip: Advanced, not NoProgress with the tick reverted."""
    repo = make_repo(tmp_path, """
        sessions:
          - id: worker
            steps:
              - write: {path: calc/mul.py, content: "def mul(a, b):\\n    return a * b\\n"}
              - commit: "Add mul"
              - silent: 20
          - - check: "1.1"
            - commit: "Tick 1.1"
        """)
    _, first, _ = session(repo)
    assert first["outcome"] == "Stalled" and first["next_action"]["kind"] == "resume"
    _, second, _ = session(repo)
    assert second["outcome"] == "Advanced", second
    assert second["rejected_flips"] == [] and any("earlier session(s)" in r for r in second["reasons"])
    assert "- [x] 1.1" in git(repo, "show", "plan-runner/calc:plans/calc.md")


def test_token_budget_rolls_over_without_burning_an_attempt(tmp_path):
    """Past session_tokens the agent is stopped: RolledOver, blamed on the environment."""
    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
            - commit: "Add mul"
            - tokens: 8500
            - wait_nudge: 3
            - handoff: "mul done; tests next"
            - tokens: 3000
        """)
    _, out, _ = session(repo)
    assert out["outcome"] == "RolledOver" and out["blame"] == "environment"
    assert out["next_action"]["kind"] == "handoff" and out["attempts"]["1"]["used"] == 0


def test_rate_limit_waits_until_the_reset_time(tmp_path):
    """A limit is LimitBackoff until the backend's reset time; running again before then runs nothing."""
    repo = make_repo(tmp_path, """
        sessions:
          - - rate_limit: {reset_in: 600}
        """)
    _, out, _ = session(repo)
    assert out["outcome"] == "LimitBackoff" and out["next_action"]["action"] == "wait"
    code, again, _ = session(repo)
    assert code == 0 and again["status"] == "waiting" and again["outcome"] is None


def test_command_backend_lying_script_is_judged_by_evidence(tmp_path):
    """A hand-written agent executable that prints success but exits 1 is an AgentError."""
    repo = make_repo(tmp_path, agent="#!/bin/sh\necho 'All tests pass, task complete'\nexit 1\n")
    _, out, _ = session(repo)
    assert out["outcome"] == "AgentError" and out["next_action"]["kind"] == "fix-error"


def test_killed_job_is_reconciled_as_timed_out_and_loses_no_commit(tmp_path):
    """SIGKILL mid-session: the next run classifies it TimedOut and the agent's commit survives."""
    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
            - commit: "Add mul"
            - sleep: 30
          - - write: {{path: calc/div.py, content: "x = 1\\n"}}
        """)
    proc = subprocess.Popen([sys.executable, "-m", "runner", "session", "plans/calc.md"], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    # the agent commits in its own repository, outside the judge's: in a room, in its upper layer (the tree at work/ is
    # an overlay only its room shows)
    agents_clone = area_for(repo, "calc").upper
    deadline = time.monotonic() + 120  # generous: the session's start-up is slow on a loaded machine
    while time.monotonic() < deadline:
        # check=False: while `git worktree add` makes plan-runner's own work tree, git itself leaves a null
        # HEAD there for a moment, and `git log --all` says "bad object worktrees/tree/HEAD"
        logs = git(repo, "log", "--all", "--format=%s", check=False)
        if (agents_clone / ".git").is_dir():
            logs += git(agents_clone, "-c", "safe.directory=*", "log", "--all", "--format=%s", check=False)
        if "Add mul" in logs:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # (also when the agent never committed: no process outlives the test)
    proc.wait()
    assert "Add mul" in logs, "the agent never committed: nothing to kill it after"
    # The next run reconciles, then runs a session of its own, which this test does not look at: its agent (the
    # killed job's cursor was never saved, so it plays the script from the start) says a word instead of waiting
    # out the 20 s time limit in `sleep: 30`.
    (tmp_path / "script.yaml").write_text("sessions:\n  - - say: the next session\n")
    code, out, err = session(repo)
    ledger = [json.loads(x) for x in ledger_text(repo, "refs/plan-runner/state/calc").splitlines()]
    reconciled = [e for e in ledger if e["type"] == "session" and e.get("reconciled")]
    assert reconciled and reconciled[0]["outcome"] == "TimedOut", (code, out, err[-3000:])
    assert "Add mul" in git(repo, "log", "--format=%s", "plan-runner/calc")


def test_uncommitted_user_changes_are_no_reason_to_refuse_and_stay_theirs(tmp_path):
    """plan-runner works in a work tree of its own: a user's uncommitted file neither blocks a session nor is
    committed by it (tests/integration/test_own_workspace.py has the user working during a session)."""
    repo = make_repo(tmp_path, "sessions:\n  - - say: hi\n")
    (repo / "notes.txt").write_text("mine")
    proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md"], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (repo / "notes.txt").read_text() == "mine" and git(repo, "status", "--porcelain") == "?? notes.txt"
    assert "notes.txt" not in git(repo, "ls-tree", "-r", "--name-only", "plan-runner/calc")


def test_run_loop_reaches_the_end_and_status_reports_it(tmp_path):
    """`plan-runner run` loops to the finished plan; `status --json` shows it."""
    repo = make_repo(tmp_path, f"""
        sessions:
          - - write: {MUL}
            - commit: "Add mul"
            - check: "1.1"
            - commit: "Tick"
          - - write: {{path: calc/div.py, content: "def div(a, b):\\n    return a / b\\n"}}
            - commit: "Add div"
            - check: "1.2"
            - commit: "Tick"
          - - write: {{path: README.md, content: "# calc\\n"}}
            - commit: "Docs"
            - check: "2.1"
            - commit: "Tick"
        """)
    proc = subprocess.run([sys.executable, "-m", "runner", "run", "plans/calc.md"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    status = json.loads(subprocess.run([sys.executable, "-m", "runner", "status", "--json"], cwd=repo,
                                       capture_output=True, text=True, check=True).stdout)
    assert status[0]["finished"] and status[0]["done"] == 3 and status[0]["sessions"] == 3


def test_session_inside_github_actions_is_the_action_session(tmp_path):
    """With GITHUB_ACTIONS=true, `session` runs the GitHub job (here: a clear error for a missing repository);
    `--local` runs locally anyway."""
    repo = make_repo(tmp_path, f"sessions:\n  - - write: {MUL}\n    - commit: 'Add mul'\n")
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(tmp_path / "nowhere"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_OUTPUT": str(tmp_path / "out.txt")}
    proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md"], cwd=repo,
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "::error title=plan-runner::GITHUB_REPOSITORY" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    code, out, _ = session(repo, "--local", env=env)
    assert code == 0 and out["outcome"] == "Progress"
