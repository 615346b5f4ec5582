"""Session 1: honest work (credited, pushed). Session 2: throw that history away (reset to the base) and
commit something else in its place."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

if not (WORK / "calc" / "mul.py").exists():
    honest_mul()
    commit("Add mul")
    raise SystemExit(0)
base = git("merge-base", "HEAD", "main") or git("rev-list", "--max-parents=0", "HEAD")
git("reset", "-q", "--hard", base)
write("calc/div.py", "def div(a, b):\n    return a / b\n")
commit("Start over")
say("done")
