"""The docs a newcomer sets a repository up from name only commands, flags and action inputs that exist.

Every `plan-runner ...` command in README.md and docs/*.md (fenced code blocks and inline code spans) is checked
against the CLI's own argparse parser: the subcommand exists and each `--flag` is one of its options. Every
`with:` key given to the plan-runner action in a YAML block, and every row of the inputs and outputs tables in
docs/github-actions.md, is an input or output of action.yml, and every input and output of action.yml is in
those tables. A stale line fails here instead of failing a newcomer."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from runner.drivers.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GUIDE = ROOT / "docs" / "github-actions.md"
_FENCE = re.compile(r"(?ms)^(?P<ticks>`{3,}|~{3,})(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=ticks)[ \t]*$")
_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_PROGRAM = re.compile(r"^(?:\S*[^/\s]/)?plan-runner$")  # not `/plan-runner resume`: a comment
_SEPARATORS = {"&&", "||", ";", "|", "#", ">", "2>", "&"}


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m["info"].strip(), m["body"]) for m in _FENCE.finditer(text)]


def _command_lines(path: Path) -> list[tuple[str, str]]:
    """(where, text) of each shell-ish line or code span that runs plan-runner."""
    text = path.read_text()
    out = []
    for info, body in _blocks(text):
        if info in ("", "sh", "bash", "shell", "console", "text"):
            out += [(f"{path.name} block", line) for line in body.splitlines() if "plan-runner " in line]
    prose = _FENCE.sub("", text)
    out += [(f"{path.name} span", span) for span in _SPAN.findall(prose) if span.startswith("plan-runner ")]
    return out


def _tokens(line: str) -> list[str]:
    line = line.split(" #", 1)[0]
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def check_command(line: str, parser: argparse.ArgumentParser) -> list[str]:
    """What is wrong with one documented command line: an unknown subcommand or flag."""
    words = _tokens(line)
    starts = [i for i, w in enumerate(words) if _PROGRAM.search(w) and not re.search(r"[=@:]", w)]
    if not starts:
        return []
    args = []
    for word in words[starts[0] + 1:]:
        if word in _SEPARATORS or word.startswith("#"):
            break
        args.append(word)
    if not args or "plan-runner" in words[:starts[0]] or args[0].startswith(("<", "...")):
        return []
    subs = _subparsers(parser)
    top = {opt for a in parser._actions for opt in a.option_strings}
    if args[0].startswith("-"):
        return [] if args[0].split("=")[0] in top else [f"{line!r}: plan-runner has no option {args[0]}"]
    names = args[0].strip("[]").split("|")  # `plan-runner session|run`: each one
    missing = [n for n in names if n not in subs]
    if missing:
        return [f"{line!r}: plan-runner has no command {n!r} (it has: {', '.join(sorted(subs))})" for n in missing]
    wrong = []
    for name in names:
        options = {opt for a in subs[name]._actions for opt in a.option_strings}
        for word in args[1:]:
            for part in re.split(r"[|\[\]]", word):
                flag = part.split("=", 1)[0]
                if flag.startswith("--") and flag not in options:
                    wrong.append(f"{line!r}: `plan-runner {name}` has no option {flag}")
    return wrong


def _action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text())


def _table(section: str, first_column: str) -> list[str]:
    """The first column's code spans of the table whose header starts with `first_column`, in `section`."""
    text = GUIDE.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    names, inside = [], False
    for line in body.splitlines():
        if line.startswith(f"| {first_column} |"):
            inside = True
            continue
        if inside and not line.startswith("|"):
            break
        if inside and not line.startswith("|---"):
            names += re.findall(r"^\| `([a-z0-9-]+)` \|", line)
    return names


def test_the_docs_name_commands_to_check() -> None:
    lines = [line for path in DOCS for _, line in _command_lines(path)]
    assert sum("plan-runner init" in line for line in lines) >= 3 and len(lines) >= 20


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_documented_command_and_flag_exists(path: Path) -> None:
    parser = build_parser()
    wrong = [f"{where}: {problem}" for where, line in _command_lines(path) for problem in check_command(line, parser)]
    assert wrong == []


def test_the_check_finds_a_stale_command_or_flag() -> None:
    parser = build_parser()
    assert check_command("plan-runner init --action-ref ./", parser) == []
    assert check_command("~/.venv/bin/plan-runner session plans/x.md --dry-run && git push", parser) == []
    assert check_command("plan-runner action [--mode session|tick|reply]", parser) == []
    assert check_command("/plan-runner resume [instructions]", parser) == []  # a park issue reply
    assert check_command("plan-runner initialise .", parser)
    assert check_command("plan-runner init --action-reff x/y@z", parser)
    assert check_command("plan-runner action [--modes session]", parser)


def test_the_inputs_and_outputs_tables_match_action_yml() -> None:
    action = _action()
    assert _table("The action", "input") == list(action["inputs"])
    assert _table("The action", "output") == list(action["outputs"])


def test_every_with_key_given_to_the_action_in_the_docs_is_an_input() -> None:
    inputs = set(_action()["inputs"])
    wrong = []
    for path in DOCS:
        for info, body in _blocks(path.read_text()):
            if info not in ("yaml", "yml"):
                continue
            for step in _steps(yaml.safe_load(body)):
                uses = str(step.get("uses", ""))
                if "plan-runner" in uses and not uses.startswith("actions/"):
                    wrong += [f"{path.name}: {key}" for key in step.get("with") or {} if key not in inputs]
    assert wrong == []


def _steps(node) -> list[dict]:
    if isinstance(node, dict):
        found = [node] if "uses" in node else []
        return found + [s for v in node.values() for s in _steps(v)]
    if isinstance(node, list):
        return [s for v in node for s in _steps(v)]
    return []
