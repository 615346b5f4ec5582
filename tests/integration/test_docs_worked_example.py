"""The worked example of docs/github-actions.md ("From an empty repository to a finished plan") runs as written
on this machine, up to the steps that need GitHub: its shell blocks are taken from the doc, the `gh` lines and
the install of plan-runner (this checkout's is on PATH) left out, `<you>` and `$SHA` filled in. `init` must
pin the action as the doc says, `validate` must accept the plan, the gate must be green on the example's code,
and the commit must hold the files the workflow needs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"


def example_script() -> str:
    text = (ROOT / "docs" / "github-actions.md").read_text()
    section = text.split("\n## From an empty repository to a finished plan\n", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"(?ms)^ *```sh\n(.*?)^ *```", section):
        for line in block.splitlines():
            line = line.strip()
            if not line or line.startswith(("gh ", "python3.11 -m venv", "export PATH")) or "/pip install" in line:
                continue
            lines.append(line.replace("<you>", "octo-org"))
    return "\n".join(lines)


def test_the_worked_example_runs_as_written(tmp_path: Path) -> None:
    script = example_script()
    assert "plan-runner init --action-ref" in script and "plan-runner validate plans/" in script
    env = {**os.environ, "SHA": SHA, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "GIT_AUTHOR_NAME": "n", "GIT_AUTHOR_EMAIL": "n@example.com", "GIT_COMMITTER_NAME": "n",
           "GIT_COMMITTER_EMAIL": "n@example.com", "GIT_CONFIG_GLOBAL": "/dev/null"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, (script, proc.stdout, proc.stderr)
    repo = tmp_path / "greeter"
    workflow = (repo / ".github/workflows/plan-runner.yml").read_text()
    assert f"uses: octo-org/plan-runner@{SHA}" in workflow
    assert "ok plans/example.md" in proc.stdout
    plan = (repo / "plans/example.md").read_text()
    assert 'run: "python3 -m unittest -q"' in plan
    assert subprocess.run(["python3", "-m", "unittest", "-q"], cwd=repo, capture_output=True).returncode == 0
    tracked = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True).stdout.split()
    assert {".github/workflows/plan-runner.yml", "plans/example.md", "greeter.py", "test_greeter.py"} <= set(tracked)
