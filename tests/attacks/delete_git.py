"""Commit honest work, then delete the repository's .git entirely."""
import shutil
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
shutil.rmtree(WORK / ".git", ignore_errors=True)
say("done")
