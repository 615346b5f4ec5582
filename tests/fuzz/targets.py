"""Coverage-guided fuzzing (atheris / libFuzzer) of the parsers that read untrusted bytes.

Run one target: `python tests/fuzz/targets.py <target> -runs=20000 SCRATCH_DIR tests/fuzz/seeds/<target>`
(libFuzzer writes the inputs it finds into the first folder: never make it the seeds).
Each target states the contract the hypothesis tests state: any input ends in a result or in the
documented clear error (PlanRunnerError), never another exception. A violation is an uncaught
exception: libFuzzer prints the input, writes a crash-* file and exits non-zero.
`tests/integration/test_fuzz_atheris.py` runs every target for a bounded number of inputs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import atheris

# Coverage is collected where the bytes are read: plan-runner's own modules and the parsers they hand text to (PyYAML
# here; markdown-it is imported later, at its first use, and json above, so neither was ever instrumented). Instrumenting
# everything imported here (pydantic's 40 modules above all, whose validation runs in pydantic-core, Rust) took ~7 of
# each target's ~8 s start and guides no input.
PARSERS = ["runner", "yaml", "markdown_it", "json"]

with atheris.instrument_imports(include=PARSERS):
    from runner.backends.codex.codexjson import parse_codex_stream
    from runner.backends.claude_code.streamjson import parse_stream
    from runner.core.errors import PlanRunnerError
    from runner.adapters.github.events import parse_event
    from runner.core.planfile import diff_tracker, parse_plan, with_tracker
    from runner.core.replies import parse_reply

# the valid plan the tracker diffs are taken against: the plan seed itself
VALID_PLAN = (Path(__file__).resolve().parent / "seeds" / "plan" / "valid.md").read_text(encoding="utf-8")
_BASE = parse_plan(VALID_PLAN, "plans/calc.md")


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def plan(data: bytes) -> None:
    text = _text(data)
    try:
        parse_plan(text, "plans/fuzz.md")
    except PlanRunnerError:
        pass
    try:
        head = with_tracker(_BASE, text)
    except PlanRunnerError:
        return
    for flip in diff_tracker(_BASE, head):
        assert _BASE.checkpoint(flip.checkpoint_id) is not None


def streams(data: bytes) -> None:
    lines = _text(data).splitlines()
    assert parse_stream(lines).backend == "claude-code"
    parse_codex_stream(lines)


def reply(data: bytes) -> None:
    parse_reply(_text(data))


def event(data: bytes) -> None:
    if not data:
        return
    name = ("issue_comment", "workflow_dispatch", "schedule", "push", "")[data[0] % 5]  # the first byte
    try:
        payload = json.loads(_text(data[1:]))
    except ValueError:
        return
    try:
        parse_event(name, payload)
    except PlanRunnerError:
        pass


TARGETS = {"plan": plan, "streams": streams, "reply": reply, "event": event}

if __name__ == "__main__":
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()
