"""The size of a plan's state ref after many sessions, with the ledger's compaction (issue 46).

    python -m benchmarks.ledger_size [--sessions 100,1000,5000] [--worst]

Each session appends its `started` entry and its record (one write, as a dispatched session's one push does) to a
plan's state ref on a local repository, with the snapshot; the records are realistic (three gates, two reasons,
the agent's final words) or, with --worst, as big as the bounds let an agent make them (40 reasons of 2,000
characters, 2,000 characters of final text, 10 claims). Printed per count of sessions: the ledger's entries and
segments at the tip, the tip's ledger bytes, its largest object, the commits reachable from the ref, and the
ref's whole reachable history packed (`git pack-objects --revs`), which is what a fresh clone fetches.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from runner.adapters.store.state import GitStateStore
from runner.core.actions import Blame, Outcome, RunSession, SessionKind
from runner.core.evidence import Hints
from runner.core.ledger import GateSummary, SessionRecord, SessionStarted
from runner.core.policy import fold, snapshot_json
from runner.core.ports import AppendOptions

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
REF = "refs/plan-runner/state/p"


def entries(n: int, worst: bool) -> list:
    at = T0 + timedelta(minutes=30 * n)
    reasons = tuple(f"reason {i} " + "x" * 1980 for i in range(40)) if worst else (
        "required gate `tests` is red (exit 1)", "the agent claimed it was done; the evidence says GatesRed")
    final = ("y" * 2000) if worst else "All done: the tests pass and the checkpoint is ticked."
    record = SessionRecord(
        n=n, kind=SessionKind.DELIVERY, checkpoint=f"{n // 10}.{n % 10}", stage=n // 10, started_at=at,
        finished_at=at + timedelta(minutes=20), outcome=Outcome.GATES_RED if n % 3 else Outcome.ADVANCED,
        blame=Blame.AGENT if n % 3 else Blame.NONE, rule=8, reasons=reasons, fingerprint=f"{n:016x}",
        agent_session_id=f"{n:08x}-0000-4000-8000-000000000000", backend="claude-code", tokens=250_000,
        cost_usd=1.25, base_sha=f"{n:040x}", head_sha=f"{n + 1:040x}", work_commits=3,
        gates=tuple(GateSummary(name=g, required=True, passed=bool(n % 3 == 0), duration_s=12.5, fingerprint="f" * 16)
                    for g in ("tests", "lint", "types")),
        hints=Hints(claimed_done=True, final_text=final, claims=tuple(f"claim {i}" for i in range(10 if worst else 2))),
        next_action=RunSession(kind=SessionKind.FIX_GATES, checkpoint="1.1", reason="GatesRed: fix session"))
    started = SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint=record.checkpoint, started_at=at,
                             base_sha=record.base_sha, job=f"{10_000_000 + n}")
    return [started, record]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def measure(repo: Path) -> dict:
    tree = [line.split(None, 4) for line in git(repo, "ls-tree", "-r", "-l", REF).splitlines()]
    ledger = [(int(size), path) for _, _, _, size, path in tree if path.startswith("ledger/")]
    objects = "".join(line.split()[0] + "\n" for line in git(repo, "rev-list", "--objects", REF).splitlines())
    sizes = subprocess.run(["git", "cat-file", "--batch-check=%(objectsize)"], cwd=repo, input=objects,
                           capture_output=True, text=True, check=True).stdout.split()
    pack = subprocess.run(["git", "pack-objects", "--revs", "--stdout", "-q"], cwd=repo, input=(REF + "\n").encode(),
                          capture_output=True, check=True).stdout
    return dict(segments=len(ledger), ledger_bytes=sum(s for s, _ in ledger),
                largest=max(int(s) for s in sizes), commits=int(git(repo, "rev-list", "--count", REF)),
                packed=len(pack))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="100,1000,5000")
    parser.add_argument("--worst", action="store_true")
    args = parser.parse_args()
    marks = sorted(int(x) for x in args.sessions.split(","))
    with tempfile.TemporaryDirectory(prefix="ledger-size-") as tmp:
        repo = Path(tmp)
        git(repo, "init", "-q")
        store = GitStateStore(repo, remote=None)
        state, version, started = None, None, time.monotonic()
        print(f"{'sessions':>8} {'entries':>7} {'segments':>8} {'ledger at tip':>13} {'largest object':>14} "
              f"{'commits':>7} {'history packed':>14} {'s':>6}")
        for n in range(1, marks[-1] + 1):
            batch = entries(n, args.worst)
            state = fold(batch, state)
            version = store.append("p", batch, version, options=AppendOptions(snapshot=snapshot_json(state)))
            if n in marks:
                m = measure(repo)
                count = len(store.read("p")[0])
                print(f"{n:>8} {count:>7} {m['segments']:>8} {m['ledger_bytes']:>13,} {m['largest']:>14,} "
                      f"{m['commits']:>7} {m['packed']:>14,} {time.monotonic() - started:>6.0f}")
        store.close()


if __name__ == "__main__":
    main()
