"""Text that is not ours, made inert before plan-runner publishes it (docs/security.md, "The mechanism").

Agents and gate code print what they like; plan-runner copies some of it into the job
log, the summary, issues, pull requests, park files and the terminal. There it must stay
text. One neutraliser per sink:

* `strip_control`: the terminal. No escape sequence, no C0/C1 control but tab and newline
  (a bare CR becomes a newline), no invisible format character (zero-width, bidi overrides).
* `defang`: a line of the job log (and any text a log could hold). `strip_control`, then no
  GitHub workflow command in any form the runner reads (tests/runner_command_parser.py ports
  its parser): `::name::` where a line starts (after whitespace) gets a backslash between the
  colons, `#[` anywhere gets a backslash (the legacy `##[name]` form is read anywhere in a line),
  and no @mention.
* `md_text`: text inside Markdown outside a fence (issue, PR, summary, park file): one line,
  every ASCII punctuation character backslash-escaped (CommonMark 2.4: an escaped character is
  always a literal), so no heading, list, link, image, HTML, emphasis, table cell, autolink or
  workflow command starts in it; `@`, `#<digit>`, `://` and `www.` broken (a zero-width space) so
  GitHub links no person, no issue and no address.
* `md_code`: a one-line code span that the text cannot close.
* `fence`: a block of text, in a code fence longer than any backtick run inside.

Why invisible characters go: the runner finds `##[` and `::` with .NET's culture-sensitive
`IndexOf`/`StartsWith` (ICU), which skip default-ignorable characters, so `#\u200b#[` is a
command prefix to it; and on a terminal or in a rendered page they hide or reorder text.
"""

from __future__ import annotations

import re

# Terminal control: CSI/OSC/other escape sequences, then any C0/C1 control but tab and newline.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Every format character (general category Cf) and every other default-ignorable code point: invisible,
# skipped by ICU collation. tests/unit/test_inert.py checks this class against unicodedata.
IGNORABLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F),
    (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F),
    (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1345F), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_IGNORABLE = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in IGNORABLE_RANGES) + "]")
# `::` where a line starts, after any whitespace (Python's \s is a superset of .NET's Char.IsWhiteSpace).
_V2_COMMAND = re.compile(r"^(\s*):(?=:)", re.MULTILINE)
# The legacy prefix `##[`, read anywhere in a line: no `#[` survives.
_LEGACY_COMMAND = re.compile(r"#(?=\[)")
# An @mention in untrusted text would notify someone (or a team) from plan-runner's account.
_MENTION = re.compile(r"(?<![\w.@/`])@(?=[A-Za-z0-9])")
_MD_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")
_MD_REFERENCE = re.compile(r"([@#])(?=[A-Za-z0-9])")
# What GitHub links without any markup (extended autolinks): `scheme://`, `www.`; broken by a zero-width space.
_AUTOLINK = re.compile(r"(?i)(?<=:)(?=//)|(?<=\bwww)(?=\.)")
ZWSP = "\u200b"


def strip_control(text: str) -> str:
    """Terminal control sequences, control characters (tab and newline kept) and invisible format
    characters removed; CR and CRLF as a newline."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _IGNORABLE.sub("", _CONTROL.sub("", _ANSI.sub("", text)))


def _no_commands(text: str) -> str:
    text = _V2_COMMAND.sub(lambda m: m.group(1) + ":\\", text)
    return _LEGACY_COMMAND.sub(lambda m: "#\\", text)


def defang(text: str) -> str:
    """Text that is not ours, inert in a job log and wherever it is published: no workflow command in
    any form the runner parses, no terminal control, no invisible character, no @mention."""
    return _MENTION.sub("@" + ZWSP, _no_commands(strip_control(text)))


def one_line(text: str) -> str:
    return " ".join(strip_control(text).split())


def md_text(text: object) -> str:
    """Untrusted text as literal Markdown inline text, on one line (see the module's docstring)."""
    s = _MD_PUNCT.sub(r"\\\1", _AUTOLINK.sub(ZWSP, one_line(str(text))))
    return _MD_REFERENCE.sub(lambda m: m.group(1) + ZWSP, s)


def md_code(text: object, *, in_table: bool = False) -> str:
    """Untrusted text as one inline code span that it cannot close (`|` escaped in a table cell)."""
    s = _no_commands(one_line(str(text)))
    if in_table:
        s = s.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def fence(text: str, info: str = "text") -> str:
    """A code fence longer than any backtick run inside, so untrusted text cannot close it."""
    body = defang(text.rstrip())
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{body}\n{ticks}"
