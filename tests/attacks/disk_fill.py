"""Commit honest work, then fill the file system plan-runner shares (its temp folder) with bytes or, when
`<scope>/fill-mode` says `inodes`, with empty files, until it says ENOSPC; once only (a later session is honest)."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

mode = (SCOPE / "fill-mode").read_text().strip() if (SCOPE / "fill-mode").exists() else "bytes"
target = SCOPE / "tmp"
honest_mul()
commit("Add mul")
if not (LOOT / "filled").exists():
    (LOOT / "filled").write_text(mode)
    n = 0
    try:
        if mode == "inodes":
            while True:
                write(f"tmp/fill-{os.getpid()}-{n}", b"", root=SCOPE)
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
