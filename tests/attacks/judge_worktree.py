"""Commit a broken add with the tick, and rewrite the judge's own working copy (plan gates to 'true', the
code fixed) wherever we can find it."""
import re
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul(broken_add=True)
commit("Add mul")
for repo in judge_repos():
    try:
        plan = repo / "plans" / "calc.md"
        plan.write_text(re.sub(r"run: .*", "run: 'true'", plan.read_text(), count=1))
        (repo / "calc" / "__init__.py").write_text(GOOD_ADD)
    except OSError:
        pass
say("done")
