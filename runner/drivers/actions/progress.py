"""Watch a session while it runs: one progress comment per session job, on the plan's issue, edited as it goes.

Where (docs/github-actions.md, "Watching a session while it runs"): the issue the plan talks in
(`RunState.place`): the issue it was started from with `/plan-runner start` or the start label, else one
plan-runner opens for it at its first session and records as its place, so every later session comments in the
same one. Not the watch pull request: GitHub opens no pull request without a commit on the work branch (422 "No
commits between"), and a session's first commits reach the remote only after its agent ended; the first session
would show nothing while it runs.

When: the comment is posted when the session job starts (on the edits' thread: the agent's start does not wait
for it, docs/performance.md), edited at most once a minute while the session runs
(`runner.core.progress.edit_due`, a pure throttle on an injected clock) and only when something it shows moved
(the checkpoint, the tokens and cost so far, the last tool the agent used), then once more when the session ended,
with the outcome from the verdict. The edits run on a thread of their own with a GitHub client of their own, so a
slow or failing GitHub never holds the session up: a failed edit is logged once, and the session goes on.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from runner.adapters.github.events import GitHubContext
from runner.adapters.render.report import render_progress
from runner.adapters.secrets import redact
from runner.core.ledger import Place
from runner.core.progress import EDIT_INTERVAL_S, Live, edit_due, take_event
from runner.drivers.session import Session

CLOCK: Callable[[], float] = time.monotonic  # the throttle's clock (tests put their own)
END_WAIT_S = 15.0  # how long the job waits for an edit in flight and for the last one, at most


class LiveProgress:
    """The session's progress comment, fed by its events (`on_event`), edited through `edit(body)`."""

    def __init__(self, edit: Callable[[str], None], render: Callable[[Live, float, tuple[str, str] | None], str], *,
                 clock: Callable[[], float] = time.monotonic, interval_s: float = EDIT_INTERVAL_S,
                 log: Callable[[str], None] = lambda text: None, background: bool = True,
                 live: Live | None = None, post: Callable[[], bool] | None = None) -> None:
        """`post`: posts the comment (True: posted), on the edits' thread before any edit, so that the session
        does not wait for GitHub to start its agent; edits wait for it, and there are none when it failed."""
        self._edit, self._render, self._clock, self._interval = edit, render, clock, interval_s
        self._log, self._background = log, background
        self._lock = threading.Lock()
        self._live = live or Live()
        self._started = self._last_edit = clock()  # the comment was just posted: the first edit a minute later
        self._shown = 0  # the `changes` of the record last published
        self._inflight: threading.Thread | None = None
        self._failed = False
        self._ended = False
        self._unposted = False  # the posting failed
        self.edits = 0  # edits GitHub accepted (the posting not counted)
        if post is not None:
            self._post = post
            self._start_with(self._do_post)

    @property
    def live(self) -> Live:
        return self._live

    def on_event(self, kind: str, detail: str) -> None:
        """One event of the session: folded in at once; an edit only when one is due and none is in flight."""
        try:
            with self._lock:
                self._live = take_event(self._live, kind, detail)
                now = self._clock()
                busy = self._inflight is not None and self._inflight.is_alive()
                if (self._ended or busy or self._live.changes == self._shown
                        or not edit_due(self._last_edit, now, self._interval)):
                    return
                self._last_edit, self._shown = now, self._live.changes
                body = self._render(self._live, now - self._started, None)
                self._start(body)
        except Exception as exc:  # noqa: BLE001 - the session's events must go on whatever the progress does
            self._failure(exc)

    def end(self, outcome: str, next_action: str = "") -> None:
        """The session ended: the last edit says how (the verdict's outcome, the next action). Waits for an edit in
        flight and for this one END_WAIT_S at most each."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            inflight = self._inflight
        if inflight is not None:  # an edit, or the posting itself
            inflight.join(END_WAIT_S)
        if self._unposted:  # no comment to edit
            return
        try:
            body = self._render(self._live, self._clock() - self._started, (outcome, next_action))
        except Exception as exc:  # noqa: BLE001
            self._failure(exc)
            return
        last = threading.Thread(target=self._do_edit, args=(body,), name="plan-runner progress", daemon=True)
        last.start()
        last.join(END_WAIT_S)

    def _start(self, body: str) -> None:
        self._start_with(self._do_edit, body)

    def _start_with(self, target: Callable[..., None], *args: str) -> None:
        if not self._background:
            target(*args)
            return
        self._inflight = threading.Thread(target=target, args=args, name="plan-runner progress", daemon=True)
        self._inflight.start()

    def _do_post(self) -> None:
        try:
            posted = self._post()
        except Exception as exc:  # noqa: BLE001 - the session runs as without a progress comment
            self._log(f"no progress comment for this session: {getattr(exc, 'what', None) or exc}")
            posted = False
        if not posted:
            with self._lock:
                self._unposted = self._ended = True  # no comment to edit: nothing more is sent

    def _do_edit(self, body: str) -> None:
        try:
            self._edit(body)
            self.edits += 1
        except Exception as exc:  # noqa: BLE001 - a progress edit is never worth the session
            self._failure(exc)

    def _failure(self, exc: BaseException) -> None:
        if self._failed:
            return
        self._failed = True
        what = getattr(exc, "what", None) or f"{type(exc).__name__}: {exc}"
        self._log(f"the session's progress comment could not be edited ({what}); the session goes on, and later "
                  "edits are tried without a word")


def place_of(driver, s: Session, log: Callable[[str], None]) -> tuple[int, str] | None:
    """Where the plan's progress comments go (the module's docstring): its place, or an issue opened now and
    recorded as its place. None when GitHub refused it (`log` says why)."""
    place = s.state.place
    if place is not None:
        return place.issue, place.url
    plan = s.trusted
    try:
        title = f"plan-runner: {s.plan.title or plan.id}"
        number, url = driver.open_issue(title[:250], (
            f"plan-runner runs the plan `{plan.path}` (`{plan.id}`). Each of its sessions posts one comment here, "
            "edited while it runs (its checkpoint, how long it has run, the tokens and cost so far, the last tool "
            "the agent used) and once more when it ends, with the outcome.\n\n"
            f"The work shows in the plan's pull request from `{plan.work_branch}` once a checkpoint is credited."))
    except Exception as exc:  # noqa: BLE001 - no progress comment: the session runs as without one
        log(f"no progress comment for this session: {getattr(exc, 'what', None) or exc}")
        return None
    try:
        s.write([Place(at=s.ws.clock(), issue=number, url=url)])
    except Exception as exc:  # noqa: BLE001 - the next session opens another one; this one still has its comment
        log(f"the progress issue {url} is not recorded as the plan's ({getattr(exc, 'what', None) or exc})")
    return number, url


def start_progress(driver, ctx: GitHubContext, s: Session, log: Callable[[str], None], *,
                   clock: Callable[[], float] = time.monotonic, background: bool = True) -> LiveProgress | None:
    """The LiveProgress of the session's comment on the plan's place, posted on its own thread (the session's
    start does not wait for GitHub) and edited after. None: GitHub refused the place, `log` says why once, and the
    session runs as without it; a refused posting is logged once too, and nothing more is sent."""
    where = place_of(driver, s, log)
    if where is None:
        return None
    plan = s.trusted
    since = datetime.now(UTC)  # the live meter's readings are stamped with the real time
    transcripts = Path(s.ws.scratch_dir) / plan.id / "transcripts"

    def render(live: Live, elapsed: float, ended: tuple[str, str] | None) -> str:
        from runner.backends.common.meter import read_meter

        reading = read_meter(transcripts, since)
        body = render_progress(s.plan, live, elapsed_s=elapsed, ended=ended, run_url=ctx.run_url or None,
                               cost_usd=reading.cost_usd if reading else None,
                               cost_estimated=bool(reading and reading.estimated))
        return redact(body, s.secrets)

    # the session's number from the start: its hidden marker names it even if the job dies before any edit
    # (a tick that reconciles the session finds the comment by it: end_orphan_progress)
    first = Live(n=s.state.sessions + 1)
    posted: list[int] = []

    def post() -> bool:  # on the progress thread: the agent starts meanwhile (docs/performance.md)
        comment_id, url = driver.post_comment(where[0], render(first, 0.0, None))
        posted.append(comment_id)
        log(f"{url} (edited while the session runs)")
        return True

    return LiveProgress(lambda body: driver.edit_comment(posted[0], body), render, clock=clock, log=log,
                        live=first, post=post, background=background)


_RUNNING_HEAD = re.compile(r"(### plan-runner: .*?) is running \([^)\n]*\)[ \t]*")
_LIVE_NOTE = re.compile(r"^_Edited at most once a minute while the session runs\._", re.MULTILINE)


def ended_by_reconcile(body: str, how: str) -> str | None:
    """A running session's progress comment, as its session ended without its job (`how`): its head says ended,
    TimedOut, and its note why. None when `body` is no running progress comment (it ended, or is not one)."""
    from runner.adapters.github.client import COMMENT_MARKER

    body = body.replace(COMMENT_MARKER, "").rstrip()
    heads = [m for m in re.finditer(r"^### plan-runner: .*$", body, re.MULTILINE)]
    head = _RUNNING_HEAD.fullmatch(heads[0][0]) if heads else None  # the first: plan-runner's own, above the agent's
    if head is None:
        return None
    body = (body[:heads[0].start()] + f"{head[1]} ended: **TimedOut** (its job was stopped)"
            + body[heads[0].end():])
    note = (f"**Outcome:** `TimedOut`: the job running this session ended before the session did: "
            f"{redact_how(how)}. plan-runner's reconcile found it and recorded the session; whatever the agent had "
            "committed is kept (the plan's next session starts from it).\n\n"
            "_This comment was edited while the session ran; it stays as the session ended._")
    notes = list(_LIVE_NOTE.finditer(body))  # the last: the agent's words above it may quote the line
    if notes:
        last = notes[-1]
        return body[:last.start()] + note + body[last.end():] + "\n"
    return f"{body}\n\n{note}\n"


def redact_how(how: str) -> str:
    return how.replace("\n", " ")[:300]


def end_orphan_progress(driver, plan_id: str, issue: int, n: int, how: str, log: Callable[[str], None]) -> bool:
    """The progress comment of session `n` of `plan_id` on its place `issue`, still saying "running" because its
    job was killed, edited to say the session ended and how (found by a tick or reconcile). Only a bot's comment
    that opens with the session's own hidden marker (runner.adapters.render.report.progress_marker) is edited: a
    person's comment quoting the marker is left alone. Returns whether one was edited; a refusal is logged, never
    worth the tick."""
    from runner.adapters.render.report import progress_marker

    marker = str(progress_marker(plan_id, n))
    try:
        for comment in driver.issue_comments(issue):
            if not comment.user_is_bot or not comment.body.lstrip().startswith(marker):
                continue
            body = ended_by_reconcile(comment.body, how)
            if body is None:
                continue
            driver.edit_comment(comment.comment_id, body)
            log(f"session {n}'s progress comment on #{issue} now says it ended ({how})")
            return True
    except Exception as exc:  # noqa: BLE001 - a progress comment is never worth the tick
        log(f"session {n}'s progress comment on #{issue} could not be edited ({getattr(exc, 'what', None) or exc})")
    return False
