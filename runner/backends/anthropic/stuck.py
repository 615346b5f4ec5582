"""When the built-in agent is stuck: its tool calls since the work tree last changed, read for a loop.

A careful peer's rules (OpenHands' stuck detector is the reference), on frozen records; pure, no I/O:

* ``repeated_error``: the same call failing with the same error :data:`ERROR_REPEATS` times in a row;
* ``repeated_result``: the same call with the same result :data:`RESULT_REPEATS` times in a row (`git status`
  thirteen times, each identical, is not work);
* ``alternation``: two calls taking turns, each with the same result every time, for :data:`ALTERNATION_STEPS`
  steps in a row (read, run, read, run...);
* ``cycle``: :data:`CYCLE_STEPS` steps in a row that each repeat, call and result, a step made since the work tree
  last changed (a longer loop: write the same text, run, edit, write, run, edit...);
* ``toggle``: the work tree's files back in the same content for the :data:`TOGGLE_VISITS`-th time (an edit that
  flips a test's expected value 3, 4, 3, 4, or a file written broken and mended again and again: each edit is a
  change, so the rules above never see it). The content is the files' alone, committed or not: the 1.5B flipped
  `* 100` and `// 100` with a commit after each, and a state that counted HEAD never came back. A commit of the
  content just written stays in the same state; only a change into a state is a visit.

Nothing counts across a change to the work tree: a step that changed it (a file written, a commit) starts the
count again, so re-running a failing gate after each edit is iteration, never a repeat. Results are compared
normalised (``runner.core.fingerprint.normalise_error``: durations, temp paths, ids), so "1 failed in 0.03s" and
"1 failed in 0.04s" are the same result.

The loop (runner.backends.anthropic.backend) names the first loop of a session to the model and reads the steps
after it anew; the second ends the session. This is the agent's own stop inside one session. The seed's rule at the plan's level (the same failing session
twice in a row parks the plan) is the policy's circuit breaker (runner.core.policy), not this.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.core.fingerprint import normalise_error

ERROR_REPEATS = 3
RESULT_REPEATS = 4
ALTERNATION_STEPS = 6  # A B A B A B: three rounds of the same two calls
CYCLE_STEPS = 6  # after the first round, six steps with nothing new: A B C A B C A B C
TOGGLE_VISITS = 3  # A B A B A: the third time the work tree is in state A


@dataclass(frozen=True)
class Step:
    """One tool call as the rules see it: the call (name and canonical input), whether it succeeded, its result
    (normalised) and whether it changed the work tree (files or HEAD)."""

    call: str
    ok: bool
    result: str
    changed: bool = False
    tree: str = ""  # the work tree's content after a step that changed it (files only, committed or not)


@dataclass(frozen=True)
class Stuck:
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"stuck ({self.rule}): {self.detail}"


def step(name: str, args: Any, ok: bool, text: str, changed: bool, tree: str = "") -> Step:
    """The Step of a tool call: its input canonical (key order does not matter), its result normalised."""
    call = f"{name} {json.dumps(args, sort_keys=True, default=str, ensure_ascii=False)}"
    return Step(call, ok, normalise_error(text), changed, tree if changed else "")


def since_change(steps: Sequence[Step]) -> Sequence[Step]:
    """The steps after the last one that changed the work tree (all of them if none did)."""
    for i in range(len(steps) - 1, -1, -1):
        if steps[i].changed:
            return steps[i + 1:]
    return steps


def _same(a: Step, b: Step) -> bool:
    return a.call == b.call and a.ok == b.ok and a.result == b.result


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stuck(steps: Sequence[Step]) -> Stuck | None:
    """The rule the last steps break, or None. Only steps since the work tree last changed count (but for
    ``toggle``, which reads the states the changes left)."""
    changes = [s for s in steps if s.changed and s.tree]
    # a visit is a change that enters a state: a commit of the content just written stays in it
    entries = [s for i, s in enumerate(changes) if i == 0 or s.tree != changes[i - 1].tree]
    if entries and entries[-1] is changes[-1]:
        visits = sum(1 for s in entries if s.tree == changes[-1].tree)
        if visits >= TOGGLE_VISITS:
            calls = list(dict.fromkeys(s.call for s in changes))[-3:]
            return Stuck("toggle", f"the work tree came back to the same state {visits} times (its changes undo each "
                                   f"other): {_short(' / '.join(calls), 400)}")
    tail = since_change(steps)
    last = tail[-1] if tail else None
    if last is None:
        return None
    if not last.ok and len(tail) >= ERROR_REPEATS and all(_same(s, last) for s in tail[-ERROR_REPEATS:]):
        return Stuck("repeated_error", f"the same call failed {ERROR_REPEATS} times in a row with the same error and "
                                       f"no change to the work tree: {_short(last.call, 200)}: {_short(last.result, 300)}")
    if len(tail) >= RESULT_REPEATS and all(_same(s, last) for s in tail[-RESULT_REPEATS:]):
        return Stuck("repeated_result", f"the same call gave the same result {RESULT_REPEATS} times in a row and "
                                        f"nothing changed in the work tree: {_short(last.call, 200)}")
    if len(tail) >= ALTERNATION_STEPS:
        window = tail[-ALTERNATION_STEPS:]
        a, b = window[-2], window[-1]
        if all(_same(s, (a, b)[i % 2]) for i, s in enumerate(window)):
            return Stuck("alternation", f"two calls took turns {ALTERNATION_STEPS} times with the same results and no "
                                        f"change to the work tree: {_short(a.call, 150)} / {_short(b.call, 150)}")
    if len(tail) > CYCLE_STEPS:
        start = len(tail) - CYCLE_STEPS
        if all(any(_same(tail[i], earlier) for earlier in tail[:i]) for i in range(start, len(tail))):
            calls = list(dict.fromkeys(s.call for s in tail[start:]))
            return Stuck("cycle", f"{CYCLE_STEPS} calls in a row only repeated calls made since the work tree last "
                                  f"changed, with the same results: {_short(' / '.join(calls), 400)}")
    return None
