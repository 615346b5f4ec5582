"""The built-in agent's tools: files and a shell, confined to the work tree.

Every path the model gives is resolved (symlinks and `..` included) before it is
used; one that lands outside the work tree is refused with an error result and
never touched. A refusal, a missing file or a non-zero shell exit is a *failed*
tool call: the model gets `is_error: true` and the backend counts it, because a
result that says it did not succeed is a failure whatever else it says.

The shell runs in the work tree with the agent's allow-listed environment; it is
not a sandbox (bash can `cd /`), which is why plan-runner never gives the agent
credentials beyond its own API key and why the verdict comes from evidence.

The tools forgive what small models get wrong without letting anything count that did not happen:
`list_files` on a file lists that file and on a missing path the nearest folder; `write_file` over a file not
read in this session says to read it first (it replaces the whole file); a new path that differs from an existing
one only by spaces, slashes or a leading folder asks "did you mean" once (the same call again creates it);
`mark_done` with uncommitted work says to commit it first, and before anything was committed in the session it
asks once whether the work is really done.

The plan file is the tracker: `write_file` and `edit_file` refuse any change to it
but a checkpoint's box (or a `BLOCKED:` marker), and say what may change; `mark_done`
ticks a checkpoint given by its id or its whole line. This only turns a dead end
into a clear error at once: the shell can still write the file, and the
post-session tamper check (runner.core.planfile.protected_changes) stays the rule.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.adapters.git.evidence import _at_or_above
from runner.adapters.sandbox import proc
from runner.backends.anthropic.failures import digest as failure_digest
from runner.backends.anthropic.probe import command as probe_command
from runner.backends.anthropic.probe import describe, probes
from runner.backends.anthropic.signatures import (
    duplicates,
    indented_append,
    kept_by_import,
    module_name,
    redefined,
    return_replaced,
    self_imports,
    unused_parameters,
    wanted_by_tests,
)
from runner.core.errors import PlanRunnerError
from runner.core.evidence import CheckpointState
from runner.core.plan import Plan
from runner.core.planfile import parse_plan, set_checkpoint_state
from runner.core.planfile_body import Item, rewrite_state, scan_body
from runner.core.planfile_front import split_front_matter

OUTPUT_LIMIT = 16 * 1024  # bytes of one tool result the model sees
_LIST_LIMIT = 500  # entries of one list_files call
_SKIP_DIRS = {".git"}
_HINT_ENTRIES = 30  # names listed when a file is missing
_HINT_LIMIT = 4 * 1024  # bytes of the file shown when an edit does not match
_SHELL_TERM_GRACE_S = 0.5  # after a timeout: SIGTERM, then SIGKILL this much later
_SHELL_DRAIN_GRACE_S = 1.0  # after the shell exits: how long a leftover may hold the pipe


class ToolError(Exception):
    """A tool call that failed; the message goes back to the model as the result."""


@dataclass(frozen=True)
class ToolOutcome:
    ok: bool
    text: str


TOOL_SPECS: list[dict[str, Any]] = [
    {
        "name": "list_files",
        "description": "List files under a directory of the work tree (recursive, .git skipped).",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Directory relative to the work tree; default '.'"}},
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file of the work tree.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a whole file of the work tree: `content` is the complete new text of the file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "edit_file",
        "description": ("Replace exactly one occurrence of old_string with new_string in a file; old_string must match the "
                        "file exactly, whitespace and line breaks included (for a small file, write_file is simpler). An empty "
                        "old_string adds new_string at the end of the file."),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
            },
            "required": ["path", "old_string", "new_string"],
        },
    },
    {
        "name": "mark_done",
        "description": ("Tick a checkpoint in the plan file: its box becomes [x]. `checkpoint` is its id (e.g. 1.1) "
                        "or its whole line. Commit the plan file afterwards for the tick to count."),
        "input_schema": {
            "type": "object",
            "properties": {"checkpoint": {"type": "string"}},
            "required": ["checkpoint"],
        },
    },
    {
        "name": "run_shell",
        "description": "Run a bash command in the work tree; returns exit code and output.",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout_s": {"type": "number", "description": "Seconds before the command is killed."},
            },
            "required": ["command"],
        },
    },
]

TOOL_NAMES = frozenset(spec["name"] for spec in TOOL_SPECS)


def bound_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """Head and tail of `text` within `limit` bytes: errors tend to be at the end, context at the start."""
    return proc.bound_text(text, limit)


_SHOWN_CHECKPOINTS = 12  # checkpoint lines named in a refusal
_GIVEN_BOX = re.compile(r"^\s*(?:[-*+]\s*)?(?:\[[ xX]?\]\s*)?")
_GIVEN_ID = re.compile(r"^(\d{1,6}(?:\.\d{1,6}){1,4})(?=\s|$|[:.)])[:.)]?\s*(.*)$", re.DOTALL)


def _checkpoints(text: str) -> list[Item]:
    """The checkpoint lines of a plan text, as the parser sees them (front matter skipped, fences ignored)."""
    lines = text.splitlines(keepends=True)
    fm, start, _ = split_front_matter(lines, "plan")
    if fm is None and lines and lines[0].lstrip("\ufeff").rstrip() == "---":
        return []  # unterminated front matter: no body
    return [i for i in scan_body(lines, start if fm is not None else 0, "plan").items if i.kind == "checkpoint"]


def _box_change(old: str, new: str) -> bool:
    """`new` is the checkpoint line `old` with only its box or its BLOCKED marker changed."""
    for state in (CheckpointState.DONE, CheckpointState.TODO):
        if rewrite_state(old, state).rstrip() == new.rstrip():
            return True
    marker = new.find("BLOCKED:")
    if marker >= 0:
        reason = new[marker + len("BLOCKED:"):].split("<!--")[0].strip()
        return bool(reason) and rewrite_state(old, CheckpointState.BLOCKED, reason).rstrip() == new.rstrip()
    return False


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _syntax_error(target: Path, text: str) -> SyntaxError | None:
    if target.suffix != ".py":
        return None
    try:
        compile(text, str(target.name), "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _around(text: str, lineno: int | None) -> str:
    """The lines around `lineno`, numbered as in the file."""
    lines = text.splitlines()
    if not lineno or not 0 < lineno <= len(lines):
        return ""
    shown = range(max(1, lineno - 2), min(len(lines), lineno + 2) + 1)
    return "\n" + "\n".join(f"{n:4d}{'>' if n == lineno else ' '} {lines[n - 1]}" for n in shown)


def _short_text(text: str, limit: int = 120) -> str:
    shown = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(shown)


def _exit_code(output: str) -> str:
    """The exit code a run_shell output starts with (`exit code 1`), or "?"."""
    found = re.match(r"exit code (-?\d+)", output)
    return found.group(1) if found else "?"


def _top_names(target: Path, text: str) -> list[str]:
    """The functions and classes a Python text defines at its top level (none when it is not Python or does
    not parse)."""
    if target.suffix != ".py" or not text.strip():
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _check_python(target: Path, text: str, done: str) -> None:
    """A Python file that no longer parses: the change stays written, but the call says so at once (small
    models drop a docstring's quotes and only learn it from the gate, sessions later)."""
    exc = _syntax_error(target, text)
    if exc is None:
        return
    lines = text.splitlines()
    line = lines[exc.lineno - 1].strip() if exc.lineno and 0 < exc.lineno <= len(lines) else ""
    fix = (f"Your next call: edit_file with old_string {line!r} (line {exc.lineno} as it is now) and new_string that "
           f"line fixed." if line and text.count(line) == 1 else
           "Fix that line with edit_file (old_string: the line as it is now, new_string: the line fixed).")
    raise ToolError(f"{done}, but it is not valid Python now: line {exc.lineno}: {exc.msg}. {fix} The file now "
                    f"reads:{_around(text, exc.lineno)}")


class Workspace:
    """The work tree as the tools see it; `plan_path` is the plan file, which the file tools guard."""

    def __init__(self, root: Path, env: Mapping[str, str], *, shell_timeout_s: float = 300.0,
                 plan_path: Path | str | None = None) -> None:
        self.root = Path(root).resolve()
        self.env = dict(env)
        self.shell_timeout_s = shell_timeout_s
        self.plan_path = (self.root / plan_path).resolve() if plan_path is not None else None
        self._known: set[Path] = set()  # files whose whole text the model was shown or wrote in this session
        self._asked: set[str] = set()  # questions asked once ("did you mean", "nothing committed yet")
        self._made: set[tuple[Path, str, str]] = set()  # the edits made in this session: (file, old_string, new_string)
        self._start_head = self._git("rev-parse", "-q", "--verify", "HEAD")

    def _git(self, *args: str) -> str | None:
        """git's output in the work tree, or None where git fails (no repository, no git)."""
        try:
            done = subprocess.run(["git", "--no-optional-locks", "-C", str(self.root), *args], capture_output=True,
                                  env=self.env, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.decode("utf-8", errors="replace") if done.returncode == 0 else None

    def _ask_once(self, key: str) -> bool:
        """True the first time `key` is asked in this session: a question, never a wall."""
        if key in self._asked:
            return False
        self._asked.add(key)
        return True

    def _files(self, limit: int = 5000) -> list[str]:
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and d != "__pycache__")
            for name in sorted(filenames):
                found.append(self._rel(Path(dirpath) / name))
                if len(found) >= limit:
                    return found
        return found

    def _similar(self, target: Path) -> list[str]:
        """Existing files a missing path probably meant: the same but for spaces and slashes, or with a folder
        too many in front (`report/tools/x.py` for `tools/x.py`)."""
        rel = self._rel(target)

        def key(text: str) -> str:
            return re.sub(r"[\s/]+", "", text).lower()

        found = [f for f in self._files() if key(f) == key(rel) or rel.endswith("/" + f)]
        return found[:5]

    def _did_you_mean(self, target: Path) -> str:
        similar = self._similar(target)
        return f"; did you mean {' or '.join(repr(f) for f in similar)}?" if similar else ""

    def resolve(self, path: object) -> Path:
        """The real path of `path` inside the work tree, or ToolError: symlinks and `..` cannot escape."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("a non-empty `path` string is required")
        if "\x00" in path:
            raise ToolError("the path contains a NUL byte")
        candidate = (self.root / path).resolve()
        if candidate != self.root and self.root not in candidate.parents:
            raise ToolError(f"refused: {path!r} is outside the work tree")
        return candidate

    def tree_state(self) -> str:
        """A digest of the work tree as git sees it: HEAD, and each changed or untracked path with its content.

        Equal digests mean nothing the agent could commit changed (a file rewritten with the same text is no
        change). Outside a git repository: the files' sizes and modification times."""
        digest = hashlib.sha256()
        git = ["git", "--no-optional-locks", "-C", str(self.root)]
        try:
            head = subprocess.run([*git, "rev-parse", "-q", "--verify", "HEAD"], capture_output=True, env=self.env,
                                  timeout=30)
            status = subprocess.run([*git, "status", "--porcelain=v1", "-z", "--untracked-files=all"],
                                    capture_output=True, env=self.env, timeout=30)
        except (OSError, subprocess.SubprocessError):
            status = None
        if status is None or status.returncode != 0:
            for dirpath, dirnames, filenames in os.walk(self.root):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
                for name in sorted(filenames):
                    try:
                        st = os.lstat(os.path.join(dirpath, name))
                    except OSError:
                        continue
                    digest.update(f"{dirpath}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            return "walk:" + digest.hexdigest()
        digest.update(head.stdout + b"\0" + status.stdout)
        for entry in status.stdout.split(b"\0"):
            path = self.root / os.fsdecode(entry[3:]) if len(entry) > 3 else None
            if path is not None and path.is_file() and not path.is_symlink():
                try:
                    digest.update(hashlib.sha256(path.read_bytes()).digest())
                except OSError:
                    pass
        return "git:" + digest.hexdigest()

    def content_state(self) -> str:
        """A digest of the work tree's files alone, committed or not (git's blob ids: a file's content hashes the same
        in the index and in the work tree), for the stuck rule `toggle`; "" outside git."""
        index = self._git("ls-files", "-s", "-z")
        status = self._git("status", "--porcelain=v1", "-z", "--untracked-files=all")
        if index is None or status is None:
            return ""
        files: dict[str, str] = {}
        for entry in index.split("\0"):
            meta, _, path = entry.partition("\t")
            if path and len(meta.split()) >= 2:
                files[path] = meta.split()[1]
        for entry in status.split("\0"):
            if len(entry) < 4 or entry[2] != " ":
                continue
            path = entry[3:]
            target = self.root / path
            try:
                data = target.read_bytes() if target.is_file() and not target.is_symlink() else None
            except OSError:
                data = None
            if data is None:
                files.pop(path, None)
            else:
                files[path] = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        digest = hashlib.sha256()
        for path in sorted(files):
            digest.update(f"{path}\0{files[path]}\0".encode())
        return "files:" + digest.hexdigest()

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path != self.root else "."

    # -- the tools --

    def list_files(self, path: object = ".") -> str:
        base = self.resolve(path)
        if base.is_file():
            return self._rel(base)
        note = ""
        if not base.is_dir():
            where = base.parent
            while where != self.root and not where.is_dir():
                where = where.parent
            note = f"there is no {path!r}{self._did_you_mean(base) or '.'} Its nearest folder, {self._rel(where)!r}, holds:\n"
            base = where
        entries: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):  # does not follow symlinked directories
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for name in sorted(filenames):
                entries.append(self._rel(Path(dirpath) / name))
                if len(entries) >= _LIST_LIMIT:
                    return note + "\n".join(entries) + f"\n[... listing stopped at {_LIST_LIMIT} entries ...]"
        return note + ("\n".join(entries) if entries else "(no files)")

    def read_file(self, path: object) -> str:
        target = self.resolve(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path!r}{self._did_you_mean(target)}{self._nearby(target)}")
        self._known.add(target)
        return target.read_bytes().decode("utf-8", errors="replace")

    def _nearby(self, target: Path) -> str:
        """The files of the nearest existing directory, so a model that guessed a path can pick a real one."""
        where = target.parent
        while where != self.root and not where.is_dir():
            where = where.parent
        try:
            names = sorted(p.name + ("/" if p.is_dir() else "") for p in where.iterdir() if p.name not in _SKIP_DIRS)
        except OSError:
            return ""
        shown = names[:_HINT_ENTRIES]
        more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
        return f"; {self._rel(where)!r} holds: {', '.join(shown) or '(nothing)'}{more}"

    def write_file(self, path: object, content: object) -> str:
        if not isinstance(content, str):
            raise ToolError("`content` must be a string")
        target = self.resolve(path)
        if target.is_dir():
            raise ToolError(f"{path!r} is a directory")
        self._guard_plan(target, content)
        self._guard_protected(target)
        rel = self._rel(target)
        if target.is_file() and target not in self._known and target != self.plan_path:
            raise ToolError(f"read it first: write_file replaces the whole file, and {rel} has not been read in this "
                            f"session. Call read_file {rel}, then write_file it whole with your change (keeping "
                            f"what is there), or use edit_file. The file was not changed.")
        if not target.exists():
            similar = self._similar(target)
            if similar and self._ask_once(f"new:{rel}"):
                raise ToolError(f"{rel} does not exist; did you mean {' or '.join(repr(f) for f in similar)}? Nothing "
                                f"was written. To create {rel} as a new file, call write_file with it again.")
        before = target.read_text(encoding="utf-8", errors="replace") if target.is_file() else ""
        if target.is_file() and before == content:  # the 1.5B wrote the same text again and again, told "wrote"
            self._known.add(target)
            same = f"{rel} already has exactly this text: nothing changed"
            _check_python(target, content, same)
            return same + "."
        content, replaced = self._guard_shape(target, before, content)
        if target.is_file() and before == content:  # a write of the file's own functions: kept as they are
            self._known.add(target)
            return f"{rel} already has exactly this text{replaced}: nothing changed."
        self._guard_dropped(target, before, content)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        self._known.add(target)
        done = f"wrote {len(content.encode('utf-8'))} bytes to {rel}{replaced}"
        _check_python(target, content, done)
        lost = [name for name in _top_names(target, before) if name not in _top_names(target, content)]
        if lost:
            # the 1.5B asked to add mean wrote a file with mean alone: the tests of add failed, and it never knew why
            return (f"{done}. It no longer defines {', '.join(lost[:8])}, which the file defined before: write_file "
                    f"replaces the whole file. If they are still needed, put them back (edit_file with an empty "
                    f"old_string adds code at the end).")
        return done

    def edit_file(self, path: object, old_string: object, new_string: object) -> str:
        if not isinstance(old_string, str) or not isinstance(new_string, str):
            raise ToolError("`old_string` and `new_string` must be strings")
        target = self.resolve(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path!r}{self._did_you_mean(target)}{self._nearby(target)}")
        self._guard_protected(target)
        text = target.read_bytes().decode("utf-8", errors="replace")
        if not old_string.strip():
            return self._append(target, text, new_string)
        if old_string == new_string:  # the 1.5B "fixed" a line by replacing it with itself, and was told "edited"
            raise ToolError(f"old_string and new_string are the same, so {path} would not change; it was not "
                            f"changed. new_string is the line as it should be after your change.")
        count = text.count(old_string)
        if count == 0:
            if len(text.encode("utf-8")) <= _HINT_LIMIT:
                self._known.add(target)  # the whole file is in the answer
            raise ToolError(f"old_string was not found in {path!r}; it must match the file exactly, whitespace and line "
                            f"breaks included. Copy it from the file as it is now, or replace the whole file with "
                            f"write_file:\n{bound_output(text, _HINT_LIMIT)}")
        if count != 1:
            starts, at = [], text.find(old_string)
            while at >= 0:
                starts.append(text.count("\n", 0, at) + 1)
                at = text.find(old_string, at + len(old_string))
            where = ", ".join(str(n) for n in starts[:-1]) + f" and {starts[-1]}"
            raise ToolError(f"old_string occurs {count} times in {path!r}, starting on lines {where}; it must occur "
                            f"exactly once: include more of the surrounding text to say which one")
        self._refuse_again(target, text, text.find(old_string), old_string, new_string)
        new_text = text.replace(old_string, new_string, 1)
        self._guard_plan(target, new_text)
        new_text, replaced = self._guard_shape(target, text, new_text)
        target.write_text(new_text, encoding="utf-8")
        self._made.add((target, old_string, new_string))
        _check_python(target, new_text, f"edited {path}{replaced}")
        lost = [name for name in _top_names(target, text) if name not in _top_names(target, new_text)]
        if lost:  # the 1.5B asked to add mean renamed add to mean
            return (f"edited {path}{replaced}. It no longer defines {', '.join(lost[:8])}, which the file defined "
                    f"before. If they are still needed, put them back (edit_file with an empty old_string adds code at "
                    f"the end).")
        return f"edited {path}{replaced}"

    def _refuse_again(self, target: Path, text: str, at: int, old_string: str, new_string: str) -> None:
        """Refused: an edit made in this session that the file still shows made, which would add its lines a second
        time. The 1.5B inserted the same `return` after a docstring's line 35 times in a row into a file that no
        longer parsed; each call changed the work tree, so no stuck rule saw it. `at` is where old_string is (where
        the added text starts, for an addition at the end); new_string holds old_string once, with the lines the
        edit adds around it."""
        if (target, old_string, new_string) not in self._made:
            return
        if not old_string:
            new_string = new_string.strip()
        pre, found, post = new_string.partition(old_string) if old_string else ("", "", new_string)
        if old_string and not found:
            return
        start = at - len(pre)  # where the edit's text would begin in the file
        if not (pre or post) or start < 0 or text[start:at + len(old_string) + len(post)] != new_string:
            return
        rel = self._rel(target)
        line = text.count("\n", 0, start) + 1
        added = (pre + post).strip("\n")
        broken = _syntax_error(target, text)
        state = (f" {rel} does not parse as it is: line {broken.lineno}: {broken.msg}:{_around(text, broken.lineno)}"
                 if broken is not None else "")
        raise ToolError(f"not changed: {rel} already has this text at line {line} (the edit was made already); making "
                        f"it again would add {_short_text(added)} a second time.{state} To change the code further, "
                        f"read_file {rel} and edit what is there now.")

    def _guard_dropped(self, target: Path, before: str, after: str) -> None:
        """Before anything is written, refused: a whole-file write that no longer defines a function or class the file
        defined and the tests use (written over with the new function alone, the 1.5B's `parse_cents` replaced
        `dollars`, which tests/test_moneyfmt.py imports, again and again). What the file defined that no test uses
        may go (the write then says so), and edit_file may rename (it says so too)."""
        kept = set(_top_names(target, after))  # parsed once, not once per name the file defined
        gone = [name for name in _top_names(target, before) if name not in kept]
        if not gone:
            return
        rel = self._rel(target)
        # a text that does not parse defines nothing (the 1.5B wrote moneyfmt.py as one indented `return` line)
        read = after if _syntax_error(target, after) is None else ""
        used = [w for w in wanted_by_tests(self.root, rel, read, limit=0) if w[0] in gone]
        if not used:
            return
        names = ", ".join(f"`{name}`" for name, _, _ in used[:8])
        where = "; ".join(f"`{name}`: {path} line {line}" for name, path, line in used[:3])
        raise ToolError(f"not written: write_file replaces the whole file, and this text no longer defines {names}, "
                        f"which the tests use ({where}). Keep what the file has: to add a function, call edit_file "
                        f"with an empty old_string and the new function as new_string (it goes at the end); to "
                        f"change a line, edit_file with that line as old_string. {rel} was not changed.")

    def _guard_shape(self, target: Path, before: str, after: str) -> tuple[str, str]:
        """The text to write and what was done to it, or refused before anything is written: a change to a Python
        file that defines a top-level function a second time (Python keeps the last one; a linter calls it an
        error), or that gives a function the tests call a parameter that none of their calls passes and the plan
        does not name (without a plan file: asked once per change). The 1.5B appended a second `dollars` when asked
        for `parse_cents`; it gave `total` a `skip_missing` no test passes, and asked once, it made the same call
        again. What the tests call is named. A new definition of a function the checkpoint at hand names, added
        beside the one the file had, replaces it instead (`redefined`: the 1.5B's next try at `parse_cents`, added at
        the end again and again), and an import from the module itself of names it defined keeps those definitions
        (`kept_by_import`); the text says so. An import from itself of anything else is refused (`self_imports`)."""
        if target.suffix != ".py" or not before.strip() or _syntax_error(target, after) is not None:
            return after, ""
        rel = self._rel(target)
        plan = self._plan()
        todo = plan.next_checkpoint() if plan is not None else None
        focus = f"{todo.title} {todo.verify or ''}" if todo is not None else ""
        after, taken = redefined(before, after, focus)
        replaced = "".join(f" (it replaced the `{name}` that was on line {line}: Python keeps only the last of two "
                           f"definitions, so the earlier one was taken out)" for name, line in taken)
        after, kept = kept_by_import(rel, before, after)
        if kept:
            names = ", ".join(f"`{name}`" for name in kept)
            replaced += (f" (a module cannot import from itself, so the line importing {names} from "
                         f"{module_name(rel)} was replaced by {names} as {rel} had {'it' if len(kept) == 1 else 'them'})")
        twice = duplicates(self.root, rel, before, after, focus)
        if twice:
            raise ToolError(f"not written: {twice} {rel} was not changed.")
        itself = self_imports(rel, before, after, focus)
        if itself:
            raise ToolError(f"not written: {itself} {rel} was not changed.")
        task = self.plan_path.read_text(encoding="utf-8", errors="replace") if plan is not None and self.plan_path else ""
        unused = unused_parameters(self.root, rel, before, after, task)
        if unused and (plan is not None or self._ask_once(f"parameters:{rel}:{hashlib.sha256(after.encode()).hexdigest()}")):
            raise ToolError(f"not written: {unused}\n{rel} was not changed.")
        return after, replaced

    def _append(self, target: Path, text: str, new_string: str) -> str:
        """An edit with an empty old_string adds new_string at the end of the file (the 1.5B adds a function so;
        refused, it wrote the whole file again and lost what was there)."""
        rel = self._rel(target)
        if not new_string.strip():
            raise ToolError("`old_string` and `new_string` are both empty: nothing to change")
        if text.strip() and text.rstrip().endswith(new_string.strip()):
            self._refuse_again(target, text, len(text.rstrip()) - len(new_string.strip()), "", new_string)
        swapped = return_replaced(rel, text, new_string)
        if swapped is not None:
            return self._swap_return(target, text, new_string, *swapped)
        inside = indented_append(rel, text, new_string)
        if inside:
            raise ToolError(f"not written: {inside}\n{rel} was not changed.")
        gap = "" if not text.strip() else ("\n\n\n" if target.suffix == ".py" else "\n")
        new_text = text.rstrip("\n") + gap + new_string.strip("\n") + "\n" if text.strip() else new_string
        self._guard_plan(target, new_text)
        new_text, replaced = self._guard_shape(target, text, new_text)
        target.write_text(new_text, encoding="utf-8")
        self._made.add((target, "", new_string))
        first = new_text[: len(new_text.rstrip("\n")) - len(new_string.strip("\n"))].count("\n") + 1
        done = (f"old_string was empty, so new_string was added at the end of {rel} (from line {first}; "
                f"{len(new_text.splitlines())} lines now){replaced}")
        _check_python(target, new_text, done)
        return done

    def _swap_return(self, target: Path, text: str, new_string: str, new_text: str, line: int, name: str,
                     old: str) -> str:
        """An indented `return` added at the end of a file whose last function ends with a return replaces that
        return (a line after it would never run): written, and the answer says so (`return_replaced`)."""
        rel = self._rel(target)
        self._guard_plan(target, new_text)
        new_text, replaced = self._guard_shape(target, text, new_text)
        target.write_text(new_text, encoding="utf-8")
        self._made.add((target, "", new_string))
        done = (f"new_string is indented, so it belongs inside `{name}`, whose last line is a return: a line after it "
                f"would never run, so it replaced that return instead. Line {line} of {rel} was `{old}` and is now "
                f"`{new_string.strip()}`{replaced}")
        _check_python(target, new_text, done)
        return done + "."

    # -- the plan file --

    def _plan_rel(self) -> str:
        assert self.plan_path is not None
        return self._rel(self.plan_path)

    def _checkpoint_list(self, items: list[Item]) -> str:
        lines = self.plan_path.read_text(encoding="utf-8", errors="replace").splitlines() if self.plan_path else []
        shown = [f"line {i.line}: {lines[i.index]}" for i in items[:_SHOWN_CHECKPOINTS] if i.index < len(lines)]
        more = f"\n[... and {len(items) - len(shown)} more]" if len(items) > len(shown) else ""
        return "\n".join(shown) + more if shown else "(no checkpoint lines)"

    def _guard_plan(self, target: Path, new_text: str) -> None:
        """Refuse a write to the plan file that changes anything but a checkpoint's box (or BLOCKED marker)."""
        if self.plan_path is None or target != self.plan_path or not target.is_file():
            return
        old_text = target.read_bytes().decode("utf-8", errors="replace")
        old, new = old_text.splitlines(), new_text.splitlines()
        items = _checkpoints(old_text)
        by_index = {i.index: i for i in items}
        problem = None
        if len(old) != len(new):
            problem = f"it has {len(new)} lines instead of {len(old)} (no line may be added or removed)"
        else:
            for n, (a, b) in enumerate(zip(old, new, strict=True)):  # as long as each other, checked above
                if a == b:
                    continue
                if n not in by_index:
                    problem = f"line {n + 1} is not a checkpoint's line: {a!r} would become {b!r}"
                elif not _box_change(a, b):
                    problem = (f"on line {n + 1} only the box may change: {a!r} would become {b!r}, but the ticked "
                               f"line is {rewrite_state(a, CheckpointState.DONE).rstrip()!r}")
                if problem:
                    break
        if problem is None:
            return
        raise ToolError(
            f"refused: {self._plan_rel()} is the plan's tracker, and the only change allowed in it is a checkpoint's "
            f"box, `- [ ]` to `- [x]`, on the checkpoint's own line (or call mark_done with the checkpoint's id); "
            f"{problem}. The file was not changed. Its checkpoint lines:\n{self._checkpoint_list(items)}")

    def mark_done(self, checkpoint: object) -> str:
        if self.plan_path is None or not self.plan_path.is_file():
            raise ToolError("there is no plan file in this session, so there is no checkpoint to tick")
        if not isinstance(checkpoint, str) or not checkpoint.strip():
            raise ToolError("a non-empty `checkpoint` string is required: its id, e.g. \"1.1\", or its whole line")
        text = self.plan_path.read_bytes().decode("utf-8", errors="replace")
        items = _checkpoints(text)
        given = _GIVEN_BOX.sub("", checkpoint.strip().strip("`*").strip(), count=1).strip()
        found = _GIVEN_ID.match(given)
        if found:
            matches = [i for i in items if i.checkpoint_id == found.group(1)]
            title = found.group(2).split("<!--")[0].strip()
            if matches and title and not _norm(matches[0].title).startswith(_norm(title).split(" blocked:")[0]):
                raise ToolError(f"checkpoint {found.group(1)} is {matches[0].title!r}, not {title!r}; give the id "
                                f"alone or the line as it is. The checkpoint lines of {self._plan_rel()}:\n"
                                f"{self._checkpoint_list(items)}")
        else:
            matches = [i for i in items if given and _norm(i.title) == _norm(given)]
        if len(matches) != 1:
            raise ToolError(f"no checkpoint {checkpoint.strip()[:200]!r} in {self._plan_rel()}: give its id (e.g. "
                            f"\"1.1\") or its whole line. Its checkpoint lines:\n{self._checkpoint_list(items)}")
        item = matches[0]
        line = text.splitlines()[item.index]
        if item.state is not CheckpointState.DONE:
            # the check first: told "commit your work first" while the check failed, the 1.5B committed, read the
            # failure only then, changed a line, ran the (green) gate and came back here, four calls a round
            self._check_verify(item.checkpoint_id)
            self._check_committed(item.checkpoint_id)
        if item.state is CheckpointState.DONE:
            return (f"checkpoint {item.checkpoint_id} is already ticked in {self._plan_rel()} (line {item.line}: "
                    f"{line}); commit the file if you have not")
        try:
            new_text = set_checkpoint_state(text, item.checkpoint_id, CheckpointState.DONE)
        except PlanRunnerError as exc:
            raise ToolError(exc.what) from None
        self.plan_path.write_text(new_text, encoding="utf-8")
        ticked = new_text.splitlines()[item.index]
        done = f"ticked checkpoint {item.checkpoint_id} in {self._plan_rel()}: line {item.line} is now {ticked!r}"
        # The work is committed (checked above), so the tick is the one change left: committed here, the plan file
        # alone, as the agent (its identity, its repository). Small models ticked and then answered, leaving the
        # tick uncommitted: not evidence. A commit that fails leaves the tick to commit by hand.
        if self._git("commit", "-q", "-m", f"tick {item.checkpoint_id}", "--", self._plan_rel()) is not None:
            return f"{done}, and committed the tick. If the task is done, stop and say briefly what you did."
        return (f"{done}. The tick counts only once committed: your next call is run_shell with the command "
                f"`git commit -am tick-{item.checkpoint_id}`")

    def _protected(self) -> list[str]:
        """The plan's `protected:` paths, read from the plan file as it is; none when it does not parse."""
        plan = self._plan()
        return list(plan.config.protected) if plan is not None else []

    def _guard_protected(self, target: Path) -> None:
        """Refuse to change a file the plan protects, at once and saying what to change instead (the 1.5B changed
        a test's expected value instead of the code; after the session that is tampering, reverted, and the plan
        parks). The shell can still write it: the post-session check stays the rule."""
        if target == self.root or self.root not in target.parents:
            return
        rel = self._rel(target)
        patterns = self._protected()
        if not patterns or not _at_or_above(rel, patterns):
            return
        shown = ", ".join(f"`{p}`" for p in patterns[:6])
        code = self._imported_code(target)
        instead = (f" Change the code it tests instead: {', '.join(code)}." if code
                   else " Change the code it tests instead.")
        raise ToolError(f"refused: {rel} is protected by the plan ({shown}): it says what the code must do, and "
                        f"a change to it is undone and stops the plan.{instead} The file was not changed.")

    def _imported_code(self, target: Path) -> list[str]:
        """The work tree's own modules a Python file imports (a test's code under test)."""
        if target.suffix != ".py":
            return []
        try:
            tree = ast.parse(target.read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            return []
        names: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
        found: list[str] = []
        for name in names:
            for candidate in (name.replace(".", "/") + ".py", name.replace(".", "/") + "/__init__.py"):
                path = self.root / candidate
                if path.is_file() and candidate not in found and not _at_or_above(candidate, self._protected()):
                    found.append(candidate)
                    break
        return found[:5]

    def unfinished(self, tool_calls: int) -> str | None:
        """When the model stops: a reminder if the evidence shows its work is not begun or not committed (a question
        asked once each per session), else None. The 1.5B answered "added, tested, committed" with no tool call
        at all, and stopped with its fix uncommitted. It only says what the work tree shows; nothing is counted."""
        if self.plan_path is None:
            return None
        if tool_calls == 0:
            if self._ask_once("stop:no-calls"):
                return ("You have not called any tool, so nothing has been done yet: no file was read or changed, "
                        "the gates were not run and nothing was committed. Do the task now with the tools: your "
                        "next call is read_file of the file the task names.")
            return None
        pending = self._uncommitted()
        if pending and self._ask_once("stop:uncommitted"):
            shown = ", ".join(pending[:5]) + (f" and {len(pending) - 5} more" if len(pending) > 5 else "")
            return (f"Your changes are not committed ({shown}), so they do not count. Run the gates; when they "
                    f"pass, your next call is run_shell with the command `git add -A && git commit -m 'work'`.")
        return None

    def gate_now(self, limit_s: float | None = None) -> str:
        """Where the work stands, for a model going round in circles: the plan's gate commands and the next
        checkpoint's own check run here, the first that fails shown by the digest of its failure (the failing test
        line, the error, where it was raised and the function under test); "" without a plan's gates. The 1.5B on
        red-first wrote the same refused parameter again and again and never ran the gate in that session, so it
        never saw where None reaches `sum()`. Information only: plan-runner runs the gates itself after the session."""
        commands = self._gate_commands()
        for command in commands:
            try:
                ok, out = self.run_shell(command, limit_s=limit_s)
            except ToolError:
                return ""
            if ok:
                continue
            found = self._explain(out, command, limit_s).replace("What failed, read from the output above", "What fails")
            return (f"Where the work stands: `{command}` fails now (exit code {_exit_code(out)})."
                    + (found or f" Its output ends:\n{bound_output(out[-1500:], 1500)}"))
        if not commands:
            return ""
        return "Where the work stands: " + " and ".join(f"`{c}`" for c in commands) + " pass now."

    def _explain(self, out: str, command: object, limit_s: float | None = None) -> str:
        """The digest of a failed command's output, and for a failed assertion on a call with literal arguments,
        what the function's return computed in that call (`probe`: the call made again with the interpreter the
        command named, here, as any command of the agent's)."""
        found = failure_digest(out, self.root)
        if not found:
            return ""
        wanted = probes(out, self.root)
        if not wanted:
            return found
        try:
            words = shlex.split(command) if isinstance(command, str) else []
        except ValueError:
            words = []
        python = words[0] if words and re.fullmatch(r"python[\d.]*", Path(words[0]).name) else "python3"
        try:
            _ok, answer = self.run_shell(probe_command(python, wanted[0]), 20, limit_s=limit_s)
        except ToolError:
            return found
        return found + describe(wanted[0], answer)

    def _plan(self) -> Plan | None:
        """The plan file as it is, parsed; None when there is none or it does not parse."""
        if self.plan_path is None or not self.plan_path.is_file():
            return None
        try:
            return parse_plan(self.plan_path.read_text(encoding="utf-8", errors="replace"), self._plan_rel())
        except (PlanRunnerError, ValueError):
            return None

    def _gate_commands(self) -> list[str]:
        """The plan's gate commands (`run:`) and the next checkpoint's own check, read from the plan file as it
        is; none when it does not parse."""
        plan = self._plan()
        if plan is None:
            return []
        return [g.run for g in plan.config.gates if g.run] + [v for v in (self._todo_verify(),) if v]

    def _is_gate(self, command: object) -> bool:
        if not isinstance(command, str) or not command.strip():
            return False
        given = " ".join(command.split())
        return any(" ".join(gate.split()) in given for gate in self._gate_commands())

    def _after_green_gate(self, command: object, limit_s: float | None = None) -> str:
        """After a gate passed: the next checkpoint's own check, run here when it was not this command, and its
        failure shown (the 1.5B ran the green gate only and never saw what its checkpoint asked for; told which
        command to run next, it went to mark_done instead); with work not committed, the commit as the next call,
        as a command that works as written (the 1.5B went from a green gate to mark_done, refused, and back, until
        it was stopped)."""
        check = self._todo_verify()
        if check and " ".join(check.split()) not in " ".join(str(command).split()):
            try:
                ok, out = self.run_shell(check, limit_s=limit_s)
            except ToolError:
                ok, out = False, ""
            if not ok:
                found = self._explain(out, check, limit_s).replace("What failed, read from the output above",
                                                                   "What fails")
                return (f"\nThe gate passes, but the checkpoint's own check `{check}` fails now (exit code "
                        f"{_exit_code(out)}): the checkpoint is not done."
                        + (found or f" Its output ends:\n{bound_output(out[-1500:], 1500)}")
                        + f"\nChange the code until `{check}` passes.")
        pending = self._uncommitted()
        if not pending:
            return ""
        shown = ", ".join(pending[:5]) + (f" and {len(pending) - 5} more" if len(pending) > 5 else "")
        return (f"\nThe gate passes and your changes are not committed yet ({shown}). Your next call is run_shell "
                f"with the command `git add -A && git commit -m 'work'`.")

    @staticmethod
    def _is_commit(command: object) -> bool:
        return isinstance(command, str) and re.search(r"\bgit\s+(?:-\S+\s+)*commit\b", command) is not None

    @staticmethod
    def _is_stage(command: object) -> bool:
        return isinstance(command, str) and re.search(r"\bgit\s+(?:-\S+\s+)*(?:add|stage)\b", command) is not None

    def _after_stage(self) -> str:
        """After `git add` with no commit: what is staged is not committed (told to commit, the 1.5B ran `git add -A`
        alone and went back to mark_done, refused, four times, until `alternation` ended the session)."""
        staged = self._git("diff", "--cached", "--name-only", "-z")
        names = [n for n in (staged or "").split("\0") if n]
        if not names:
            return ""
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return (f"\nStaged, not committed ({shown}): only a commit counts. Your next call is run_shell with the "
                f"command `git commit -m 'work'`.")

    def _after_commit(self, limit_s: float | None = None) -> str:
        """After a commit of work with a checkpoint still to tick: the tick as the next call (the 1.5B committed
        its fix and answered, the checkpoint unticked); but while the plan's gates or the checkpoint's own check
        fail on what was committed, that failure instead (on red-first the 1.5B committed a change it had never
        run, read "If checkpoint 1.1 is done (the gates pass), your next call is mark_done" and answered it was
        done)."""
        if self.plan_path is None or not self.plan_path.is_file() or self._uncommitted():
            return ""
        todo = [i for i in _checkpoints(self.plan_path.read_text(encoding="utf-8", errors="replace"))
                if i.state is CheckpointState.TODO]
        if not todo:
            return ""
        where = self.gate_now(limit_s=limit_s)
        failing = re.match(r"Where the work stands: `(.*)` fails now ", where)
        if failing:
            return (f"\nCommitted, but checkpoint {todo[0].checkpoint_id} is not done: "
                    f"{where.removeprefix('Where the work stands: ')}"
                    f"\nFix the code, run `{failing.group(1)}` again until it passes, then commit.")
        check = self._verify_of(todo[0].checkpoint_id)
        if check:
            return (f"\nCommitted. If checkpoint {todo[0].checkpoint_id} is done (the gates and its own check pass: "
                    f"run_shell `{check}`), your next call is mark_done with {todo[0].checkpoint_id!r}.")
        return (f"\nCommitted. If checkpoint {todo[0].checkpoint_id} is done (the gates pass), your next call is "
                f"mark_done with {todo[0].checkpoint_id!r}.")

    def _verify_of(self, checkpoint_id: str) -> str | None:
        """A checkpoint's own check (`<!-- verify: ... -->`), read from the plan file as it is."""
        plan = self._plan()
        found = plan.checkpoint(checkpoint_id) if plan is not None else None
        return found.verify if found is not None else None

    def _todo_verify(self) -> str | None:
        """The own check of the first unticked checkpoint that has one, when the plan is read."""
        plan = self._plan()
        todo = plan.next_checkpoint() if plan is not None else None
        return todo.verify if todo is not None else None

    def _uncommitted(self) -> list[str] | None:
        """The paths with uncommitted changes (the plan file and Python's caches aside), None outside git."""
        out = self._git("status", "--porcelain=v1", "-z", "--untracked-files=all")
        if out is None:
            return None
        plan = self._plan_rel() if self.plan_path is not None else None
        paths, entries = [], out.split("\0")
        for entry in entries:
            if len(entry) < 4 or entry[2] != " ":
                continue  # a rename's second path, or the end
            path = entry[3:]
            if path == plan or "__pycache__/" in path or path.endswith(".pyc"):
                continue
            paths.append(path + (" (new)" if entry[:2] == "??" else ""))
        return paths

    def _check_verify(self, checkpoint_id: str) -> None:
        """A checkpoint with its own check (`verify:`) is ticked only while that check passes here: the 1.5B ticked
        with the check red (plan-runner runs it after the session and undoes such a tick; this says so at once)."""
        check = self._verify_of(checkpoint_id)
        if not check:
            return
        ok, out = self.run_shell(check)
        if not ok:
            raise ToolError(f"not ticked: checkpoint {checkpoint_id}'s own check fails, so the tick would be undone. "
                            f"Make `{check}` pass first (change the code, not the check), commit, then mark_done "
                            f"{checkpoint_id} again. Its output:\n{out}{self._explain(out, check)}")

    def _check_committed(self, checkpoint_id: str) -> None:
        """A tick counts with the work committed: uncommitted work is named, and a tick before anything was
        committed in this session is asked about once (the work may have been committed in an earlier one)."""
        pending = self._uncommitted()
        if pending:
            shown = ", ".join(pending[:10]) + (f" and {len(pending) - 10} more" if len(pending) > 10 else "")
            # a command that works as written: a small model copies it (a literal `<message>` is a bash error)
            how = (f"git add -A && git commit -m 'work for {checkpoint_id}'" if any(p.endswith(" (new)") for p in pending)
                   else f"git commit -am 'work for {checkpoint_id}'")
            raise ToolError(f"commit your work first: your next call is run_shell with the command `{how}`, then "
                            f"mark_done {checkpoint_id} again (uncommitted: {shown}). Nothing was ticked.")
        head = self._git("rev-parse", "-q", "--verify", "HEAD")
        if pending is not None and head == self._start_head and self._ask_once(f"tick:{checkpoint_id}"):
            raise ToolError(f"nothing has been committed in this session. A tick counts only with the checkpoint's work "
                            f"committed and the gates passing: do the work first (read the files the task names, change "
                            f"them, run the gates, commit). If the work was already committed in an earlier session, call "
                            f"mark_done {checkpoint_id} again. Nothing was ticked.")

    def run_shell(self, command: object, timeout_s: object = None, *, limit_s: float | None = None) -> tuple[bool, str]:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("a non-empty `command` string is required")
        timeout = self.shell_timeout_s
        if isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and timeout_s > 0:
            timeout = min(timeout, float(timeout_s))
        if limit_s is not None:
            timeout = max(0.1, min(timeout, limit_s))
        output = proc.HeadTail(OUTPUT_LIMIT)
        try:
            # Streamed with a deadline, in a process group of its own: a grandchild that escapes the group
            # (setsid) and keeps the pipe open cannot hold the tool past its timeout plus the graces.
            finished = proc.run(["bash", "-c", command], cwd=self.root, env=self.env, time_limit_s=timeout,
                                on_output=output.feed, merge_stderr=True,
                                term_grace_s=_SHELL_TERM_GRACE_S, drain_s=_SHELL_DRAIN_GRACE_S,
                                stop_leftovers_at_exit=False)
        except proc.StartFailed as exc:
            raise ToolError(f"could not start bash: {exc.error.strerror or exc.error}") from None
        if finished.reason == "time_limit":
            return False, self._relative(output.bounded(f"killed after {timeout:g}s (timeout)\n"))
        return finished.succeeded, self._relative(output.bounded(f"{finished.status()}\n"))

    def _relative(self, text: str) -> str:
        """A command's output with the work tree's own absolute path written relative to it, as the agent's commands
        run there (`File "tools/moneyfmt.py", line 3`). The path holds the user's id and a hash of the session
        (`/tmp/plan-runner-<uid>/agents/work-<hash>/work`): the same run as another user read one token more in a
        traceback, and a small model's greedy calls went another way from there; a path is noise to it anyway."""
        for root in dict.fromkeys((str(self.root), str(self.root.resolve()))):
            if len(root) > 1:
                text = text.replace(root + "/", "")
                text = re.sub(re.escape(root) + r"(?![\w.-])", ".", text)
        return text

    def run(self, name: str, args: Any, *, time_left_s: float | None = None) -> ToolOutcome:
        """Run one tool call; never raises for a bad call, it becomes a failed outcome."""
        if not isinstance(args, dict):
            return ToolOutcome(False, "tool input must be a JSON object")
        try:
            if name == "list_files":
                return ToolOutcome(True, bound_output(self.list_files(args.get("path", "."))))
            if name == "read_file":
                return ToolOutcome(True, bound_output(self.read_file(args.get("path"))))
            if name == "write_file":
                return ToolOutcome(True, self.write_file(args.get("path"), args.get("content")))
            if name == "edit_file":
                return ToolOutcome(True, self.edit_file(args.get("path"), args.get("old_string"), args.get("new_string")))
            if name == "mark_done":
                return ToolOutcome(True, self.mark_done(args.get("checkpoint")))
            if name == "run_shell":
                ok, text = self.run_shell(args.get("command"), args.get("timeout_s"), limit_s=time_left_s)
                if not ok:
                    text += self._explain(text, args.get("command"), time_left_s)
                elif self._is_gate(args.get("command")):
                    text += self._after_green_gate(args.get("command"), limit_s=time_left_s)
                elif self._is_commit(args.get("command")):
                    text += self._after_commit(limit_s=time_left_s)
                elif self._is_stage(args.get("command")):
                    text += self._after_stage()
                return ToolOutcome(ok, text)  # already bounded as it streamed
            return ToolOutcome(False, f"unknown tool {name!r}; the tools are: {', '.join(sorted(TOOL_NAMES))}")
        except ToolError as exc:
            return ToolOutcome(False, str(exc))
        except (OSError, UnicodeError) as exc:
            return ToolOutcome(False, f"{type(exc).__name__}: {exc}")

