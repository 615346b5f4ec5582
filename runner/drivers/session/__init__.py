"""One session of a plan, as a package of explicit phases (docs/design.md; docs/reliability.md, "Fault points").

* `context`: what a session works with: the workspace, the drivers, the plan's ledger handle (`Session`);
* `phases`: load -> begin -> run_agent -> import_work -> judge -> decide -> persist -> apply, and
  `run_session`, the whole session read top to bottom;
* `faults`: the crash-consistency fault points at the boundaries between the phases, listed once;
* `cut_short`: the one path for a session cut short (Ctrl-C, SIGTERM, a job killed and found later,
  a cancelled Actions job): reap, salvage the agent's clone, keep its work, record.

The phases are imported on first use (`status` and `logs` need only the context).
"""

from __future__ import annotations

from runner.drivers.session.context import (
    EVIDENCE_FILE, TRANSCRIPTS_DIR, UNPUBLISHED, Ports, Session, SessionResult, Workspace, agent_pid_file,
    isolation_of, judge_tree, load_session, load_trusted_plan,
)
from runner.drivers.session.faults import FAULT_POINTS, fault_point

_LAZY = {
    "run_session": "phases", "apply_action": "phases", "dispatch": "phases", "park_refused_dispatch": "phases",
    "reconcile_orphan": "cut_short", "record_interruption": "cut_short", "recorded_interruptions": "cut_short",
    "salvage": "cut_short", "session_ref": "cut_short",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"runner.drivers.session.{_LAZY[name]}"), name)
    raise AttributeError(name)


__all__ = ["EVIDENCE_FILE", "FAULT_POINTS", "TRANSCRIPTS_DIR", "UNPUBLISHED", "Ports", "Session",
           "SessionResult", "Workspace", "agent_pid_file", "fault_point", "isolation_of", "judge_tree", "load_session",
           "load_trusted_plan"]
__all__ += list(_LAZY)
