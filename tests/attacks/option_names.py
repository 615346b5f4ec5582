"""Commit files and a message shaped like command-line options and shell syntax."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
c = canary_sh("option")
for name in ("--upload-pack=" + c, "-rf", "--output=" + str(LOOT / "out"), "$(" + c + ")"):
    try:
        write("data/" + name.replace("/", "_"), "x\n")
    except OSError:
        pass
write("data/--exec=" + c.replace("/", "_"), "x\n")
git("add", "-A")
git("commit", "-q", "--no-verify", "-m", "$(" + c + ") `" + c + "` --exec=" + c)
say("done")
