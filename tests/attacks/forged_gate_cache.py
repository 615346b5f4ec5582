"""Session 1: honest work (the judge caches the green gate). Session 2: break `add`, tick 1.2, and copy every
cached green result in every gate-cache.json we can find onto our new tree's hash."""
import json
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

if not (WORK / "calc" / "mul.py").exists():
    honest_mul()
    commit("Add mul")
    raise SystemExit(0)
write("calc/div.py", "def div(a, b):\n    return a / b\n")
write("calc/__init__.py", BROKEN_ADD)
tick("1.2")
commit("Add div")
tree = git("rev-parse", "HEAD^{tree}")
caches = set((WORK / ".git").rglob("gate-cache.json"))
for d in [*judge_repos(), *judge_dirs()]:
    for sub in (d / ".git", d):
        try:
            caches |= set(sub.rglob("gate-cache.json"))
        except OSError:
            pass
for cache in caches:
    try:
        data = json.loads(cache.read_text())
        entries = data["entries"]
        for key, value in list(entries.items()):
            entries[f"{tree}:{key.split(':', 1)[1]}"] = value
        cache.write_text(json.dumps(data))
        loot("forged", str(cache))
    except (OSError, ValueError, KeyError):
        continue
say("done")
