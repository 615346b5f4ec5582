"""The built-in agent's tools forgive what small models got wrong on user-written plans (issue 47), and nothing
that did not happen is made to count: a refused write writes nothing, a refused tick ticks nothing.

Real files in a real git repository (GitPython for the set-up, git for the tools' own questions).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runner.backends.anthropic.tools import Workspace
from tests.git_repos import init_repo

PLAN = "# Money\n\n## Stage 1: Format <!-- sessions: 2 -->\n\n- [ ] 1.1 Add cents to tools/moneyfmt.py\n"
FMT = "def fmt(x):\n    return str(x)\n"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    init_repo(tmp_path, {"plans/money.md": PLAN, "tools/moneyfmt.py": FMT, "README.md": "money\n",
                         ".gitignore": "__pycache__/\n"})
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    return Workspace(tmp_path, env, plan_path="plans/money.md")


def _git(ws: Workspace, command: str) -> None:
    assert ws.run("run_shell", {"command": command}).ok


def test_list_files_of_a_file_lists_the_file(ws: Workspace) -> None:
    out = ws.run("list_files", {"path": "tools/moneyfmt.py"})
    assert out.ok and out.text == "tools/moneyfmt.py"


def test_list_files_of_a_missing_path_lists_the_nearest_folder(ws: Workspace) -> None:
    """A result, not a failure: what is there instead."""
    out = ws.run("list_files", {"path": "plans/money"})
    assert out.ok, out.text
    assert out.text.startswith("there is no 'plans/money'") and "'plans', holds:\nplans/money.md" in out.text
    top = ws.run("list_files", {"path": "nowhere/at/all"})
    assert top.ok and "'.', holds:" in top.text and "tools/moneyfmt.py" in top.text


def test_writing_over_a_file_not_read_is_refused_until_it_is_read(ws: Workspace) -> None:
    target = ws.root / "tools" / "moneyfmt.py"
    out = ws.run("write_file", {"path": "tools/moneyfmt.py", "content": "def cents(x):\n    return x\n"})
    assert not out.ok and out.text.startswith("read it first: write_file replaces the whole file")
    assert target.read_text() == FMT
    assert ws.run("read_file", {"path": "tools/moneyfmt.py"}).ok
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": FMT + "x = 1\n"}).ok
    assert target.read_text() == FMT + "x = 1\n"
    # a file this session wrote is known: writing it again needs no read
    assert ws.run("write_file", {"path": "new.py", "content": "a = 1\n"}).ok
    assert ws.run("write_file", {"path": "new.py", "content": "a = 2\n"}).ok


def test_an_edit_does_not_count_as_reading_unless_its_answer_showed_the_file(ws: Workspace) -> None:
    assert ws.run("edit_file", {"path": "README.md", "old_string": "money", "new_string": "cash"}).ok
    assert not ws.run("write_file", {"path": "README.md", "content": "x\n"}).ok
    missed = ws.run("edit_file", {"path": "tools/moneyfmt.py", "old_string": "nope", "new_string": "x"})
    assert not missed.ok and FMT in missed.text
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": "y = 1\n"}).ok


@pytest.mark.parametrize("given", ["report/tools/moneyfmt.py", "tools/money fmt.py", "tools /moneyfmt.py",
                                   "toolsmoneyfmt.py"])
def test_a_new_path_like_an_existing_one_asks_did_you_mean_once(ws: Workspace, given: str) -> None:
    out = ws.run("write_file", {"path": given, "content": "z = 1\n"})
    assert not out.ok and "did you mean 'tools/moneyfmt.py'?" in out.text, out.text
    assert not (ws.root / given).exists()
    again = ws.run("write_file", {"path": given, "content": "z = 1\n"})
    assert again.ok and (ws.root / given).read_text() == "z = 1\n"


def test_a_new_path_like_nothing_is_written_at_once(ws: Workspace) -> None:
    assert ws.run("write_file", {"path": "tools/other.py", "content": "z = 1\n"}).ok


def test_reading_a_path_like_an_existing_one_says_did_you_mean(ws: Workspace) -> None:
    out = ws.run("read_file", {"path": "report/tools/moneyfmt.py"})
    assert not out.ok and "did you mean 'tools/moneyfmt.py'?" in out.text


def test_mark_done_with_uncommitted_work_says_commit_first_and_ticks_nothing(ws: Workspace) -> None:
    assert ws.run("read_file", {"path": "tools/moneyfmt.py"}).ok
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": FMT + "CENTS = 100\n"}).ok
    out = ws.run("mark_done", {"checkpoint": "1.1"})
    assert not out.ok and out.text.startswith("commit your work first: your next call is run_shell with the command "
                                              "`git commit -am 'work for 1.1'`, then mark_done 1.1 again")
    assert "tools/moneyfmt.py" in out.text and (ws.root / "plans" / "money.md").read_text() == PLAN
    (ws.root / "tools" / "cents.py").write_text("C = 1\n")
    untracked = ws.run("mark_done", {"checkpoint": "1.1"})
    assert not untracked.ok and "`git add -A && git commit -m 'work for 1.1'`" in untracked.text
    assert "tools/cents.py (new)" in untracked.text
    _git(ws, "git add -A && git commit -qm cents")
    done = ws.run("mark_done", {"checkpoint": "1.1"})
    assert done.ok and "- [x] 1.1" in (ws.root / "plans" / "money.md").read_text()
    assert done.text.endswith("and committed the tick. If the task is done, stop and say briefly what you did.")
    log = subprocess.run(["git", "log", "-1", "--name-only", "--format=%s"], cwd=ws.root, capture_output=True,
                         text=True, check=True).stdout.split()
    assert log == ["tick", "1.1", "plans/money.md"]  # the tick alone, committed by the agent's own tool
    assert subprocess.run(["git", "status", "--porcelain"], cwd=ws.root, capture_output=True, text=True).stdout == ""


def test_mark_done_before_anything_was_committed_asks_once(ws: Workspace) -> None:
    """The work may have been committed in an earlier session: the second call ticks."""
    first = ws.run("mark_done", {"checkpoint": "1.1"})
    assert not first.ok and first.text.startswith("nothing has been committed in this session")
    assert (ws.root / "plans" / "money.md").read_text() == PLAN
    second = ws.run("mark_done", {"checkpoint": "1.1"})
    assert second.ok and "- [x] 1.1" in (ws.root / "plans" / "money.md").read_text()


def test_the_plan_file_and_python_caches_are_not_uncommitted_work(ws: Workspace) -> None:
    _git(ws, "echo 'C = 1' >> tools/moneyfmt.py && git commit -qam cents")
    (ws.root / "plans" / "money.md").write_text(PLAN.replace("# Money", "# Money!"))
    (ws.root / "tools" / "x.pyc").write_bytes(b"\0")
    out = ws.run("mark_done", {"checkpoint": "1.1"})
    assert out.ok, out.text


def test_a_python_file_that_no_longer_parses_is_written_but_the_call_says_so(ws: Workspace) -> None:
    """The 1.5B dropped a docstring's quotes; it learnt it from the gate only. Now at once: a failed call naming
    the line, the text written (the model's own work, not lost); a file that parses, or one not Python, is fine."""
    broken = 'def shout(text):\n    "The text in capitals.""\n    return text.upper()\n'
    out = ws.run("write_file", {"path": "textutil.py", "content": broken})
    assert not out.ok and out.text.startswith("wrote 70 bytes to textutil.py, but it is not valid Python now: line 2: ")
    again = ws.run("write_file", {"path": "textutil.py", "content": broken})  # the same text: said, and still broken
    assert not again.ok and again.text.startswith("textutil.py already has exactly this text: nothing changed, but it "
                                                  "is not valid Python now: line 2: ")
    assert again == ws.run("write_file", {"path": "textutil.py", "content": broken})  # the same answer each time
    assert "Your next call: edit_file with old_string '\"The text in capitals.\"\"' (line 2 as it is now)" in out.text
    assert out.text.endswith('\n   1  def shout(text):\n   2>     "The text in capitals.""\n   3      return text.upper()')
    assert (ws.root / "textutil.py").read_text() == broken
    edit = ws.run("edit_file", {"path": "textutil.py", "old_string": '"The text in capitals.""',
                                "new_string": '"""The text in capitals."""'})
    assert edit.ok, edit.text
    assert ws.run("write_file", {"path": "notes.txt", "content": 'def ("'}).ok


GATED_PLAN = ("---\ngates:\n  - name: tests\n    run: python3 -c 'import tools.moneyfmt'\n---\n" + PLAN)


def test_a_green_gate_with_uncommitted_work_names_the_commit_as_the_next_call(tmp_path: Path) -> None:
    """The 1.5B went from a green gate straight to mark_done; the gate's own result now says what comes next."""
    init_repo(tmp_path, {"plans/money.md": GATED_PLAN, "tools/moneyfmt.py": FMT, ".gitignore": "__pycache__/\n"})
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, plan_path="plans/money.md")
    gate = {"command": "python3 -c 'import tools.moneyfmt'"}
    clean = ws.run("run_shell", gate)
    assert clean.ok and "not committed" not in clean.text  # nothing to commit: nothing said
    assert ws.run("read_file", {"path": "tools/moneyfmt.py"}).ok
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": FMT + "C = 1\n"}).ok
    green = ws.run("run_shell", gate)
    assert green.ok and green.text.endswith("The gate passes and your changes are not committed yet "
                                            "(tools/moneyfmt.py). Your next call is run_shell with the command "
                                            "`git add -A && git commit -m 'work'`.")
    other = ws.run("run_shell", {"command": "true"})  # not a gate: nothing said
    assert other.ok and "not committed" not in other.text
    red = ws.run("run_shell", {"command": "python3 -c 'import tools.moneyfmt' && false"})
    assert not red.ok and "not committed" not in red.text
    _git(ws, "git add -A && git commit -qm work")
    assert "not committed" not in ws.run("run_shell", gate).text


def test_a_commit_the_gate_fails_on_says_so_instead_of_naming_the_tick(tmp_path: Path) -> None:
    """On red-first the 1.5B committed a change it had never run, read that the tick was next "if the gates pass",
    and answered it was done. The gate now runs after such a commit, and its failure is said instead."""
    init_repo(tmp_path, {"plans/money.md": GATED_PLAN, "tools/moneyfmt.py": FMT, ".gitignore": "__pycache__/\n"})
    ws = Workspace(tmp_path, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, plan_path="plans/money.md")
    assert ws.run("read_file", {"path": "tools/moneyfmt.py"}).ok
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": FMT + "C = 1 / 0\n"}).ok
    out = ws.run("run_shell", {"command": "git add -A && git commit -qm cents"})
    assert out.ok and "mark_done" not in out.text
    assert ("\nCommitted, but checkpoint 1.1 is not done: `python3 -c 'import tools.moneyfmt'` fails now (exit "
            "code 1).") in out.text
    assert "ZeroDivisionError: division by zero" in out.text and "raised in tools/moneyfmt.py line 3: C = 1 / 0" in out.text
    assert out.text.endswith("\nFix the code, run `python3 -c 'import tools.moneyfmt'` again until it passes, then "
                             "commit.")  # the command that fails: with a checkpoint's own check, that one
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": FMT + "C = 1\n"}).ok
    fixed = ws.run("run_shell", {"command": "git commit -qam fixed"})
    assert fixed.ok and fixed.text.endswith("Committed. If checkpoint 1.1 is done (the gates pass), your next call is "
                                            "mark_done with '1.1'.")


def test_a_commit_of_work_with_a_checkpoint_left_names_the_tick_as_the_next_call(ws: Workspace) -> None:
    """The 1.5B committed its fix and answered, the checkpoint unticked."""
    assert ws.run("read_file", {"path": "tools/moneyfmt.py"}).ok
    assert ws.run("write_file", {"path": "tools/moneyfmt.py", "content": FMT + "C = 1\n"}).ok
    out = ws.run("run_shell", {"command": "git add -A && git commit -qm cents"})
    assert out.ok and out.text.endswith("Committed. If checkpoint 1.1 is done (the gates pass), your next call is "
                                        "mark_done with '1.1'.")
    (ws.root / "README.md").write_text("more\n")  # work left uncommitted after a commit: not the time to tick
    partial = ws.run("run_shell", {"command": "git commit --allow-empty -qm partial"})
    assert partial.ok and "mark_done" not in partial.text
    _git(ws, "git commit -qam readme")
    assert ws.run("mark_done", {"checkpoint": "1.1"}).ok
    again = ws.run("run_shell", {"command": "git commit --allow-empty -qm nothing"})
    assert again.ok and "mark_done" not in again.text  # nothing left to tick: nothing said
