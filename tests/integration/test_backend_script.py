"""The script backend plays scripted sessions as a real supervised child process on a real git repository."""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import git
import pytest

from runner.adapters.sandbox.agentenv import build_agent_env
from runner.backends.common.base import SessionRequest, get_backend
from runner.backends.script.backend import parse_script
from runner.core.errors import PlanRunnerError
from runner.core.evidence import ExitKind
from runner.core.plan import AgentConfig

pytestmark = pytest.mark.integration

PLAN = """\
---
agent:
  backend: script
  script: script.yaml
gates:
  - name: tests
    run: "true"
---
# Demo

## Stage 1: First <!-- sessions: 1 -->
- [ ] 1.1 Make a thing <!-- verify: test -f thing.txt -->
- [ ] 1.2 Make another thing

## Stage 2: Second
- [ ] 2.1 Decide something
"""


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    work = tmp_path / "work"
    work.mkdir()
    r = git.Repo.init(work, initial_branch="main")
    with r.config_writer() as cw:
        cw.set_value("user", "name", "Test")
        cw.set_value("user", "email", "test@example.invalid")
    (work / "plans").mkdir()
    (work / "plans" / "demo.md").write_text(PLAN)
    r.index.add(["plans/demo.md"])
    r.index.commit("plan")
    yield r
    r.close()


def _request(repo: git.Repo, script: str, *, env: dict[str, str] | None = None, events=None, **agent) -> SessionRequest:
    work = Path(repo.working_tree_dir)
    (work / "script.yaml").write_text(textwrap.dedent(script))
    repo.index.add(["script.yaml"])
    repo.index.commit("script")
    agent.setdefault("stall_minutes", "5s")
    agent.setdefault("time_limit_minutes", "20s")
    config = AgentConfig(backend="script", script="script.yaml", **agent)
    kwargs = {"on_event": (lambda e, d: events.append((e, d)))} if events is not None else {}
    return SessionRequest(
        workdir=work, prompt="Do checkpoint 1.1", agent=config,
        env=env if env is not None else build_agent_env(os.environ),
        transcript_dir=work.parent / "transcripts", plan_path=Path("plans/demo.md"),
        handoff_path=Path("plans/demo.handoff.md"), **kwargs,
    )


def _run(request: SessionRequest):
    return get_backend("script").run(request)


def _plan_line(repo: git.Repo, cid: str) -> str:
    text = (Path(repo.working_tree_dir) / "plans" / "demo.md").read_text()
    return next(line for line in text.splitlines() if f"] {cid} " in line)


def test_full_session_edits_commits_and_reports(repo):
    """Writes, commits, a checkbox flip, a handoff, tokens and claims all happen for real and are reported."""
    events: list[tuple[str, str]] = []
    request = _request(repo, """\
        - - write: {path: thing.txt, content: "hello\\n"}
          - append: {path: thing.txt, content: "more\\n"}
          - run: "ls thing.txt"
          - check: "1.1"
          - commit: "Make a thing"
          - handoff: "1.1 done; next 1.2"
          - tokens: {input: 100, output: 50}
          - say: "All tests pass, done"
        """, events=events)
    signals = _run(request)
    work = Path(repo.working_tree_dir)
    assert signals.exit_kind is ExitKind.FINISHED
    assert signals.exit_code == 0
    assert signals.agent_session_id == "script-1"
    assert (work / "thing.txt").read_text() == "hello\nmore\n"
    assert repo.head.commit.message.strip() == "Make a thing"
    assert set(repo.head.commit.stats.files) == {"thing.txt", "plans/demo.md"}
    assert _plan_line(repo, "1.1").startswith("- [x] 1.1 Make a thing <!-- verify:")
    assert (work / "plans" / "demo.handoff.md").read_text() == "1.1 done; next 1.2\n"
    assert (signals.input_tokens, signals.output_tokens, signals.total_tokens) == (100, 50, 150)
    assert signals.tool_calls == 6 and signals.tool_failures == 0 and signals.last_tool == "handoff"
    assert signals.hints.final_text == "All tests pass, done"
    assert "all tests pass" in signals.hints.claims and signals.hints.claimed_done is True
    assert signals.output_bytes > 0
    assert ("tool", "commit") in events and ("tokens", "150") in events


def test_sessions_are_consumed_in_order_and_exhaustion_crashes(repo):
    """Each run plays the next session; when none is left the session crashes saying so."""
    request = _request(repo, """\
        sessions:
          - [{say: "first"}]
          - {id: custom, steps: [{say: "second"}]}
        """)
    first, second, third = _run(request), _run(request), _run(request)
    assert (first.hints.final_text, first.agent_session_id) == ("first", "script-1")
    assert (second.hints.final_text, second.agent_session_id) == ("second", "custom")
    assert third.exit_kind is ExitKind.CRASHED
    assert "exhausted" in third.error


def test_resume_plays_next_entry_under_the_resumed_id(repo):
    """Resuming a session keeps its agent session id and plays the next script entry."""
    request = _request(repo, "- [{say: one}]\n- [{say: two}]\n")
    first = _run(request)
    resumed = _run(replace(request, resume_session_id=first.agent_session_id))
    assert resumed.agent_session_id == "script-1"
    assert resumed.hints.final_text == "two"


def test_block_and_uncheck_edit_the_tracker(repo):
    """block marks a checkpoint BLOCKED with its reason; uncheck clears a DONE box."""
    _run(_request(repo, """\
        - - check: "1.2"
          - uncheck: "1.2"
          - block: {id: "2.1", reason: "needs a decision on token lifetime"}
        """))
    assert _plan_line(repo, "1.2") == "- [ ] 1.2 Make another thing"
    assert _plan_line(repo, "2.1") == "- [ ] 2.1 Decide something BLOCKED: needs a decision on token lifetime"


def test_missing_checkpoint_is_a_failed_tool_call(repo):
    """Checking an id that is not in the plan fails that tool call; the session goes on."""
    signals = _run(_request(repo, '- [{check: "9.9"}, {say: "carried on"}]\n'))
    assert signals.exit_kind is ExitKind.FINISHED
    assert signals.tool_failures == 1
    assert signals.hints.final_text == "carried on"


def test_delete_and_failed_run(repo):
    """delete removes a file; a failing run step counts as a failed tool call."""
    work = Path(repo.working_tree_dir)
    (work / "gone.txt").write_text("x")
    signals = _run(_request(repo, '- [{delete: gone.txt}, {run: "exit 3"}]\n'))
    assert not (work / "gone.txt").exists()
    assert signals.tool_calls == 2 and signals.tool_failures == 1


def test_rate_limit_reports_reset_time(repo):
    """A rate_limit step ends the session as RATE_LIMIT with a reset time reset_in seconds ahead."""
    before = datetime.now(UTC)
    signals = _run(_request(repo, "- [{say: working}, {rate_limit: {reset_in: 3}}]\n"))
    assert signals.exit_kind is ExitKind.RATE_LIMIT
    assert before + timedelta(seconds=2) < signals.reset_at < before + timedelta(seconds=10)


@pytest.mark.parametrize(("step", "kind", "error"), [
    ('{transient: "overloaded"}', ExitKind.TRANSIENT, "overloaded"),
    ("auth_error", ExitKind.AUTH, "invalid api key"),
    ('{exit: {code: 1, error: "boom: tool crashed"}}', ExitKind.CRASHED, "boom: tool crashed"),
])
def test_error_steps_map_to_exit_kinds(repo, step, kind, error):
    """transient, auth_error and exit with an error end the session with the matching exit kind and error."""
    signals = _run(_request(repo, f"- [{{say: hi}}, {step}, {{say: never}}]\n"))
    assert signals.exit_kind is kind
    assert signals.error == error
    assert signals.hints.final_text != "never"


def test_exit_zero_ends_session_early_as_finished(repo):
    """exit with code 0 stops playing the session and counts as a normal finish."""
    signals = _run(_request(repo, "- [{say: a}, {exit: 0}, {say: b}]\n"))
    assert signals.exit_kind is ExitKind.FINISHED
    assert signals.hints.final_text == "a"


def test_silent_step_stalls(repo):
    """A silent step longer than the stall limit is killed and reported STALLED."""
    signals = _run(_request(repo, "- [{say: hi}, {silent: 10}]\n", stall_minutes="1s"))
    assert signals.exit_kind is ExitKind.STALLED
    assert signals.exit_code is None
    assert signals.duration_s < 5


def test_busy_sleep_hits_time_limit_not_stall(repo):
    """A sleep step keeps printing, so only the time limit stops it."""
    signals = _run(_request(repo, "- [{sleep: 10}]\n", stall_minutes="3s", time_limit_minutes="1.2s"))
    assert signals.exit_kind is ExitKind.TIME_LIMIT


def test_token_budget_nudges_then_stops(repo):
    """The meter nudges at 80 % and 85 % through stdin (the child logs each), then stops at 100 %."""
    request = _request(repo, """\
        - - tokens: 800
          - wait_nudge: 3
          - tokens: 50
          - sleep: 0.3
          - tokens: 200
          - sleep: 10
        """, session_tokens=1000)
    signals = _run(request)
    assert signals.exit_kind is ExitKind.TOKEN_BUDGET
    assert signals.nudges == 2
    transcript = [json.loads(line) for line in (request.transcript_dir / "script-1.jsonl").read_text().splitlines()]
    received = [m for m in transcript if m["type"] == "nudge"]
    assert [m["count"] for m in received] == [1, 2]
    assert "handoff" in received[0]["text"]
    assert any(m.get("text") == "heeding the nudge: wrapping up" for m in transcript)
    assert signals.duration_s < 5


def test_front_matter_tampering_changes_the_plan(repo):
    """edit_front_matter really changes the configuration block (for tamper detection tests)."""
    _run(_request(repo, '- [{edit_front_matter: {replace: "run: \\"true\\"", with: "run: \\"false\\""}}]\n'))
    text = (Path(repo.working_tree_dir) / "plans" / "demo.md").read_text()
    assert 'run: "false"' in text.split("\n---", 1)[0]


def test_env_dump_shows_no_github_token(repo, monkeypatch):
    """The scripted agent's process has the allow-listed environment: no GitHub token, its API key present."""
    parent = dict(os.environ, GITHUB_TOKEN="ghs_secret", GH_TOKEN="ghp_secret", ANTHROPIC_API_KEY="sk-test")
    _run(_request(repo, '- [{env_dump: env.json}]\n', env=build_agent_env(parent)))
    dumped = json.loads((Path(repo.working_tree_dir) / "env.json").read_text())
    assert "GITHUB_TOKEN" not in dumped and "GH_TOKEN" not in dumped
    assert dumped["ANTHROPIC_API_KEY"] == "sk-test"


def test_work_tree_module_cannot_shadow_the_agent(repo):
    """A json.py in the work tree does not break the scripted agent (it runs with a safe sys.path)."""
    (Path(repo.working_tree_dir) / "json.py").write_text("raise SystemExit('shadowed')\n")
    signals = _run(_request(repo, "- [{say: fine}]\n"))
    assert signals.exit_kind is ExitKind.FINISHED
    assert signals.hints.final_text == "fine"


@pytest.mark.parametrize(("script", "needle"), [
    ("- [{fly: away}]", "unknown step 'fly'"),
    ("- [{write: {path: x}}]", "bad argument for `write`"),
    ("[]", "non-empty list"),
    ("- [{say: a, tokens: 3}]", "single `kind: argument`"),
    ("- {foo: [1]}", "session 1 is not a list"),
    ("sessions: [: bad", "not valid YAML"),
])
def test_bad_scripts_are_user_errors(script, needle):
    """A malformed script is a PlanRunnerError that names the problem and the fix."""
    with pytest.raises(PlanRunnerError) as info:
        parse_script(script, "s.yaml")
    assert needle in info.value.what
    assert info.value.fix


def test_missing_script_file_is_a_user_error(repo):
    """A script path that does not exist is a PlanRunnerError pointing at agent.script."""
    request = _request(repo, "- [{say: x}]\n")
    (Path(repo.working_tree_dir) / "script.yaml").unlink()
    with pytest.raises(PlanRunnerError) as info:
        _run(request)
    assert "agent.script" in info.value.fix


def test_rate_limit_at_a_given_time_and_front_matter_line(repo):
    """rate_limit with reset_at reports exactly that time; edit_front_matter with a string adds a config line."""
    signals = _run(_request(repo, """\
        - - edit_front_matter: "budget: {max_sessions: 99}"
          - rate_limit: {reset_at: "2031-01-02T03:04:05+00:00", message: "usage limit"}
        """))
    assert signals.exit_kind is ExitKind.RATE_LIMIT
    assert signals.reset_at == datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert signals.error == "usage limit"
    front = (Path(repo.working_tree_dir) / "plans" / "demo.md").read_text().split("\n---", 1)[0]
    assert front.endswith("budget: {max_sessions: 99}")
