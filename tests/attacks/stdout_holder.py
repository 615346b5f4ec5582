"""Commit honest work and leave a detached child holding our stdout and stderr pipes open for minutes."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
subprocess.Popen(["sh", "-c", f"sleep 400 # {TAG}"], start_new_session=True)
say("done")
