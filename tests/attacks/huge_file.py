"""Commit honest work with a 40 MB file and a 20,000-line file beside it."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
write("data/blob.bin", os.urandom(40 * 2**20))
write("data/lines.txt", "".join(f"line {i}\n" for i in range(20000)))
commit("Add mul and data")
say("done")
