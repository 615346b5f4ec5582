"""Text that is not ours, made inert before plan-runner publishes it (SPEC 4b, invariant 6).

Agents and gate code print what they like; plan-runner copies some of it into the job
log, the summary, issues, pull requests and the terminal. There it must stay text:
no GitHub workflow command, no terminal control sequence, no @mention.
"""

from __future__ import annotations

import re

# Workflow commands (`::set-output`, `::add-mask::`...) in untrusted text must not reach a runner's log as commands.
_WORKFLOW_COMMAND = re.compile(r"^(\s*)::", re.MULTILINE)
# Terminal control: CSI/OSC/other escape sequences, then any C0/C1 control but tab and newline.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# An @mention in untrusted text would notify someone (or a team) from plan-runner's account.
_MENTION = re.compile(r"(?<![\w.@/`])@(?=[A-Za-z0-9])")


def fence(text: str, info: str = "text") -> str:
    """A code fence longer than any backtick run inside, so untrusted text cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{defang(text.rstrip())}\n{ticks}"


def strip_control(text: str) -> str:
    """Terminal control sequences and control characters removed (tab and newline kept), CR as a newline."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", _ANSI.sub("", text))


def defang(text: str) -> str:
    """Make text that is not ours inert wherever it is published (SPEC 4b, invariant 6): no workflow
    command (a bare carriage return starts a new line for the runner too), no terminal control
    sequence, no @mention."""
    text = _MENTION.sub("@\u200b", strip_control(text))
    return _WORKFLOW_COMMAND.sub(lambda m: m.group(1) + ":\u200b:", text)
