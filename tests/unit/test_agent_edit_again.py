"""An edit the file already shows made is refused, not made twice (issue 47, fifth round; docs/real-model.md).

On two-checkpoints the 1.5B applied the same `edit_file` 35 times in a row, each inserting
`return int(text) // 100` after a docstring's line into a file that no longer parsed. Each call changed the work
tree, so no stuck rule saw it ("nothing counts across a change" is what makes a re-run gate iteration). Now the
second such call is refused and changes nothing; the same refused call three times is then the stuck rule
`repeated_error`, and the loop is named. Real files in a real git repository, and the loop against the scripted
Messages server.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.backends.anthropic.backend import LOOP_TEXT
from runner.backends.anthropic.tools import Workspace
from tests.agent_helpers import fast_backend, make_request, user_texts
from tests.git_repos import init_repo
from tests.servers.messages import MessagesServer, reply, tool_use

MONEY = 'def parse_cents(text):\n    """Cents from "1.23"."""\n    cents = int(text.replace(".", ""))\n'
DOC = '    """Cents from "1.23"."""\n'
INSERT = {"path": "tools/moneyfmt.py", "old_string": DOC, "new_string": DOC + "    return int(text) // 100\n"}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    init_repo(tmp_path, {"tools/__init__.py": "", "tools/moneyfmt.py": MONEY, "notes.txt": "first\n"})
    return Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)})


def _text(ws: Workspace) -> str:
    return (ws.root / "tools/moneyfmt.py").read_text()


def test_the_same_insertion_again_is_refused_and_changes_nothing(ws: Workspace) -> None:
    assert ws.run("edit_file", INSERT).ok
    once = _text(ws)
    assert once.count("return int(text) // 100") == 1
    again = ws.run("edit_file", INSERT)
    assert not again.ok and _text(ws) == once
    assert again.text.startswith("not changed: tools/moneyfmt.py already has this text at line 2 (the edit was made "
                                 "already); making it again would add '    return int(text) // 100' a second time.")
    assert "does not parse" not in again.text


def test_the_refusal_says_when_the_file_does_not_parse(ws: Workspace) -> None:
    broken = {**INSERT, "new_string": DOC + "    return int(text // 100\n"}
    assert not ws.run("edit_file", broken).ok  # written, but the call says it no longer parses
    again = ws.run("edit_file", broken)
    assert not again.ok and _text(ws).count("return int(text // 100") == 1
    assert "made already" in again.text and "does not parse as it is: line 3" in again.text


def test_an_insertion_before_the_line_too(ws: Workspace) -> None:
    before = {**INSERT, "new_string": "    text = text.strip()\n" + DOC}
    assert ws.run("edit_file", before).ok
    again = ws.run("edit_file", before)
    assert not again.ok and "made already" in again.text and _text(ws).count("text.strip()") == 1


def test_the_same_text_added_at_the_end_again_is_refused(ws: Workspace) -> None:
    add = {"path": "notes.txt", "old_string": "", "new_string": "second\n"}
    assert ws.run("edit_file", add).ok
    again = ws.run("edit_file", add)
    assert not again.ok and "made already" in again.text
    assert (ws.root / "notes.txt").read_text() == "first\nsecond\n"


def test_other_edits_are_made_as_before(ws: Workspace) -> None:
    assert ws.run("edit_file", INSERT).ok
    other = {**INSERT, "old_string": "    return int(text) // 100\n", "new_string": "    return cents\n"}
    assert ws.run("edit_file", other).ok  # a replacement, not an insertion
    assert ws.run("edit_file", {**INSERT, "new_string": DOC + "    text = text.strip()\n"}).ok  # a different line
    assert ws.run("edit_file", {"path": "notes.txt", "old_string": "", "new_string": "first\n"}).ok  # not made here
    assert _text(ws).count("text.strip()") == 1 and (ws.root / "notes.txt").read_text() == "first\nfirst\n"


def test_an_edit_undone_in_between_may_be_made_again(ws: Workspace) -> None:
    """Only while the file still shows it made: undone (by hand, a checkout), it is a change again."""
    assert ws.run("edit_file", INSERT).ok
    assert ws.run("run_shell", {"command": "git checkout -- tools/moneyfmt.py"}).ok
    assert ws.run("edit_file", INSERT).ok and _text(ws).count("return int(text) // 100") == 1


def test_the_same_insertion_again_and_again_is_a_named_loop(tmp_path: Path) -> None:
    """The first call changes the file, the next three are refused alike: `repeated_error`, named to the model."""
    request = make_request(tmp_path, "http://127.0.0.1:1")
    (request.workdir / "tools").mkdir()
    (request.workdir / "tools/moneyfmt.py").write_text(MONEY)
    edit = tool_use("edit_file", INSERT)
    with MessagesServer() as srv:
        srv.enqueue(reply(edit), reply(edit), reply(edit), reply(edit), reply("I could not do it."))
        fast_backend().run(make_request(tmp_path, srv.url))
        bodies = [r.json for r in srv.message_requests]
    assert (request.workdir / "tools/moneyfmt.py").read_text().count("return int(text) // 100") == 1
    named = [any(t.startswith(LOOP_TEXT.split(":")[0]) for t in user_texts(b)) for b in bodies]
    assert named == [False] * 4 + [True]
