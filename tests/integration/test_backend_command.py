"""The command backend runs any CLI under supervision and reads limits, auth and crashes from its text."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.adapters.sandbox.agentenv import build_agent_env
from runner.backends.common.base import SessionRequest, get_backend
from runner.backends.command.backend import build_argv, classify_command_exit
from runner.core.errors import PlanRunnerError
from runner.core.evidence import ExitKind
from runner.core.plan import AgentConfig
from runner.adapters.sandbox.supervise import ProcessExit


def _cli(tmp_path: Path, body: str, name: str = "agent-cli") -> Path:
    """An executable Python script standing in for an agent CLI."""
    path = tmp_path / "work" / "bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport os, sys, time, json\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _request(tmp_path: Path, *, env: dict[str, str] | None = None, **agent) -> SessionRequest:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    agent.setdefault("executable", "./bin/agent-cli")
    agent.setdefault("stall_minutes", "5s")
    agent.setdefault("time_limit_minutes", "20s")
    return SessionRequest(
        workdir=work, prompt="Implement checkpoint 1.1", agent=AgentConfig(backend="command", **agent),
        env=env if env is not None else build_agent_env(os.environ), transcript_dir=tmp_path / "transcripts",
        plan_path=Path("plans/p.md"), handoff_path=Path("plans/p.handoff.md"),
    )


def _run(request: SessionRequest):
    return get_backend("command").run(request)


@pytest.mark.integration
def test_prompt_through_stdin_and_finish(tmp_path):
    """The prompt arrives on stdin; a clean exit is FINISHED with the output as hints and zero tokens."""
    _cli(tmp_path, "prompt = sys.stdin.read()\nprint('got: ' + prompt)\nprint('All tests pass, done')\n")
    signals = _run(_request(tmp_path))
    assert signals.exit_kind is ExitKind.FINISHED
    assert signals.exit_code == 0
    assert "got: Implement checkpoint 1.1" in signals.hints.final_text
    assert "all tests pass" in " ".join(signals.hints.claims)
    assert signals.total_tokens == 0
    assert signals.output_bytes > 0


@pytest.mark.integration
@pytest.mark.parametrize("args", [("--prompt", "{prompt_file}", "--model", "{model}"), ()])
def test_prompt_through_file(tmp_path, args):
    """prompt_via file writes the prompt to a file named by {prompt_file}, or appended as the last argument."""
    _cli(tmp_path, "print(json.dumps(sys.argv[1:]))\nprint(open(sys.argv[-1 if len(sys.argv) == 2 else 2]).read())\n")
    signals = _run(_request(tmp_path, prompt_via="file", args=args, model="m1"))
    assert signals.exit_kind is ExitKind.FINISHED
    assert "Implement checkpoint 1.1" in signals.hints.final_text
    argv = json.loads(signals.hints.final_text.splitlines()[0])
    assert argv[-1] == "m1" if args else argv[0].endswith("prompt.md")


@pytest.mark.integration
def test_rate_limit_with_reset_time(tmp_path):
    """A non-zero exit with a limit message is RATE_LIMIT, with the reset time read from it."""
    _cli(tmp_path, "sys.stderr.write('Error: 429 rate limit exceeded. Try again in 45 seconds.\\n')\nsys.exit(1)\n")
    before = datetime.now(UTC)
    signals = _run(_request(tmp_path))
    assert signals.exit_kind is ExitKind.RATE_LIMIT
    assert before + timedelta(seconds=44) <= signals.reset_at <= before + timedelta(seconds=50)
    assert "429" in signals.error


@pytest.mark.integration
def test_plan_limit_and_reset_patterns(tmp_path):
    """The plan's own limit_patterns and reset_pattern replace the defaults."""
    _cli(tmp_path, "print('QUOTA_HIT cooldown=120')\nsys.exit(2)\n")
    before = datetime.now(UTC)
    signals = _run(_request(tmp_path, limit_patterns=("QUOTA_HIT",), reset_pattern=r"cooldown=(\d+)"))
    assert signals.exit_kind is ExitKind.RATE_LIMIT
    assert before + timedelta(seconds=119) <= signals.reset_at <= before + timedelta(seconds=125)


@pytest.mark.integration
def test_usage_limit_on_last_line_of_clean_exit(tmp_path):
    """A CLI that exits 0 but whose last line announces a usage limit is RATE_LIMIT."""
    _cli(tmp_path, "print('working')\nprint(\"You've hit your usage limit. Try again in 2 hours.\")\n")
    signals = _run(_request(tmp_path))
    assert signals.exit_kind is ExitKind.RATE_LIMIT
    assert signals.reset_at is not None


@pytest.mark.integration
def test_limit_words_in_normal_output_do_not_count(tmp_path):
    """Talking about rate limits mid-session and exiting 0 is a normal finish, not a limit."""
    _cli(tmp_path, "print('Implemented the rate limit middleware (429 on excess)')\nprint('Committed.')\n")
    signals = _run(_request(tmp_path))
    assert signals.exit_kind is ExitKind.FINISHED


@pytest.mark.integration
@pytest.mark.parametrize(("stderr", "kind"), [
    ("401 Unauthorized: invalid api key", ExitKind.AUTH),
    ("Your credit balance is too low to access the API", ExitKind.AUTH),
    ("API Error: 529 {\"type\":\"overloaded_error\"}", ExitKind.TRANSIENT),
    ("Traceback (most recent call last):\nValueError: boom", ExitKind.CRASHED),
])
def test_failure_kinds_from_stderr(tmp_path, stderr, kind):
    """Auth failures, transient API errors and plain crashes are told apart by the CLI's error text."""
    _cli(tmp_path, f"sys.stderr.write({stderr!r} + '\\n')\nsys.exit(3)\n")
    signals = _run(_request(tmp_path))
    assert signals.exit_kind is kind
    assert signals.exit_code == 3
    assert stderr.splitlines()[-1] in signals.error


@pytest.mark.integration
def test_crash_without_output_names_exit_code(tmp_path):
    """A silent non-zero exit is CRASHED with the exit code as the error."""
    _cli(tmp_path, "sys.exit(7)\n")
    signals = _run(_request(tmp_path))
    assert signals.exit_kind is ExitKind.CRASHED
    assert signals.error == "exited with code 7"
    assert signals.hints.empty_output is True


@pytest.mark.integration
def test_silent_cli_stalls(tmp_path):
    """A CLI that goes quiet is killed and reported STALLED."""
    _cli(tmp_path, "print('thinking', flush=True)\ntime.sleep(30)\n")
    signals = _run(_request(tmp_path, stall_minutes="1s"))
    assert signals.exit_kind is ExitKind.STALLED
    assert signals.duration_s < 5


@pytest.mark.integration
def test_chatty_cli_hits_time_limit(tmp_path):
    """A CLI that keeps printing is still stopped at the time limit."""
    _cli(tmp_path, "while True:\n    print('.', flush=True)\n    time.sleep(0.05)\n")
    signals = _run(_request(tmp_path, stall_minutes="3s", time_limit_minutes="1s"))
    assert signals.exit_kind is ExitKind.TIME_LIMIT


@pytest.mark.integration
def test_cli_environment_is_allow_listed(tmp_path):
    """The CLI sees plan-runner's variables and its API key, never the GitHub token."""
    _cli(tmp_path, "print(json.dumps(dict(os.environ)))\n")
    parent = dict(os.environ, GITHUB_TOKEN="ghs_x", ANTHROPIC_API_KEY="sk-y")
    signals = _run(_request(tmp_path, env=build_agent_env(parent)))
    env = json.loads(signals.hints.final_text)
    assert "GITHUB_TOKEN" not in env
    assert env["ANTHROPIC_API_KEY"] == "sk-y"
    assert env["PLAN_RUNNER_PLAN"] == str((tmp_path / "work" / "plans" / "p.md").resolve())
    assert env["PLAN_RUNNER_HANDOFF"].endswith("plans/p.handoff.md")


def test_missing_executable_is_a_user_error(tmp_path):
    """A CLI that is not installed is a PlanRunnerError naming agent.executable."""
    with pytest.raises(PlanRunnerError) as info:
        _run(_request(tmp_path, executable="no-such-agent-cli-zz"))
    assert "agent.executable" in info.value.fix


def test_no_executable_configured_is_a_user_error(tmp_path):
    """The command backend without agent.executable says what to add."""
    with pytest.raises(PlanRunnerError) as info:
        build_argv(_request(tmp_path, executable=None), None)
    assert "executable" in info.value.fix


def test_bad_limit_regex_is_a_user_error(tmp_path):
    """An invalid limit pattern is reported before anything runs."""
    with pytest.raises(PlanRunnerError) as info:
        _run(_request(tmp_path, limit_patterns=("([unclosed",)))
    assert "limit_patterns" in info.value.fix


def _exit(code, reason="exited", stderr=""):
    return ProcessExit(returncode=code, reason=reason, stop_detail="", output_bytes=10, stdout_lines=1,
                       stderr_tail=stderr, duration_s=1.0)


NOW = datetime(2025, 6, 3, 14, 0, tzinfo=UTC)


def test_classify_killed_processes():
    """Stalled and timed-out runs map to STALLED and TIME_LIMIT whatever they printed."""
    agent = AgentConfig(backend="command", executable="x")
    assert classify_command_exit(_exit(None, "stalled"), ["429"], agent, NOW).kind is ExitKind.STALLED
    assert classify_command_exit(_exit(None, "time_limit"), [], agent, NOW).kind is ExitKind.TIME_LIMIT


def test_classify_limit_in_stdout_of_failed_run_reads_clock_time():
    """A failed run whose stdout says 'try again at 3:28 PM' gets that reset time."""
    agent = AgentConfig(backend="command", executable="x")
    verdict = classify_command_exit(_exit(1), ["usage limit reached, try again at 3:28 PM"], agent, NOW)
    assert verdict.kind is ExitKind.RATE_LIMIT
    assert verdict.reset_at == datetime(2025, 6, 3, 15, 28, tzinfo=UTC)


def test_classify_limit_without_time_has_no_reset():
    """A limit with no time in the text leaves reset_at empty (the policy backs off exponentially)."""
    agent = AgentConfig(backend="command", executable="x")
    verdict = classify_command_exit(_exit(1, stderr="Too Many Requests"), [], agent, NOW)
    assert verdict.kind is ExitKind.RATE_LIMIT and verdict.reset_at is None
