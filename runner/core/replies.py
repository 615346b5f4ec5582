"""Parse `/plan-runner <verb> [instructions]` replies on a park issue.

Pure: text in, a command (or a parse problem, or nothing) out. The comment body
is untrusted data; the instructions are kept verbatim (`${{ }}`, `$(...)` and
all) and only ever go into a prompt, never into a shell or a workflow expression.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

MAX_INSTRUCTIONS = 8000  # characters; a prompt addendum, not a document

_COMMAND = re.compile(r"^[\s`]*/plan-runner(?=$|[\s`:])[`:]*(?P<rest>.*)$", re.IGNORECASE)


class Verb(str, Enum):
    RESUME = "resume"  # go on where the plan stopped
    RETRY = "retry"  # run the failed step again with fresh attempts
    SKIP = "skip"  # mark the current checkpoint skipped and move on
    STOP = "stop"  # end the plan; nothing more is dispatched


@dataclass(frozen=True)
class ReplyCommand:
    verb: Verb
    instructions: str = ""


@dataclass(frozen=True)
class ReplyProblem:
    """A `/plan-runner` line that is not a valid command; the adapter answers with `HELP`."""

    what: str
    word: str = ""


HELP = """\
plan-runner understands these replies (one per comment, at the start of a line):

    /plan-runner resume [instructions]   continue the plan; the instructions go into the next prompt
    /plan-runner retry [instructions]    retry the failed step with a fresh attempt budget
    /plan-runner skip [reason]           skip the current checkpoint and go on
    /plan-runner stop [reason]           stop the plan; nothing more runs

Only users with write access to the repository can steer a plan."""


def _quoted(line: str) -> bool:
    return line.lstrip().startswith(">")


def parse_reply(body: str) -> ReplyCommand | ReplyProblem | None:
    """The first `/plan-runner` command in a comment, or None when there is none.

    Quoted lines (`> ...`, as e-mail replies quote the issue) are neither
    commands nor instructions. The instructions are the rest of the command
    line plus every unquoted line after it, stripped at both ends.
    """
    lines = body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for index, line in enumerate(lines):
        if _quoted(line):
            continue
        match = _COMMAND.match(line)
        if match is None:
            continue
        rest = match["rest"].strip()
        if line.lstrip().startswith("`") and rest.endswith("`"):
            rest = rest[:-1].rstrip()  # the command was copied from inline code
        word, inline = (re.split(r"\s", rest, maxsplit=1) + [""])[:2]
        # `resume:` and `resume,` are the same command; people type them.
        verb_text = word.strip("`").rstrip(":,.;!").lower()
        if not verb_text:
            return ReplyProblem("`/plan-runner` needs a command: resume, retry, skip or stop")
        try:
            verb = Verb(verb_text)
        except ValueError:
            return ReplyProblem(f"unknown command `{word[:40]}`", word=word[:40])
        following = [ln for ln in lines[index + 1:] if not _quoted(ln)]
        instructions = "\n".join([inline, *following]).strip()
        if len(instructions) > MAX_INSTRUCTIONS:
            return ReplyProblem(f"the instructions are {len(instructions)} characters long; "
                                f"the limit is {MAX_INSTRUCTIONS}: shorten them or link a file in the repository",
                                word=verb.value)
        return ReplyCommand(verb, instructions)
    return None
