"""collect_evidence's set-up rules (issue 27) on a real repository: `verify:` runs on the fresh checkout on
every path (a session whose commits hold a secret included), and a required gate that cannot start is run on
the base: a set-up problem when it cannot start there either, the agent's failure when it can."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from runner.adapters.judge.collect import SessionScene, collect_evidence, handoff_path_of
from runner.adapters.judge.gates import run_gates
from runner.core.actions import Blame, Outcome
from runner.core.evidence import ExitKind, SessionSignals
from runner.core.outcome import classify
from runner.core.planfile import parse_plan
from tests.reliability_world import git

PLAN = """\
---
gates:
  - name: tests
    run: {gate}
---
# P

## Stage 1: S <!-- sessions: 1 -->
- [ ] 1.1 thing <!-- verify: pwd > {out} -->
"""
SECRET = "sk-test-0123456789abcdefXYZ"


def _scene(tmp_path: Path, gate: str, agent_files: dict[str, str]):
    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    text = PLAN.format(gate=gate, out=tmp_path / "verify-cwd")
    (repo / "plans" / "p.md").write_text(text)
    (repo / "ok.sh").write_text("exit 0\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=M", "-c", "user.email=m@x", "add", "-A")
    git(repo, "-c", "user.name=M", "-c", "user.email=m@x", "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    for name, body in agent_files.items():
        (repo / name).write_text(body)
    (repo / "plans" / "p.md").write_text(text.replace("- [ ] 1.1", "- [x] 1.1"))
    git(repo, "-c", "user.name=A", "-c", "user.email=a@x", "add", "-A")
    git(repo, "-c", "user.name=A", "-c", "user.email=a@x", "commit", "-q", "-m", "agent")
    plan = parse_plan(text, "plans/p.md")
    scene = SessionScene(repo=repo, plan=plan, plan_text=text, base_sha=base, handoff_path=handoff_path_of(plan),
                         started_at=datetime.now(timezone.utc), session_number=1, session_kind="delivery",
                         checkpoint="1.1")
    return repo, base, scene


def _checkout(repo: Path, place: Path, made: list[str]):
    def make(sha: str) -> Path:
        shutil.rmtree(place, ignore_errors=True)
        place.mkdir()
        subprocess.run(f"git -C {repo} archive {sha} | tar -x -C {place}", shell=True, check=True)
        made.append(sha)
        return place
    return make


@dataclass
class _Judge:
    """collect.Judge with the tree and the base's gates given (no room, no remote checks, no push)."""

    tree: Callable[[str], Path]
    base: Callable | None = None
    identity: None = None
    env: dict = field(default_factory=lambda: {"PATH": "/usr/bin:/bin"})
    checks_runner: None = None

    def on_base(self, gates):
        return self.base(gates) if self.base is not None else ((), "")

    def push_early(self, head: str) -> None:
        pass


def _collect(scene, checkout, on_base=None, secrets=()):
    signals = SessionSignals(backend="script", exit_kind=ExitKind.FINISHED, exit_code=0)
    return collect_evidence(scene, signals, env={"PATH": "/usr/bin:/bin"}, observed_at=datetime.now(timezone.utc),
                            judge=_Judge(checkout, on_base), secrets=secrets)


def test_verify_runs_on_the_fresh_checkout_when_the_commits_hold_a_secret(tmp_path):
    repo, _, scene = _scene(tmp_path, "sh ok.sh", {"leak.txt": f"key={SECRET}\n"})
    made: list[str] = []
    evidence = _collect(scene, _checkout(repo, tmp_path / "gates", made), secrets=[SECRET])
    assert evidence.leaked_secrets == ("leak.txt",) and evidence.gates == ()
    assert (tmp_path / "verify-cwd").read_text().strip() == str(tmp_path / "gates")  # not the user's repository
    assert made == [evidence.head_sha]


def _on_base(repo: Path, place: Path, base: str):
    def on_base(gates):
        workdir = _checkout(repo, place, [])(base)
        return run_gates(gates, workdir=workdir, env={"PATH": "/usr/bin:/bin"}), base
    return on_base


def test_a_gate_that_cannot_start_on_the_base_either_is_a_set_up_problem(tmp_path):
    repo, base, scene = _scene(tmp_path, ".venv/bin/pytest -q", {"work.py": "x = 1\n"})
    evidence = _collect(scene, _checkout(repo, tmp_path / "gates", []), _on_base(repo, tmp_path / "base", base))
    (g,) = evidence.gates
    assert g.exit_code == 127 and g.setup_problem and base[:12] in g.setup_problem and "setup:" in g.setup_problem
    verdict = classify(evidence)
    assert (verdict.outcome, verdict.blame) == (Outcome.NEEDS_HUMAN, Blame.NONE)


def test_a_gate_the_agent_broke_is_the_agents(tmp_path):
    repo, base, scene = _scene(tmp_path, "sh ok.sh", {"ok.sh": "nosuchprogram-xyz\n"})
    evidence = _collect(scene, _checkout(repo, tmp_path / "gates", []), _on_base(repo, tmp_path / "base", base))
    (g,) = evidence.gates
    assert g.exit_code == 127 and g.setup_problem is None  # it starts on the base
    assert (classify(evidence).outcome, classify(evidence).blame) == (Outcome.GATES_RED, Blame.AGENT)
