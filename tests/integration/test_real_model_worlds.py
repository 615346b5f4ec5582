"""The user-written worlds of the real-model runs (tests/real_model_worlds.py) are sound and bring their own
interpreter: on the base every gate, checkpoint check and probe is red; with a correct fix all are green; their
gate runs the world's own venv (made by its `setup:` with `python3` from the PATH, no pip), so nothing of this
test run's Python or of /root is needed. No model here: the runs are benchmarks/real_model_worlds.py and
tests/e2e/test_real_model_worlds_e2e.py."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.real_model_worlds import GATE, SETUP, SOLUTIONS, WORLDS, plain_env, plan_text

pytestmark = pytest.mark.integration


def _bash(cwd: Path, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=plain_env("http://127.0.0.1:9", cwd))


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert _bash(root, SETUP).returncode == 0
    return root


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_a_world_is_red_as_given_and_green_with_a_correct_fix(tmp_path: Path, name: str) -> None:
    world = WORLDS[name]
    verifies = re.findall(r"<!-- verify: (.+?) -->", world.body)
    base = _tree(tmp_path / "base", world.files)
    fixed = _tree(tmp_path / "fixed", {**world.files, **SOLUTIONS[name]})
    assert _bash(base, GATE).returncode != 0 or verifies, "the gate is green before any work (and no check is red)"
    assert _bash(fixed, GATE).returncode == 0, _bash(fixed, GATE).stderr
    for command in verifies:
        assert _bash(base, command).returncode != 0 and _bash(fixed, command).returncode == 0, command
    for cid, probe in world.probes.items():
        run = f".venv/bin/python -c {shlex.quote(probe)}"
        assert _bash(base, run).stdout.strip() != "True", cid
        assert _bash(fixed, run).stdout.strip() == "True", (cid, _bash(fixed, run).stderr)


@pytest.mark.parametrize("name", sorted(WORLDS))
def test_a_worlds_plan_is_a_users_plan_with_its_own_interpreter(name: str) -> None:
    """A goal per checkpoint, no tool named, no absolute path; the gate runs the world's venv."""
    text = plan_text(WORLDS[name], "qwen-1.5b")
    body = text.split("\n---\n", 1)[1]
    assert not re.search(r"read_file|write_file|edit_file|run_shell|mark_done|git commit", body)
    assert "/" + "root" not in text and "/tmp" not in text and ".venv/bin/python" in text
    assert WORLDS[name].checkpoints == re.findall(r"(?m)^- \[ \] (\d+\.\d+) ", body)
