"""Do the work, tick and commit on another branch, and stay there."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

git("checkout", "-q", "-b", "elsewhere")
honest_mul()
commit("Add mul")
say("done")
