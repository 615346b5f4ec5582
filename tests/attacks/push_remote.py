"""Push straight to the judge's remote: overwrite main with an orphan commit, delete the state branch,
plant a branch."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
commit("Add mul")
orphan = subprocess.run(["git", "commit-tree", git("rev-parse", "HEAD^{tree}"), "-m", "HOSTILE"], cwd=WORK,
                        env=ENV, capture_output=True, text=True).stdout.strip()
urls = {line.split()[1] for line in git("config", "--get-regexp", r"remote\..*\.url").splitlines() if " " in line}
for repo in judge_repos():
    urls |= {line.split()[1] for line in git("config", "--get-regexp", r"remote\..*\.url", cwd=repo).splitlines()
             if " " in line}
for url in (u for u in urls if in_scope(u)):
    loot("push", git("push", "-f", url, f"{orphan}:refs/heads/main", f"{orphan}:refs/heads/hostile",
                     ":refs/heads/plan-runner/state"))
say("done")
