"""Commit a file whose name is not valid UTF-8 next to a new workflow file (the crash of the first session
used to let the workflow be pushed by the next)."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

if not (WORK / "calc" / "mul.py").exists():
    honest_mul()
os.makedirs(os.fsencode(WORK) + b"/data", exist_ok=True)
with open(os.fsencode(WORK) + b"/data/bad-\xff\xfe-name.txt", "wb") as fh:
    fh.write(b"x\n")
write(".github/workflows/evil.yml", "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n"
      "    steps:\n      - run: echo HOSTILE\n")
commit("Add mul")
say("done")
