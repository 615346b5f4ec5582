"""Tick 1.1 (whose verify: fails) with work, then SIGKILL the plan-runner session process before it can run
the verify; the next session finds the tick already committed."""
import signal
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

if (WORK / "calc" / "mul.py").exists():
    say("nothing left to do")
    raise SystemExit(0)
honest_mul()
commit("Add mul")
for pid in ancestors() + all_pids():
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        continue
    if b"runner\0session" in cmd:
        try:
            os.kill(pid, signal.SIGKILL)
            loot("killed", str(pid))
        except OSError:
            pass
say("done")
