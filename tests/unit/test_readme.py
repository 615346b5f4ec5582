"""The README a reader enters: its two commands come first and stay true.

The first fenced block is the offline demo and the whole test suite, in that order; the second command is the
one CI runs (`.ci/run`), so what a reader runs on a fresh machine is what CI proves. The demo line itself is run
as an ordinary user by tests/integration/test_sandbox.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _first_block(text: str) -> list[str]:
    body = re.search(r"(?ms)^```sh\n(.*?)^```", text)
    assert body, "the README has no ```sh block"
    return [line for line in body[1].splitlines() if line.strip()]


def _ci_command(script: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if line.startswith("PLAN_RUNNER_") or "exec " in line]
    words = shlex.split(line)
    words = [w for w in words if "=" not in w.split("/")[0]]  # the environment CI sets (file durations)
    return [w for w in words if w not in ("exec", "-q")]


def test_the_readme_opens_with_the_demo_and_the_suite() -> None:
    text = (ROOT / "README.md").read_text()
    first, second = _first_block(text)
    assert first.endswith("plan-runner demo") and "pip install" in first, first
    assert shlex.split(second) == _ci_command((ROOT / ".ci" / "run").read_text()), (second, "differs from .ci/run")
    # the commands come before anything else the reader must read: the first section holds them
    assert text.index("```sh") < text.index("## Prerequisites") < text.index("## How a session is judged")


def test_the_ci_command_is_read_from_the_script() -> None:
    assert _ci_command("set -e\nPLAN_RUNNER_FILE_DURATIONS=1 exec ./scripts/test -q\n") == ["./scripts/test"]
    assert _ci_command("exec ./scripts/test tests/unit\n") == ["./scripts/test", "tests/unit"]


def test_the_readme_links_only_to_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    named = set(re.findall(r"\b((?:docs|runner|tests|benchmarks)/[\w./-]+\.(?:md|py|json)|CHANGELOG\.md)\b", text))
    assert named and [n for n in named if not (ROOT / n).exists()] == []
