"""Everything an agent writes that becomes a text of the record, each just under what plan-runner reads or
far over it: 1,900 checkpoint-shaped lines in the plan (each a protected change), a checkpoint renamed to 96 KB,
a 2 MB handoff, a commit touching 3,000 files with a 100 KB message and 1 MB of output."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

honest_mul()
text = PLAN.read_text().replace("1.2 Division", "1.2 " + "Division" * 12_000, 1)
PLAN.write_text(text + "".join(f"- [x] 9.{i} Forged checkpoint {i}\n" for i in range(1_900)))
handoff = Path(os.environ.get("PLAN_RUNNER_HANDOFF") or WORK / "plans" / "calc.handoff.md")
handoff.write_text("HUMAN: look " + "x" * 2_000_000)
for i in range(3_000):
    write(f"data/f{i}.txt", str(i))
commit("Add mul " + "m" * 100_000)
say("y" * 1_000_000)
