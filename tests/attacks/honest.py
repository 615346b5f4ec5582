"""The control: honest work for checkpoint 1.1, nothing else."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
say("done")
