"""A non-finite or absurd cost in an agent's usage report, through the real CLI (issue 46): the Claude Code
backend's `result` line says `"total_cost_usd": Infinity` (or `NaN`, `1e308`, an integer of 401 digits: Python's
JSON reads all four).
The session is recorded with a bounded cost and a note saying what was reported; `status` and `logs` show it;
the ledger, compacted past the session by later writes, is strict JSON, its summary's totals are finite, and
every entry parses back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from runner.adapters.store.state import GitStateStore
from runner.core.actions import Outcome, RunSession, SessionKind
COST_LIMIT = 1_000_000.0  # runner.core.bounds.COST_LIMIT
from runner.core.ledger import SessionStarted, Summary
from runner.core.policy import fold, folded, snapshot_json
from runner.core.ports import AppendOptions
from tests.conftest import agent_visible
from tests.core_builders import T0, record
from tests.reliability_world import cli_env, git

pytestmark = pytest.mark.integration

PLAN = """\
---
agent:
  backend: claude-code
  executable: {standin}
  stall_minutes: 30s
  time_limit_minutes: 90s
gates:
  - name: tests
    run: test -f hello.txt
budget:
  max_sessions: 5000
---
# Hello

## Stage 1: Greeting <!-- sessions: 1 -->
- [ ] 1.1 write hello.txt
- [ ] 1.2 write bye.txt
"""

# A stand-in for the `claude` CLI that does the work of 1.1 and reports its cost as `{cost}`, written into the JSON
# line as it is (`Infinity`, `NaN`, `1e308`): what a CLI, or anything in its place, could print.
STANDIN = '''#!{python}
import json, subprocess, sys
if "--version" in sys.argv:
    print("2.1.332 (Claude Code)")
    sys.exit(0)
sys.stdin.readline()
def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\\n")
    sys.stdout.flush()
emit({{"type": "system", "subtype": "init", "session_id": "s-absurd", "model": "claude-sonnet-4-5", "tools": ["Bash"]}})
subprocess.run(["sh", "-c", "echo hello > hello.txt && git add hello.txt && git commit -q -m 'Add hello' && "
                "sed -i 's/- \\\\[ \\\\] 1.1/- [x] 1.1/' plans/hello.md && git commit -q -am 'Tick 1.1'"], check=True)
emit({{"type": "assistant", "session_id": "s-absurd", "message": {{"id": "m1", "role": "assistant",
      "model": "claude-sonnet-4-5", "content": [{{"type": "text", "text": "Done."}}],
      "usage": {{"input_tokens": 100, "output_tokens": 10}}}}}})
line = json.dumps({{"type": "result", "subtype": "success", "is_error": False, "session_id": "s-absurd",
                   "result": "Done.", "num_turns": 1, "total_cost_usd": "COST", "stop_reason": "end_turn",
                   "usage": {{"input_tokens": 100, "output_tokens": 10}}}})
sys.stdout.write(line.replace('"COST"', {cost!r}) + "\\n")
sys.stdout.flush()
for _ in sys.stdin:
    pass
'''


def _strict(text: str) -> None:
    """Every line of `text` is JSON without the non-standard NaN / Infinity constants."""
    def refuse(name: str):
        raise AssertionError(f"a non-standard JSON constant in the record: {name}")
    for line in text.splitlines():
        if line.strip():
            json.loads(line, parse_constant=refuse)


def _seed(store: GitStateStore, first: int, last: int, state, version):
    nxt = RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="progress: keep delivering")
    entries = [e for n in range(first, last + 1) for e in (
        SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=T0 + timedelta(minutes=n),
                       base_sha="b" * 40),
        record(n=n, outcome=Outcome.PROGRESS, tokens=1000, cost_usd=0.01, next_action=nxt,
               reasons=("1 work commit(s), gates green, no checkpoint flipped",)))]
    state = fold(entries, state)
    return store.append("hello", entries, version, options=AppendOptions(snapshot=snapshot_json(state))), state


ESTIMATE = 0.00045  # the list price of the stand-in's usage (100 tokens in, 10 out, Sonnet)


@pytest.mark.parametrize("cost, recorded", [("Infinity", COST_LIMIT), ("NaN", ESTIMATE), ("1e308", COST_LIMIT),
                                            ("1" + "0" * 400, COST_LIMIT)])
def test_an_absurd_cost_is_recorded_bounded_summarised_shown_and_parsed_back(tmp_path, cost, recorded):
    """Recorded: Infinity and 1e308 as COST_LIMIT (the plan's cost budget then stops it: a spend nobody can
    vouch for is a human's to look at), NaN as the list-price estimate of the usage; a note in the record's
    reasons says what was reported. Shown by `status` and `logs`; the ledger strict JSON after a compaction
    whose summary counts it; every entry parsed back."""
    repo = tmp_path / "repo"
    (repo / "plans").mkdir(parents=True)
    (repo / "README.md").write_text("hello\n")
    git(repo, "init", "-q", "-b", "main")
    standin = agent_visible(repo, "claude", "hello")
    standin.write_text(STANDIN.format(python=sys.executable, cost=cost))
    standin.chmod(0o755)
    (repo / "plans" / "hello.md").write_text(PLAN.format(standin=standin))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    # 1,020 sessions behind it: 2,040 entries, just under the compaction threshold (8 segments of 256)
    store = GitStateStore(repo, remote=None)
    v, state = _seed(store, 1, 1020, None, None)
    store.close()
    env = cli_env(ANTHROPIC_API_KEY="sk-ant-test-key-0000")

    def cli(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "runner", *args], cwd=repo, capture_output=True, text=True,
                              env=env, timeout=240)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    ran = cli("session", "plans/hello.md", "--json")
    assert ran.stdout.strip(), ran.stderr[-3000:]
    out = json.loads(ran.stdout)
    assert out["outcome"] == "Advanced", (out, ran.stderr[-2000:])
    assert out["cost_usd"] == pytest.approx(recorded), out
    notes = [r for r in out["reasons"] if r.startswith("usage report bounded: ")]
    assert len(notes) == 1 and (f"cost of {float(cost):.6g}" in notes[0] or "total_cost_usd nan" in notes[0]), notes
    assert len(notes[0]) < 300  # never the 400 digits
    if recorded == COST_LIMIT:  # the default cost budget ($50) is spent
        assert out["status"] == "parked" and "max_cost_usd reached ($1000010.20 of $50.00)" in out["message"], out
    # shown by status and logs, before compaction
    status = json.loads(cli("status", "--json").stdout)[0]
    assert status["sessions"] == 1021 and status["cost_usd"] == pytest.approx(10.2 + recorded, abs=1e-3), status
    shown = cli("logs", "plans/hello.md")
    assert shown.returncode == 0 and shown.stdout.startswith("session 1021 "), shown.stdout[:500]
    assert "usage report bounded" in shown.stdout and "inf" not in shown.stdout.split("usage report bounded")[0]
    assert cli("status").returncode == 0
    # later writes compact the ledger past the session: its record is in the summary's totals
    store = GitStateStore(repo, remote=None)
    ledger, v = store.read("hello")
    v, _ = _seed(store, 1022, 1400, folded(ledger), v)
    store.close()
    ledger_text = git(repo, "ls-tree", "-r", "--name-only", "refs/plan-runner/state/hello")
    for name in ledger_text.splitlines():
        blob = git(repo, "show", f"refs/plan-runner/state/hello:{name}")
        if not name.startswith("transcripts/"):  # the record; a transcript is the CLI's own lines, kept as printed
            _strict(blob)
    entries = list(GitStateStore(repo, remote=None).read("hello")[0])
    summary = entries[0]
    assert isinstance(summary, Summary) and summary.last_session >= 1021 and summary.first_session == 1, summary
    expected = 0.01 * (summary.sessions - 1) + recorded
    assert summary.cost_usd == pytest.approx(expected) and summary.cost_known
    status = json.loads(cli("status", "--json").stdout)[0]
    assert status["sessions"] == 1400 and status["compacted"].startswith("sessions 1-"), status
    assert status["cost_usd"] == pytest.approx(13.99 + recorded, abs=1e-3), status
    assert cli("status").returncode == 0
    early = cli("logs", "plans/hello.md", "1021")
    assert early.returncode != 0 and "compacted past" in early.stderr, early.stderr
    assert os.path.exists(repo / ".git")
