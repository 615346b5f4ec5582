"""A port of the GitHub Actions runner's workflow-command reading, to check plan-runner's output against.

Ported from actions/runner at commit 258d6c857db3519913f7deb6004b60172f8043ae (2026-08-17):

* lines: `src/Runner.Sdk/ProcessInvoker.cs` `StartReadStream` reads the step's stdout and stderr with
  .NET `StreamReader.ReadLine`, which ends a line at LF, CR or CRLF (nothing else: not NEL, not U+2028).
* the pre-filter: `src/Runner.Worker/Handlers/OutputManager.cs` `OnDataReceived` hands a line to the
  command manager when `line.IndexOf("##[") >= 0 || line.IndexOf("::") >= 0`.
* the parsers: `src/Runner.Common/ActionCommand.cs` `TryParseV2` (`::name k=v,...::data` after
  `TrimStart()`) and `TryParse` (the legacy `##[name k=v;...]data`, found with `IndexOf` anywhere).
* the commands: `src/Runner.Worker/ActionCommandManager.cs` registers `stop-commands` and every command
  extension (set-env, set-output, save-state, add-mask, add-path, add-matcher, remove-matcher, debug,
  warning, error, notice, group, endgroup, echo), looked up case-insensitively; `stop-commands` registers
  its token as a command (anything the agent chooses) and parses nothing else until it is seen.

One thing the port makes stricter on purpose: .NET's `string.IndexOf(string)` and `StartsWith(string)`
compare with the current culture (ICU on Linux: the runner installs libicu), which skips
default-ignorable characters (zero-width spaces, joiners, soft hyphens, bidi marks, C0 controls). The
port reads a line twice, as written (ordinal) and with those characters removed, and counts a command
if either reading finds one: an over-approximation of ICU, so text it finds inert is inert.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

PREFIX = "##["
COMMAND_KEY = "::"
REGISTERED = frozenset({
    "stop-commands", "set-env", "set-output", "save-state", "add-mask", "add-path", "add-matcher",
    "remove-matcher", "debug", "warning", "error", "notice", "group", "endgroup", "echo",
})


class _Any:
    """Every command name registered: what a stop token (any text) could make of a name."""

    def __contains__(self, name: object) -> bool:
        return True


ANY = _Any()

# .NET Char.IsWhiteSpace: Zs, Zl, Zp, U+0009-U+000D, U+0085, U+00A0 (what String.TrimStart() removes).
_DOTNET_SPACE = {chr(c) for c in (*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                  0x2029, 0x202F, 0x205F, 0x3000)}


def split_lines(data: str) -> list[str]:
    """`StreamReader.ReadLine` over the whole stream: LF, CR and CRLF end a line; a last unterminated
    line counts."""
    lines = re.split(r"\r\n|\r|\n", data)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def trim_start(s: str) -> str:
    i = 0
    while i < len(s) and s[i] in _DOTNET_SPACE:
        i += 1
    return s[i:]


@dataclass
class Command:
    name: str
    properties: dict[str, str] = field(default_factory=dict)
    data: str = ""


def _unescape(s: str, mapping: tuple[tuple[str, str], ...]) -> str:
    for token, replacement in mapping:
        s = s.replace(replacement, token)
    return s


_ESCAPE = ((";", "%3B"), ("\r", "%0D"), ("\n", "%0A"), ("]", "%5D"), ("%", "%25"))
_ESCAPE_DATA = (("\r", "%0D"), ("\n", "%0A"), ("%", "%25"))
_ESCAPE_PROPERTY = (("\r", "%0D"), ("\n", "%0A"), (":", "%3A"), (",", "%2C"), ("%", "%25"))


def _registered(name: str, registered) -> bool:
    return registered is ANY or name.lower() in {r.lower() for r in registered}


def try_parse_v2(message: str, registered=REGISTERED) -> Command | None:
    """ActionCommand.TryParseV2, line by line."""
    if not message:
        return None
    message = trim_start(message)
    if not message.startswith(COMMAND_KEY):
        return None
    end = message.find(COMMAND_KEY, len(COMMAND_KEY))
    if end < 0:
        return None
    info = message[len(COMMAND_KEY):end]
    space = info.find(" ")
    name = info if space < 0 else info[:space]
    if not _registered(name, registered):
        return None
    cmd = Command(name)
    if space > 0:
        for prop in (p for p in info[space + 1:].strip().split(",") if p):
            pair = [x for x in prop.split("=", 1) if x]
            if len(pair) == 2:
                cmd.properties[pair[0]] = _unescape(pair[1], _ESCAPE_PROPERTY)
    cmd.data = _unescape(message[end + len(COMMAND_KEY):], _ESCAPE_DATA)
    return cmd


def try_parse(message: str, registered=REGISTERED) -> Command | None:
    """ActionCommand.TryParse (the legacy `##[` form), line by line."""
    if not message:
        return None
    start = message.find(PREFIX)
    if start < 0:
        return None
    rb = message.find("]", start)
    if rb < 0:
        return None
    info = message[start + len(PREFIX):rb]
    space = info.find(" ")
    name = info if space < 0 else info[:space]
    if not _registered(name, registered):
        return None
    cmd = Command(name)
    if space > 0:
        for prop in (p for p in info[space + 1:].split(";") if p):
            pair = [x for x in prop.split("=", 1) if x]
            if len(pair) == 2:
                cmd.properties[pair[0]] = _unescape(pair[1], _ESCAPE)
    cmd.data = _unescape(message[rb + 1:], _ESCAPE)
    return cmd


def ignorable(ch: str) -> bool:
    """Characters ICU collation may skip: controls (but the line ends, already split) and format characters,
    variation selectors, tags and the other default-ignorable code points."""
    cat = unicodedata.category(ch)
    o = ord(ch)
    return (cat in ("Cc", "Cf") or 0xFE00 <= o <= 0xFE0F or 0xE0000 <= o <= 0xE0FFF or 0x180B <= o <= 0x180F
            or o in (0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0) or 0x2060 <= o <= 0x206F
            or 0xFFF0 <= o <= 0xFFF8) and ch not in "\t"


def fold(line: str) -> str:
    return "".join(ch for ch in line if not ignorable(ch))


def parse_line(line: str, registered=REGISTERED) -> Command | None:
    """What the runner's OutputManager + command manager read in one line (either reading, see the module)."""
    for candidate in (line, fold(line)):
        if PREFIX in candidate or COMMAND_KEY in candidate:
            cmd = try_parse_v2(candidate, registered) or try_parse(candidate, registered)
            if cmd is not None:
                return cmd
    return None


def commands(output: str, registered=ANY) -> list[tuple[str, Command]]:
    """Every (line, command) the runner could read in `output`; `registered=ANY` (the default) assumes any
    name could be a command (a stop token can be anything)."""
    found = []
    for line in split_lines(output):
        cmd = parse_line(line, registered)
        if cmd is not None:
            found.append((line, cmd))
    return found


class Runner:
    """The command manager's state over a step's output: `stop-commands` and its resume token."""

    def __init__(self) -> None:
        self.registered = set(REGISTERED)
        self.stop_token: str | None = None
        self.processed: list[Command] = []
        self.masks: list[str] = []

    def feed(self, output: str) -> "Runner":
        for line in split_lines(output):
            cmd = parse_line(line, self.registered)
            if cmd is None:
                continue
            if self.stop_token is not None:
                if cmd.name.lower() == self.stop_token.lower():
                    self.registered.discard(self.stop_token)
                    self.stop_token = None
                continue
            if cmd.name.lower() == "stop-commands":
                self.stop_token = cmd.data
                self.registered.add(cmd.data)
                continue
            if cmd.name.lower() == "add-mask":
                self.masks.append(cmd.data)
            self.processed.append(cmd)
        return self

    def annotations(self) -> list[Command]:
        return [c for c in self.processed if c.name.lower() in ("error", "warning", "notice")]
