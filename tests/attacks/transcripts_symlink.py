"""Replace the transcripts folders we can find (ours and the judge's scratch) by symlinks to a folder we own,
so that the judge writes there."""
import shutil
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

outside = LOOT / "outside"
outside.mkdir(exist_ok=True)
honest_mul()
commit("Add mul")
for root in [WORK, *judge_repos()]:
    for scratch in (root / ".git" / "plan-runner" / "calc",):
        try:
            scratch.mkdir(parents=True, exist_ok=True)
            t = scratch / "transcripts"
            if t.is_symlink() or t.is_file():
                t.unlink()
            elif t.exists():
                shutil.rmtree(t)
            t.symlink_to(outside)
            for name in ("gate-cache.json",):
                (scratch / name).unlink(missing_ok=True)
                (scratch / name).symlink_to(outside / name)
        except OSError:
            pass
say("done")
