"""2. Output volume: a gate that prints a gigabyte, and an agent that streams one.

The gate runs inside a real `plan-runner session` (child process, peak memory from
`wait4`); the idle footprint is the same command on the same repository with a
trivial gate. The gate is optional (`required: false`) so it runs exactly once.
Its tail and fingerprint (from the evidence on the state branch) must equal those
of the same gate printing only a little filler: the last 16 KB are the same bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.common import child_env, run_child
from benchmarks.repos import build_repo, git

GEN = Path(__file__).resolve().parent / "gen_output.py"
TARGET_EXTRA_MB = 100
SCRIPT = """\
sessions:
  - - write: {path: app/feature.py, content: "def feature():\\n    return 42\\n"}
    - commit: "Add the feature"
    - say: "Working on it"
"""


def _plan(script: Path, gate_cmd: str) -> str:
    return f"""\
---
agent: {{backend: script, script: {script}, stall_minutes: 30s, time_limit_minutes: 10m}}
gates:
  - name: big
    run: {json.dumps(gate_cmd)}
    required: false
    timeout_minutes: 10m
---
# Volume

## Stage 1: Feature <!-- sessions: 1 -->
- [ ] 1.1 Add the feature
"""


def _session(repo: Path, plan_id: str, env: dict[str, str]) -> tuple[dict, dict, float]:
    run = run_child([sys.executable, "-m", "runner", "session", f"plans/{plan_id}.md", "--json"], cwd=repo, env=env,
                    timeout_s=900)
    if run.returncode != 0:
        raise RuntimeError(f"plan-runner session failed ({run.returncode}):\n{run.stderr[-3000:]}")
    evidence = json.loads(git(repo, "show", f"refs/plan-runner/state/{plan_id}:files/last-evidence.json"))
    return json.loads(run.stdout), evidence, run.maxrss_mb


def bench_gate_output(workdir: Path, size_bytes: int) -> dict:
    env = child_env()
    script = workdir / "volume-script.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    gen = f"{sys.executable} {GEN}"
    plans = {"vol-idle": "true", "vol-ref": f"{gen} 1000000", "vol-big": f"{gen} {size_bytes}"}
    repo = workdir / "repo-volume"
    build_repo(repo, 100, {f"plans/{p}.md": _plan(script, cmd) for p, cmd in plans.items()}, env=env)
    _, _, idle_mb = _session(repo, "vol-idle", env)
    _, ref_ev, _ = _session(repo, "vol-ref", env)
    big_json, big_ev, big_mb = _session(repo, "vol-big", env)
    ref_gate, big_gate = ref_ev["gates"][0], big_ev["gates"][0]
    tail_ok = big_gate["output_tail"] == ref_gate["output_tail"] and big_gate["output_tail"].endswith("END-OF-OUTPUT\n")
    fp_ok = bool(big_gate["fingerprint"]) and big_gate["fingerprint"] == ref_gate["fingerprint"]
    duration = float(big_gate["duration_s"])
    extra = big_mb - idle_mb
    return {
        "bytes": size_bytes,
        "idle_peak_rss_mb": round(idle_mb, 1),
        "peak_rss_mb": round(big_mb, 1),
        "extra_mb": round(extra, 1),
        "gate_duration_s": round(duration, 2),
        "throughput_mb_s": round(size_bytes / 2**20 / duration, 1) if duration else None,
        "tail_right": tail_ok,
        "fingerprint_right": fp_ok,
        "outcome": big_json["outcome"],
        "targets": {
            "extra_memory_mb": {"target": f"<= {TARGET_EXTRA_MB}", "value": round(extra, 1), "met": extra <= TARGET_EXTRA_MB},
            "tail_and_fingerprint": {"value": tail_ok and fp_ok, "met": tail_ok and fp_ok},
        },
    }


def bench_stream_output(workdir: Path, size_bytes: int) -> dict:
    """Stream-json through the supervisor (and the Claude Code parser, once it exists) vs a bare json.loads loop."""
    from benchmarks.stream import bench_stream

    return bench_stream(workdir, size_bytes)


def tree_bytes(repo: Path, tree: str) -> int:
    """The size of every blob under a tree (the transcripts kept with a plan's state)."""
    listing = git(repo, "ls-tree", "-r", "-l", tree)
    return sum(int(line.split()[3]) for line in listing.splitlines() if line.split()[1] == "blob")


def _claude_plan(executable: Path) -> str:
    return f"""\
---
agent: {{backend: claude-code, executable: {executable}, stall_minutes: 30s, time_limit_minutes: 10m}}
gates:
  - name: trivial
    run: "true"
---
# Stream

## Stage 1: Feature <!-- sessions: 1 -->
- [ ] 1.1 Add the feature
"""


def bench_agent_stream(workdir: Path, size_bytes: int) -> dict:
    """The real claude-code backend in a real `plan-runner session`, with a stand-in CLI that streams
    `size_bytes` of stream-json (benchmarks/stream.py). Idle: the same with a 10 KB stream."""
    from benchmarks.common import STAND_IN_KEY
    from benchmarks.stream import COST

    env = child_env(**STAND_IN_KEY)
    stream_py = Path(__file__).resolve().parent / "stream.py"
    fakes = {}
    for name, size in (("idle", 10_000), ("big", size_bytes)):
        fake = workdir / f"claude-{name}"
        fake.write_text(f"#!/bin/sh\nexec {sys.executable} {stream_py} generate {size}\n", encoding="utf-8")
        fake.chmod(0o755)
        fakes[name] = fake
    repo = workdir / "repo-agent-stream"
    build_repo(repo, 100, {f"plans/cc-{n}.md": _claude_plan(f) for n, f in fakes.items()}, env=env)
    _, _, idle_mb = _session(repo, "cc-idle", env)
    big_json, big_ev, big_mb = _session(repo, "cc-big", env)
    sig = big_ev["signals"]
    right = (sig.get("cost_usd") == COST and sig.get("total_tokens") == 123 + 456
             and sig.get("output_bytes", 0) >= 0.99 * size_bytes)
    duration = float(sig["duration_s"])
    state_bytes = tree_bytes(repo, "refs/plan-runner/state/cc-big:transcripts")
    extra = big_mb - idle_mb
    return {
        "bytes": size_bytes,
        "idle_peak_rss_mb": round(idle_mb, 1),
        "peak_rss_mb": round(big_mb, 1),
        "extra_mb": round(extra, 1),
        "agent_duration_s": round(duration, 2),
        "throughput_mb_s": round(size_bytes / 2**20 / duration, 1) if duration else None,
        "signals_right": right,
        "outcome": big_json["outcome"],
        "transcripts_in_state_bytes": state_bytes,
        "targets": {"extra_memory_mb": {"value": round(extra, 1), "met": extra <= TARGET_EXTRA_MB},
                    "signals_right": {"value": right, "met": right}},
    }
