"""`plan-runner run` in this process, each session's wall time and its agent's own time written to a JSON file.

benchmarks/real_project.py --mode run starts it as a child (through measure_child.py, like any benchmark
child): `plan-runner run PLAN` exactly as a developer types it, with the one function its loop calls per
session (runner.drivers.cli.local.run_session) wrapped in a timer. Nothing else is changed: the sessions after the
first pay no interpreter start and no imports, as in a developer's `plan-runner run`.

    python benchmarks/loop_child.py OUT.json run plans/x.md [...]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> None:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    from runner.drivers.cli import local
    from runner.drivers.cli import main as cli

    rows: list[dict] = []
    inner = local.run_session

    def timed(ws, ports, *args, **kwargs):
        started = time.perf_counter()
        result = inner(ws, ports, *args, **kwargs)
        wall = time.perf_counter() - started
        evidence = result.evidence
        if evidence is not None:  # (a call that ran no session: the plan finished, or nothing was due)
            rows.append({"wall_s": wall, "agent_s": evidence.signals.duration_s,
                         "gates_s": sum(g.duration_s for g in evidence.gates),
                         "outcome": result.record.outcome.value if result.record else None})
        return result

    local.run_session = timed
    sys.argv = ["plan-runner", *argv]
    try:
        cli.run()
    finally:
        out.write_text(json.dumps(rows), encoding="utf-8")


if __name__ == "__main__":
    main()
