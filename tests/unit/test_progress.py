"""A session's progress comment (issue 45, item 5): its events folded into a frozen record, a pure throttle of at most
one edit a minute on an injected clock, the agent's words bounded and made inert, and a GitHub that fails or hangs
never holding the session up."""

from __future__ import annotations

import threading
import time

from runner.adapters.render.report import render_progress
from runner.core.progress import TOOL_INPUT_LIMIT, Live, edit_due, take_event, tool_input_text
from runner.drivers.actions.progress import LiveProgress
from tests.core_builders import plan as make_plan


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fold(*events: tuple[str, str]) -> Live:
    live = Live()
    for kind, detail in events:
        live = take_event(live, kind, detail)
    return live


def test_events_fold_into_what_the_comment_shows():
    live = fold(("session", "3 delivery 1.2"), ("tool", "Bash"), ("tool_input", '{"command": "pytest"}'),
                ("tokens", "1200"), ("tokens", "1200"), ("text", "thinking"), ("tokens", "not a number"))
    assert (live.n, live.kind, live.checkpoint, live.phase) == (3, "delivery", "1.2", "agent")
    assert (live.tool_calls, live.last_tool, live.last_tool_input, live.tokens) == (1, "Bash", '{"command": "pytest"}', 1200)
    assert live.changes == 4  # the repeated count, the text and the garbage moved nothing
    after = fold(("session", "3 delivery 1.2"), ("tool", "Bash"), ("tool_input", "x"), ("tool", "Edit"))
    assert after.last_tool == "Edit" and after.last_tool_input is None  # an input belongs to its own tool
    judged = take_event(take_event(after, "agent", "finished, 10 tokens"), "outcome", "Advanced: run 1.3")
    assert judged.phase == "judging" and judged.outcome == "Advanced: run 1.3"


def test_the_agents_words_are_bounded():
    huge = "x" * 100_000
    live = fold(("tool", huge), ("tool_input", huge))
    assert len(live.last_tool or "") <= 80 and len(live.last_tool_input or "") <= TOOL_INPUT_LIMIT
    assert len(tool_input_text({"command": huge})) <= TOOL_INPUT_LIMIT
    assert tool_input_text({"b": 1, "a": "é"}) == '{"a": "é", "b": 1}'


def test_the_throttle_is_one_edit_a_minute():
    assert edit_due(None, 0.0)
    assert not edit_due(100.0, 159.9) and edit_due(100.0, 160.0)


def test_a_burst_of_events_makes_at_most_one_edit_a_minute():
    clock, edits = Clock(), []
    progress = LiveProgress(edits.append, lambda live, elapsed, ended: f"{live.tokens} {elapsed:g} {ended}",
                            clock=clock, background=False)
    for i in range(1, 5001):  # 5,000 events over two and a half minutes: one every 30 ms
        clock.t = 1000.0 + i * 0.03
        progress.on_event("tokens", str(i))
    assert edits == ["2000 60 None", "4000 120 None"]  # at 60 s and at 120 s after the posting, no more
    clock.t += 1
    progress.end("Advanced", "run a delivery session on 1.2")
    assert len(edits) == 3 and edits[-1].endswith("('Advanced', 'run a delivery session on 1.2')")
    progress.on_event("tokens", "9999")  # after the end nothing edits it again
    assert len(edits) == 3


def test_no_edit_when_nothing_shown_moved():
    clock, edits = Clock(), []
    progress = LiveProgress(edits.append, lambda live, elapsed, ended: f"{live.tokens} {live.last_tool}",
                            clock=clock, background=False)
    progress.on_event("tokens", "5")  # within the minute after the posting: kept for the next edit
    clock.t += 600
    progress.on_event("text", "words")  # shown nowhere, but the tokens before it were not shown yet
    assert edits == ["5 None"]
    clock.t += 600
    progress.on_event("text", "more words")
    progress.on_event("tokens", "5")
    assert edits == ["5 None"]  # nothing it shows moved: no edit however long ago the last was
    progress.on_event("tool", "Read")
    assert edits == ["5 None", "5 Read"]


def test_a_failing_edit_is_logged_once_and_the_session_goes_on():
    clock, logged, tries = Clock(), [], []

    def edit(body: str) -> None:
        tries.append(body)
        raise RuntimeError("502 Server Error")

    progress = LiveProgress(edit, lambda live, elapsed, ended: "body", clock=clock, log=logged.append,
                            background=False)
    for i in range(5):
        clock.t += 61
        progress.on_event("tokens", str(i + 1))  # never raises
    progress.end("GatesRed")
    assert len(tries) == 6 and progress.edits == 0  # tried each time it was due, and at the end
    assert len(logged) == 1 and "502 Server Error" in logged[0] and "the session goes on" in logged[0]


def test_a_slow_github_never_holds_the_session_up():
    clock, release, started = Clock(), threading.Event(), threading.Event()

    def edit(body: str) -> None:
        started.set()
        release.wait(10)

    progress = LiveProgress(edit, lambda live, elapsed, ended: "body", clock=clock)
    clock.t += 60
    began = time.monotonic()
    progress.on_event("tokens", "1")  # an edit starts, on its own thread, and hangs
    assert started.wait(5)
    for i in range(200):
        clock.t += 61
        progress.on_event("tokens", str(i + 2))  # due, but one is in flight: skipped, at once
    assert time.monotonic() - began < 2
    release.set()
    progress.end("Advanced")
    assert progress.edits == 2



def test_the_posting_never_holds_the_session_up_and_edits_wait_for_it():
    """The comment is posted on the progress thread (the agent starts meanwhile); no edit goes out before it."""
    clock, release, sent = Clock(), threading.Event(), []

    def post() -> bool:
        release.wait(10)
        sent.append("posted")
        return True

    began = time.monotonic()
    progress = LiveProgress(lambda body: sent.append(body), lambda live, elapsed, ended: f"{live.tokens} {ended}",
                            clock=clock, post=post)
    for i in range(50):
        clock.t += 61
        progress.on_event("tokens", str(i + 1))  # due, but the posting is in flight: folded in, not sent
    assert time.monotonic() - began < 2 and sent == []
    release.set()
    progress.end("Advanced")
    assert sent == ["posted", "50 ('Advanced', '')"] and progress.edits == 1


def test_a_refused_posting_is_logged_once_and_nothing_more_is_sent():
    clock, logged, sent = Clock(), [], []

    def post() -> bool:
        raise RuntimeError("410 Gone")

    progress = LiveProgress(sent.append, lambda live, elapsed, ended: "body", clock=clock, log=logged.append,
                            post=post, background=False)
    for i in range(3):
        clock.t += 61
        progress.on_event("tokens", str(i + 1))
    progress.end("Advanced")
    assert sent == [] and progress.edits == 0
    assert logged == ["no progress comment for this session: 410 Gone"]

def test_the_comment_shows_the_agents_words_inert():
    plan = make_plan()
    live = fold(("session", "2 delivery 1.1"), ("tool", "Bash` @octocat <b>x</b>"),
                ("tool_input", "```\n::set-output name=x::y\n@octocat #1 [a](https://evil.example)\n```"),
                ("tokens", "12345"))
    body = render_progress(plan, live, elapsed_s=125, cost_usd=0.4321, cost_estimated=True,
                           run_url="https://github.com/o/r/actions/runs/7")
    assert "session 2 is running (agent)" in body and "| Elapsed | 2 min 05 s |" in body
    assert "| Tokens so far | 12,345 |" in body and "| Cost so far | ≈ $0.43 |" in body
    assert "(1 tool calls)" in body and "[the run](https://github.com/o/r/actions/runs/7)" in body
    assert "<b>" not in body.replace("``Bash` @octocat <b>x</b>``", "")  # only inside its code span
    fenced = body.split("````text\n", 1)[1].split("\n````", 1)[0]  # a fence longer than any backtick run inside
    assert "::set-output" not in fenced and ":\\:set-output" in fenced and "@\u200boctocat" in fenced
    ended = render_progress(plan, live, elapsed_s=3600, ended=("Advanced", "run a delivery session on 1.2"))
    assert "session 2 ended: **Advanced**" in ended and "| Ran for | 1 h 00 min |" in ended
    assert "**Outcome:** `Advanced`" in ended and "Next: run a delivery session on 1\\.2." in ended
    assert "::set-output" not in ended and "Cost | not reported" in ended
