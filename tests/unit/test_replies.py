"""Tests for runner.core.replies: the `/plan-runner <verb>` reply parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.replies import MAX_INSTRUCTIONS, ReplyCommand, ReplyProblem, Verb, parse_reply
from tests.hypothesis_profiles import examples


@pytest.mark.parametrize("verb", list(Verb))
def test_each_verb_parses_without_instructions(verb: Verb) -> None:
    """Every verb on its own line is a command with empty instructions."""
    assert parse_reply(f"/plan-runner {verb.value}") == ReplyCommand(verb, "")


def test_command_is_case_insensitive() -> None:
    """The command word and the verb match whatever their case."""
    assert parse_reply("/Plan-Runner RESUME") == ReplyCommand(Verb.RESUME, "")


def test_instructions_are_the_rest_of_the_line_and_following_lines() -> None:
    """The text after the verb and every later line form the instructions."""
    body = "Thanks!\n/plan-runner retry use the v2 client\nand keep the old tests\n"
    assert parse_reply(body) == ReplyCommand(Verb.RETRY, "use the v2 client\nand keep the old tests")


def test_text_before_the_command_is_ignored() -> None:
    """Lines before the command line are conversation, not instructions."""
    assert parse_reply("I looked at it.\n\n/plan-runner skip") == ReplyCommand(Verb.SKIP, "")


def test_quoted_lines_are_neither_commands_nor_instructions() -> None:
    """E-mail style quotes of the issue (`> /plan-runner ...`) are ignored everywhere."""
    body = "> /plan-runner stop\n> old text\n/plan-runner resume go\n> /plan-runner stop quoted\nmore"
    assert parse_reply(body) == ReplyCommand(Verb.RESUME, "go\nmore")


def test_only_quoted_command_means_no_command() -> None:
    """A comment whose only command is quoted carries no command."""
    assert parse_reply("> /plan-runner resume\nI agree with this") is None


def test_no_command_returns_none() -> None:
    """Ordinary comments are not replies."""
    assert parse_reply("Looks good to me") is None
    assert parse_reply("see /plan-runner resume in the docs") is None


def test_prefix_must_be_the_whole_word() -> None:
    """`/plan-runnerx` is not the command."""
    assert parse_reply("/plan-runnerx resume") is None


def test_unknown_verb_is_a_problem_naming_the_word() -> None:
    """An unknown subcommand is a parse problem the adapter answers with help."""
    result = parse_reply("/plan-runner restart now")
    assert isinstance(result, ReplyProblem)
    assert result.word == "restart"


def test_missing_verb_is_a_problem() -> None:
    """`/plan-runner` alone asks for help."""
    assert isinstance(parse_reply("/plan-runner"), ReplyProblem)


def test_backticks_and_punctuation_around_the_command_are_tolerated() -> None:
    """Copying the command from inline code or typing `resume:` still works."""
    assert parse_reply("`/plan-runner resume`") == ReplyCommand(Verb.RESUME, "")
    assert parse_reply("/plan-runner resume: do X") == ReplyCommand(Verb.RESUME, "do X")


def test_tab_separates_verb_and_instructions() -> None:
    """Any whitespace separates the verb from the instructions."""
    assert parse_reply("/plan-runner resume\tdo X") == ReplyCommand(Verb.RESUME, "do X")


def test_crlf_line_endings() -> None:
    """Windows line endings give the same instructions."""
    assert parse_reply("/plan-runner resume a\r\nb") == ReplyCommand(Verb.RESUME, "a\nb")


def test_too_long_instructions_are_a_problem() -> None:
    """Instructions over the bound are refused, not silently truncated."""
    result = parse_reply("/plan-runner resume " + "x" * (MAX_INSTRUCTIONS + 1))
    assert isinstance(result, ReplyProblem)
    assert str(MAX_INSTRUCTIONS) in result.what


def test_instructions_at_the_bound_are_accepted() -> None:
    """Exactly MAX_INSTRUCTIONS characters is still a command."""
    result = parse_reply("/plan-runner resume " + "x" * MAX_INSTRUCTIONS)
    assert isinstance(result, ReplyCommand)


def test_expressions_are_kept_verbatim() -> None:
    """Workflow expressions and shell substitutions stay plain data."""
    text = "run ${{ secrets.TOKEN }} and $(rm -rf /) `id`"
    assert parse_reply(f"/plan-runner resume {text}") == ReplyCommand(Verb.RESUME, text)


@settings(max_examples=examples(ci=300, thorough=3000))
@given(st.text())
def test_any_text_parses_without_crashing(body: str) -> None:
    """Arbitrary comment text yields a command, a problem or None, never an exception."""
    assert parse_reply(body) is None or isinstance(parse_reply(body), ReplyCommand | ReplyProblem)


@settings(max_examples=examples(ci=200, thorough=2000))
@given(st.sampled_from(list(Verb)), st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_single_line_instructions_survive_verbatim(verb: Verb, text: str) -> None:
    """Instructions without line breaks come back exactly, modulo surrounding whitespace."""
    text = text.replace("\r", " ").replace("\n", " ").strip()
    result = parse_reply(f"/plan-runner {verb.value} {text}")
    if len(text) > MAX_INSTRUCTIONS:
        assert isinstance(result, ReplyProblem)
    else:
        assert result == ReplyCommand(verb, text)
