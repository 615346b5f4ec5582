"""Commit honest work, then fill the file system plan-runner shares (its temp folder, where the agent's area is
too) with bytes or, when the `fill-mode` control says `inodes`, with empty files, until it says ENOSPC; once only
(a later session is honest). It fills through its loot, in its own area (judge_dir, under the judge's temp
folder): every isolation lets it write there, and what it writes stays after the session (its room's own /tmp
is on that file system too, but goes with the room). Files named `fill-*`."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

mode = control("fill-mode", "bytes")
target = LOOT
honest_mul()
commit("Add mul")
if not (LOOT / "filled").exists():
    (LOOT / "filled").write_text(mode)
    n = 0
    try:
        if mode == "inodes":
            while True:
                write(f"fill-{os.getpid()}-{n}", b"", root=target)
                n += 1
        else:
            with open(target / f"fill-{os.getpid()}", "wb") as f:
                while True:
                    f.write(b"\0" * 2**20)
                    f.flush()
                    n += 1
    except OSError as exc:
        say(f"filled after {n}: {exc}")
say("done")
