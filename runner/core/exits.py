"""Every exit code plan-runner's CLI and action return, in one place (documented in docs/usage.md).

A script or a workflow tells the cases apart by the code alone, so no two meanings share one.
"""

from __future__ import annotations

from enum import IntEnum, unique


@unique
class Exit(IntEnum):
    OK = 0  # finished, nothing to do, or another job advanced the plan first
    UNEXPECTED = 1  # a bug or an unexpected failure: the message says how to get the traceback
    USER_ERROR = 2  # a PlanRunnerError: what, why and the fix were printed
    PARKED = 3  # the plan waits for a human; the report says why
    WAITING = 4  # a backoff longer than --max-wait: run again later (the state is saved)
    SERVICE_UNAVAILABLE = 5  # GitHub or a model API stayed down past the retry budget: run again later
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, the shell's convention)
