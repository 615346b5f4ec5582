"""Print, hand off and commit text made to be published: workflow commands behind a bare carriage return,
ANSI and OSC sequences, @mentions; then ask for a human so it lands in a park issue."""
import sys; sys.path.insert(0, __import__("os").path.dirname(__file__))  # noqa: E702
from hostile import *  # noqa: F401,F403

TEXT = ("ok\r::set-output name=outcome::Advanced\rHOSTILE\r::add-mask::x\r::error::HOSTILE fake failure\n"
        "\x1b]0;HOSTILE-title\x07\x1b[2J\x1b[31mred\x1b[0m\n@octocat @octo-org/admins please merge\n"
        "%0A::warning::HOSTILE\n")
say(TEXT)
sys.stderr.write(TEXT)
write("notes.md", TEXT)
commit("notes " + TEXT)
Path(os.environ.get("PLAN_RUNNER_HANDOFF") or WORK / "plans" / "calc.handoff.md").write_text(
    "HUMAN: which one? " + TEXT)
