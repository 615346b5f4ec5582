"""Issue 48, item 3: advice that is true, and given once. Through the real CLI (`plan-runner validate`) and the
preflight's own check of a fresh checkout.

* a path an earlier `setup:` command makes is not reported missing, nor untracked, by `validate`;
* a tool missing for an optional gate (`required: false`) is a warning, for a required one an error;
* one fix per problem: the second problem with the same fix points to the first instead of repeating it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.core.planfile import parse_plan
from runner.drivers.session.preflight import PreflightError, _raise, problems

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _plan(front: str) -> str:
    return "---\n" + textwrap.dedent(front).strip() + "\n---\n# P\n\n## Stage 1: S\n- [ ] 1.1 do it\n"


def _validate(tmp_path: Path, front: str, files: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    for name, text in (files or {}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / "plans" / "p.md").write_text(_plan(front))
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "plans"], check=True)
    return subprocess.run([sys.executable, "-m", "runner", "validate", "plans/p.md"], cwd=repo, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


SETUP_VENV = """
    setup:
      run: ["python3 -m venv .venv", ".venv/bin/pip install -e .[test]"]
      cache: [.venv]
      key: [pyproject.toml]
    gates:
      - {name: tests, run: .venv/bin/python -m pytest -q}
    """


def test_a_path_setup_makes_is_not_reported_missing(tmp_path):
    done = _validate(tmp_path, SETUP_VENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout, done.stdout  # neither `.venv/bin/pip` nor `.venv/bin/python`


def test_a_path_setup_makes_is_not_reported_untracked_either(tmp_path):
    pip = "#!/bin/sh\nexit 0\n"
    done = _validate(tmp_path, SETUP_VENV, {".venv/bin/pip": pip, ".venv/bin/python": pip})
    for name in (".venv/bin/pip", ".venv/bin/python"):
        (tmp_path / "repo" / name).chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "runner", "validate", "plans/p.md"], cwd=tmp_path / "repo",
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                                          "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "warning" not in done.stdout, done.stdout


def test_a_path_nothing_makes_is_still_reported(tmp_path):
    done = _validate(tmp_path, SETUP_VENV.replace(".venv/bin/python -m pytest", "env/bin/python -m pytest"))
    assert "warning: gate 'tests': env/bin/python does not exist yet" in done.stdout, done.stdout


def test_an_earlier_setup_command_only_counts_for_the_later_ones(tmp_path):
    done = _validate(tmp_path, """
        setup:
          run: [".venv/bin/pip install -e .", "python3 -m venv .venv"]
        gates:
          - {name: tests, run: "true"}
        """)
    assert "warning: setup: command 1: .venv/bin/pip does not exist yet" in done.stdout, done.stdout


def _checked(tmp_path: Path, front: str) -> list:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "p.md").write_text(_plan(front))
    plan = parse_plan((repo / "p.md").read_text(), "p.md")
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    return problems(plan, {"PATH": "/usr/bin:/bin"}, repo, checkout=checkout, agent=False)


def test_a_missing_tool_for_an_optional_gate_is_a_warning(tmp_path):
    front = """
        gates:
          - {name: tests, run: "true"}
          - {name: lint, run: "no-such-linter-xyz .", required: false}
        """
    (found,) = _checked(tmp_path, front)
    assert found.level == "warning" and "no-such-linter-xyz" in found.what
    assert "optional" in found.why and "judged red" not in found.why
    warned = []
    _raise(parse_plan(_plan(front), "p.md"), [found], warned.append)  # no error: the preflight lets it run
    assert warned and warned[0].startswith("warning: gate 'lint'")
    (required,) = _checked(tmp_path, front.replace(", required: false", ""))
    assert required.level == "error" and "every session would be judged red" in required.why
    with pytest.raises(PreflightError):
        _raise(parse_plan(_plan(front), "p.md"), [required], lambda text: None)


def test_one_fix_per_problem(tmp_path):
    found = _checked(tmp_path, """
        gates:
          - {name: unit, run: "pytestx -q tests/unit"}
          - {name: more, run: "pytestx -q tests/more"}
        """)
    assert [p.level for p in found] == ["error", "error"]
    first, second = found
    assert "setup:" in first.fix and len(first.fix) > 200
    assert second.fix == f"the same as for {first.what}"
    with pytest.raises(PreflightError) as raised:
        _raise(parse_plan((tmp_path / "repo" / "p.md").read_text(), "p.md"), found, lambda text: None)
    text = str(raised.value.fix)
    assert text.count("python3 -m venv .venv") == 1, text
