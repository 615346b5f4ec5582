"""Commit honest work, then leave forty detached processes (setsid, double fork) sleeping."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
for i in range(40):
    subprocess.Popen(["sh", "-c", f"(setsid sleep 240 & ) ; sleep 240 # {TAG}"], start_new_session=(i % 2 == 0),
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
say("done")
