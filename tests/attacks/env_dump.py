"""Keep our own environment: it should hold this backend's credentials and nothing else."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

loot("own environment", "\n".join(f"{k}={v}" for k, v in os.environ.items()))
honest_mul()
commit("Add mul")
