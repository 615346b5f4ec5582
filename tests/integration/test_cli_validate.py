"""`plan-runner validate` and `plan-runner schema`, through the real entry points."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.drivers.cli import main as cli
from runner.core.errors import PlanRunnerError

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "tests/broken_plans"

# file -> (line, words the problem must contain): one per problem kind the validator knows
EXPECTED = {
    "yaml-syntax.md": [(5, "YAML syntax error")],
    "no-front-matter.md": [(1, "no front matter")],
    "unterminated-front-matter.md": [(1, "never closed")],
    "unknown-key.md": [(3, "unknown key `brnach`")],
    "wrong-type.md": [(4, "agent.session_tokens")],
    "bad-duration.md": [(5, "not a duration")],
    "duplicate-checkpoint.md": [(9, "checkpoint id 1.1 appears twice")],
    "stage-without-checkpoints.md": [(9, "stage 2 has no checkpoints")],
    "no-stages.md": [(4, "no stages")],
    "empty-gate-command.md": [(6, "empty `run` command")],
    "gate-without-kind.md": [(3, "none of `run`, `http` or `checks`")],
    "gate-two-kinds.md": [(5, "both `run` and `http`")],
    "bad-http-url.md": [(4, "must start with http:// or https://")],
    "duplicate-gate-names.md": [(5, "two gates are named `tests`")],
    "bad-branch.md": [(2, "not a safe branch name")],
    "non-utf8.md": [(6, "not UTF-8")],
    "many-problems.md": [
        (4, "agent.backend"),
        (5, "duration must be positive"),
        (7, "none of `run`"),
        (11, "`sessions: zero`"),
        (13, "appears twice"),
        (15, "stage 2 has no checkpoints"),
    ],
}


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.integration
def test_validate_broken_plans_reports_every_problem_with_location() -> None:
    """Every broken plan is reported as file:line with a fix, exit code 2, and no traceback."""
    result = run_cli("validate", BROKEN)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"{len(EXPECTED)} of {len(EXPECTED)} plan file(s) invalid" in result.stderr
    lines = result.stdout.splitlines()
    for name, problems in EXPECTED.items():
        reported = [line for line in lines if line.startswith(f"{BROKEN}/{name}:")]
        assert len(reported) == len(problems), (name, reported)
        for (line, words), text in zip(problems, reported):
            assert text.startswith(f"{BROKEN}/{name}:{line}: ") and words in text, (name, text)
    fixes = [line for line in lines if line.startswith("    fix: ")]
    assert len(fixes) == sum(len(p) for p in EXPECTED.values())


@pytest.mark.integration
def test_validate_skips_handoff_files_in_directories() -> None:
    """A directory expands to its *.md files without *.handoff.md."""
    result = run_cli("validate", BROKEN)
    assert "ignored.handoff.md" not in result.stdout
    assert sorted(p.name for p in cli.collect_plan_paths([ROOT / BROKEN])) == sorted(EXPECTED)


@pytest.mark.integration
def test_validate_example_plans_pass() -> None:
    """The shipped example plans validate with exit code 0."""
    result = run_cli("validate", "plans/example-httpx-migration.md", "plans/example-local-demo.md")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok plans/example-httpx-migration.md: 3 stage(s), 8 checkpoint(s), 3 gate(s)" in result.stdout


def test_validate_mixed_files_reports_only_bad_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """Valid and invalid files together: all checked, exit 2, the good one marked ok."""
    code = cli.main(["validate", str(ROOT / "plans/example-local-demo.md"), str(ROOT / BROKEN / "bad-branch.md")])
    out, err = capsys.readouterr()
    assert code == 2
    assert "ok plans/example-local-demo.md" in out and "tests/broken_plans/bad-branch.md:2:" in out
    assert "1 of 2 plan file(s) invalid" in err


def test_validate_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory without plans is a user error with a fix, not a silent success."""
    assert cli.main(["validate", str(tmp_path)]) == 2
    assert "no plan files found" in capsys.readouterr().err


@pytest.mark.integration
def test_committed_schema_is_current() -> None:
    """docs/plan.schema.json is exactly what `plan-runner schema` prints (regenerate with it)."""
    result = run_cli("schema")
    assert result.returncode == 0
    committed = (ROOT / "docs/plan.schema.json").read_text(encoding="utf-8")
    assert result.stdout == committed, "run: python -m runner schema > docs/plan.schema.json"
    assert json.loads(committed)["properties"]["gates"]


def _boom_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user-error", action="store_true")


def test_main_catches_errors_in_one_place(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A user error prints its render with its exit code; an unexpected one a one-line message and a hint."""

    def boom(args: argparse.Namespace) -> int:
        if args.user_error:
            raise PlanRunnerError(what="bad thing", why="because", fix="do this")
        raise KeyError("unexpected")

    monkeypatch.setitem(cli.COMMANDS, "boom", cli.Command("boom", "test", boom, _boom_arguments))
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    assert cli.main(["boom", "--user-error"]) == 2
    assert capsys.readouterr().err == "error: bad thing\n  why: because\n  fix: do this\n"
    assert cli.main(["boom"]) == 1
    err = capsys.readouterr().err
    assert "unexpected error: KeyError" in err and "PLAN_RUNNER_DEBUG=1" in err and "Traceback" not in err
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert cli.main(["boom"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_command_registered_twice_is_refused() -> None:
    """Registering an existing subcommand name fails loudly."""
    with pytest.raises(ValueError, match="validate"):
        cli.command("validate", help="again")(lambda args: 0)
