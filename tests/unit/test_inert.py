"""Everything plan-runner logs is inert for the GitHub Actions runner (issue 21 item 3, SPEC 4b invariant 6).

Checked against tests/runner_command_parser.py, a port of the runner's own line splitting and command
parser (actions/runner, ActionCommand.cs, OutputManager.cs, ProcessInvoker.cs), with every command
name counted as registered (a stop token can be any word).
"""

from __future__ import annotations

import io
import sys
import unicodedata

import pytest
from hypothesis import example, given, settings, strategies as st

from runner.adapters.action_io import Reporter, format_command
from runner.adapters.render.term import Output
from runner.core import inert
from runner.core.inert import defang, fence, md_code, md_text, strip_control
from tests import runner_command_parser as rcp
from tests.hypothesis_profiles import examples

# Text an attacker would write: the characters that matter to the parser, to the line splitter, to ICU.
_SPECIAL = list(":#[] \t\r\n%;,=@`|\\") + ["\x1b", "\x85", "\x00", "\u200b", "\u2028", "\u00a0", "\u3000",
                                          "\ufeff", "\u00ad", "\u2060", "\x9b", "\u202e", "\x1c"]
# The pieces a forged command is made of, ready-joined too (a line break, blanks, then `::`): the random
# examples reach them at the ci budget (hypothesis_profiles.py), not only at 1,500 examples.
_PIECES = ["error", "add-mask", "stop-commands", "warning file=a.py,line=1", "::", "##[", "\n::", "\n ::",
           "\r\n\t::", "\n\u3000::", " ##[", "\r##[", "##[error]", "::add-mask::"]
_TEXT = st.lists(st.one_of(st.sampled_from(_SPECIAL), st.sampled_from(_PIECES), st.characters()),
                 max_size=40).map("".join)
_ANY_TEXT = st.one_of(_TEXT, st.text(max_size=80))

FORGED = [
    "::error file=src/app.py,line=3::forged annotation",
    "  ::add-mask::plan-runner",
    "::stop-commands::silence",
    "progress 40% ##[error file=src/app.py;line=3]forged annotation in mid-line",
    "see ##[add-mask]word",
    "##[stop-commands]silence",
    "ok\r::warning::behind a bare CR",
    "ok\r\n\u3000::notice::after an ideographic space",
    "#\u200b#[error]zero width inside the prefix",
    "\u200b::error::a zero width space before the colons",
    ":\u00ad:error::a soft hyphen between the colons",
    ":\x80:error::a C1 control between the colons",
    "##[ERROR]upper case",
]


@pytest.mark.parametrize("text", FORGED)
def test_the_port_reads_each_forged_line_as_a_command(text):
    """The positive control: the port is not blind to what the neutraliser must defuse."""
    assert rcp.commands(text, rcp.REGISTERED)


@pytest.mark.parametrize("text", FORGED)
def test_each_forged_line_is_inert_after_defang(text):
    assert rcp.commands(defang(text)) == []


def test_the_legacy_form_is_read_anywhere_in_a_line_and_lines_end_at_cr():
    assert rcp.try_parse("abc ##[warning]x", rcp.REGISTERED).name == "warning"
    assert rcp.split_lines("a\rb\r\nc\nd\u2028e\x85f") == ["a", "b", "c", "d\u2028e\x85f"]
    assert rcp.try_parse_v2("x ::error::y", rcp.REGISTERED) is None  # `::` only where the line starts


def _forged_pinned(test):
    """Every forged line of FORGED as an explicit example: run first, in every profile, whatever the budget."""
    for text in FORGED:
        test = example(text)(test)
    return test


@_forged_pinned
@settings(max_examples=examples(ci=300, thorough=5000))
@given(_ANY_TEXT)
def test_no_output_of_defang_parses_as_a_command(text):
    out = defang(text)
    assert rcp.commands(out) == [], repr(out)
    for line in rcp.split_lines(out):
        assert "##[" not in rcp.fold(line) and not rcp.trim_start(rcp.fold(line)).startswith("::")


@_forged_pinned
@settings(max_examples=examples(ci=150, thorough=3000))
@given(_ANY_TEXT)
def test_no_markdown_neutraliser_output_parses_as_a_command(text):
    for out in (md_text(text), md_code(text), md_code(text, in_table=True), fence(text)):
        assert rcp.commands(out) == [], repr(out)


@settings(max_examples=examples(ci=200, thorough=2000))
@given(_ANY_TEXT)
def test_strip_control_leaves_no_control_or_invisible_character(text):
    out = strip_control(text)
    assert all(ch in "\t\n" or unicodedata.category(ch) not in ("Cc", "Cf") for ch in out), repr(out)


def test_the_ignorable_class_covers_every_format_character():
    cf = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert [hex(ord(c)) for c in cf if strip_control("a" + c + "b") != "ab"] == []


@_forged_pinned
@settings(max_examples=examples(ci=100, thorough=1000))
@given(_ANY_TEXT)
def test_the_job_log_reporter_prints_nothing_the_runner_reads(text):
    """What the Actions driver logs (events, preflight lines) and prints as a summary without a summary file."""
    out = io.StringIO()
    rep = Reporter(env={}, out=out)
    rep.log(f"plan-runner gate: {text}")
    rep.write_summary(f"# report\n{text}")
    assert rcp.commands(out.getvalue()) == [], repr(out.getvalue())


@_forged_pinned
@settings(max_examples=examples(ci=100, thorough=1000))
@given(_ANY_TEXT)
def test_the_local_output_in_a_log_prints_nothing_the_runner_reads(text):
    buf = io.StringIO()
    old, sys.stdout = sys.stdout, buf
    try:
        Output("stdout").say(text)
    finally:
        sys.stdout = old
    assert rcp.commands(buf.getvalue()) == [], repr(buf.getvalue())


def test_a_forged_stop_commands_no_longer_silences_plan_runners_own_annotation():
    """The attack of issue 21: the agent's `##[stop-commands]` in a logged line, then plan-runner's red-gate error."""
    ours = format_command("error", "required gate tests is red (exit 1)", title="gate tests") + "\n"
    agent = "the agent says: ##[stop-commands]hush\n"
    assert rcp.Runner().feed(agent + ours).annotations() == []  # positive control: raw, it silenced ours
    out = io.StringIO()
    rep = Reporter(env={}, out=out)
    rep.log(agent)
    rep.annotate("error", "required gate tests is red (exit 1)", title="gate tests")
    got = rcp.Runner().feed(out.getvalue())
    assert [(c.name, c.data) for c in got.annotations()] == [("error", "required gate tests is red (exit 1)")]


def test_forged_annotations_and_masks_from_logged_text_are_not_processed():
    text = "\n".join(FORGED)
    assert rcp.Runner().feed(text).processed  # raw: annotations and masks are processed
    out = io.StringIO()
    Reporter(env={}, out=out).log(text)
    runner = rcp.Runner().feed(out.getvalue())
    assert runner.processed == [] and runner.masks == []


def test_an_annotation_message_from_the_agent_stays_one_command():
    line = format_command("warning", "rejected claim: x\n::error::forged\r##[add-mask]y", title="a,b:c") + "\n"
    got = rcp.Runner().feed(line).processed
    assert [c.name for c in got] == ["warning"] and got[0].data.endswith("##[add-mask]y")
    assert got[0].properties == {"title": "a,b:c"}


def test_defang_keeps_ordinary_text_readable():
    assert defang("a::b c#d [x] @me") == "a::b c#d [x] @\u200bme"
    assert defang("::error::x") == ":\\:error::x"
    assert defang("see ##[error]x") == "see ##\\[error]x"
    assert inert.one_line("a\n b\r\nc") == "a b c"
