"""Stopping a test server's loop with a deadline: a loop that does not stop is a failure that says where every
thread of the process stands, not a test that hangs until pytest-timeout kills it with no word on why.

(Seen twice in CI, never alone: a test GitHub server stopped answering mid-test and `shutdown()` then waited
forever on its `serve_forever` thread. The stacks this prints are what finds the cause.)"""

from __future__ import annotations

import sys
import threading
import traceback
from socketserver import BaseServer

STOP_S = 30.0


def threads_now() -> str:
    """Every thread of this process and where it stands, innermost call last."""
    frames = sys._current_frames()
    out = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        where = "".join(traceback.format_stack(frame)) if frame is not None else "  (no frame)\n"
        out.append(f"--- thread {thread.name} (daemon={thread.daemon}, ident={thread.ident}) ---\n{where}")
    return "\n".join(out)


def stop_loop(httpd: BaseServer, loop: threading.Thread, what: str, deadline_s: float = STOP_S) -> None:
    """`httpd.shutdown()`, which waits for `loop` (the thread in `serve_forever`) to leave it, at most
    `deadline_s`; past that an AssertionError carrying every thread's stack."""
    stopper = threading.Thread(target=httpd.shutdown, name=f"stop {what}", daemon=True)
    stopper.start()
    stopper.join(deadline_s)
    if stopper.is_alive():
        raise AssertionError(f"{what}: its serving loop did not stop within {deadline_s:g} s "
                             f"(loop thread alive: {loop.is_alive()}); every thread of this process:\n"
                             + threads_now())
