"""Commit honest work, then print 30 MB of output, much of it one endless line."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
sys.stdout.write("x" * (20 * 2**20) + "\n")
for i in range(100000):
    sys.stdout.write(f"line {i} " + "y" * 90 + "\n")
sys.stdout.flush()
