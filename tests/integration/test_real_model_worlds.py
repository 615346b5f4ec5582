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


def test_a_credit_is_checked_at_the_commit_of_the_session_that_earned_it(tmp_path: Path) -> None:
    """Session 1 earns 1.1 (parse_cents right, ticked, gates green); session 2 breaks the file. The credit agrees
    with the clean clone at session 1's commit; the last session's red gate with the pushed head."""
    from tests.real_model_worlds import PLAN_ID, WorldRun, agrees, check_world, make_world
    from tests.real_model_world import git

    world = WORLDS["two-checkpoints"]
    repo = make_world(tmp_path, world, "qwen-1.5b")
    git(repo, "checkout", "-q", "-b", f"plan-runner/{PLAN_ID}")
    fmt = repo / "tools" / "moneyfmt.py"
    fmt.write_text(world.files["tools/moneyfmt.py"] + "\n\ndef parse_cents(text):\n    return round(float(text) * 100)\n")
    plan = repo / "plans" / f"{PLAN_ID}.md"
    plan.write_text(plan.read_text().replace("- [ ] 1.1", "- [x] 1.1"))
    git(repo, "commit", "-qam", "parse_cents")
    earned = git(repo, "rev-parse", "HEAD")
    fmt.write_text("def broken(:\n")
    git(repo, "commit", "-qam", "wip")
    git(repo, "push", "-q", "origin", f"plan-runner/{PLAN_ID}")
    run = WorldRun(3, "", "", [
        {"type": "session", "n": 1, "outcome": "Advanced", "advanced": ["1.1"], "head_sha": earned,
         "gates": [{"name": "tests", "passed": True}]},
        {"type": "session", "n": 2, "outcome": "AgentError", "advanced": [], "head_sha": git(repo, "rev-parse", "HEAD"),
         "gates": [{"name": "tests", "passed": False}]}], 1.0)
    check = check_world(tmp_path, world, run)
    assert not check.gate_passed and check.at_credit["1.1"].earned("1.1")
    assert agrees(run, check, world) == []
    stale = check_world(tmp_path, world)  # read at the pushed head only, the credit would not be backed
    assert agrees(run, stale, world)[0].startswith("1.1: credited=True but in the clean clone ticked=True behaves=False")
