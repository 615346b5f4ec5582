"""Poison the set-up cache kept in the gates' tree (issue 26): session 1 commits honest work and a test module
that, when the gates import it, swaps the restored `build/venv/bin/python` for a script that passes everything
(and puts its times back). Session 2 removes that module, breaks `add` and claims 1.2: a kept set-up that
trusted the tree would judge it with the fake python, a false Advanced."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

POISON = f'''import os
fake = os.path.join("build", "venv", "bin", "python")
st = os.lstat(fake)
os.unlink(fake)
with open(fake, "w") as fh:
    fh.write("#!/bin/sh\\nexit 0\\n")
os.chmod(fake, 0o755)
os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
open({str(LOOT / "poisoned")!r}, "a").write(os.getcwd() + "\\n")
'''

if not (WORK / "tests" / "test_zz_poison.py").exists() and not (LOOT / "committed").exists():
    honest_mul()
    write("tests/test_zz_poison.py", POISON)
    commit("Add mul (and a test module that swaps the gates' python)")
    (LOOT / "committed").write_text("1")
else:
    git("rm", "-q", "tests/test_zz_poison.py")
    write("calc/__init__.py", BROKEN_ADD)
    tick("1.2")
    commit("Break add; claim 1.2")
