"""Coverage-guided fuzzing with atheris (libFuzzer) of the parsers that read untrusted bytes: plan files and
tracker diffs, Claude Code stream-json and Codex JSONL, reply comments, event payloads. Each target runs
as its own process for a bounded number of inputs, from the seeds in `tests/fuzz/seeds/`; any exception
other than the documented PlanRunnerError fails it, with the crashing input saved and shown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
ROOT = FUZZ.parents[1]
RUNS = {"plan": 8000, "streams": 20000, "reply": 20000, "event": 20000}


@pytest.mark.parametrize("target", sorted(RUNS))
def test_fuzzed_parser_never_raises_anything_but_a_clear_error(target, tmp_path):
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    proc = subprocess.run(
        [sys.executable, str(FUZZ / "targets.py"), target, f"-runs={RUNS[target]}", "-max_total_time=60",
         "-max_len=4096", "-seed=1", f"-artifact_prefix={artifacts}/", str(corpus), str(FUZZ / "seeds" / target)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    crashes = sorted(p.name for p in artifacts.iterdir())
    assert proc.returncode == 0 and not crashes, (crashes, proc.stderr[-4000:])
    assert "Done" in proc.stderr
