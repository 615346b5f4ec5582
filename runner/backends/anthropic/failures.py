"""What a failing test run means for the code, read from its output: for the built-in agent's `run_shell`.

Small models shown a red run's whole output edit the test instead of the code, invent parameters or change the
wrong function (docs/real-model.md). So a failed command whose output holds Python tracebacks (unittest,
pytest, a plain crash) gets a short digest after its output: per failure (three at most), the test's line that
failed, the error, and the source of the function it points at, with line numbers, read from the work tree: the
frame of the work tree's own code where the error was raised, or else the functions the test's line calls. A
name the error says is missing (`module 'm' has no attribute 'f'`, `cannot import name 'f' from 'm'`) is named
with what the module does define; a NameError raised in a function, with the parameters the function has; int()
given a text with other characters than digits, with those characters; a parameter the failing call leaves to a
default that an `if` of the function tests, with that default.

It only reads: the result stays the command's (a failed call stays failed), and nothing here decides anything.
Pure but for reading the work tree's files; never raises (a digest that cannot be made is empty).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

MAX_FAILURES = 3
MAX_FUNCTIONS = 2
MAX_FUNCTION_LINES = 30
_SKIP_PARTS = {".git", ".venv", "venv", "site-packages", "__pycache__", "node_modules"}

_FRAME = re.compile(r'^\s*File "([^"]+\.py)", line (\d+), in (\S+)\s*$')
_PYTEST_FRAME = re.compile(r"^([\w./-]+\.py):(\d+): (\w+(?:Error|Exception|Exit)?)\b")
_ERROR_LINE = re.compile(r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)|AssertionError)(?::\s?(.*))?$")
_NO_ATTR = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
_NO_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
_NOT_INT = re.compile(r"ValueError: invalid literal for int\(\) with base 10: '([^']*)'")
_NOT_DEFINED = re.compile(r"NameError: name '(\w+)' is not defined")
_NOT_EQUAL = re.compile(r"^AssertionError: (-?\d+(?:\.\d+)?) != (-?\d+(?:\.\d+)?)$")
_CALLED = re.compile(r"(?<![\w.])((?:[A-Za-z_]\w*\.)?[A-Za-z_]\w*)\s*\(")


@dataclass
class _Failure:
    frames: list[tuple[str, int, str]]  # (path as printed, line, function), outermost first
    error: str


def _returns_value(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether `fn` returns or yields a value anywhere (nested functions and classes are theirs, not its), or may
    not return at all (it raises: a stub)."""
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            return True
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Raise)):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


def _is_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" or "/tests/" in f"/{path}"


def _failures(output: str) -> list[_Failure]:
    """Each traceback of `output`: its frames and its last line (the error)."""
    found: list[_Failure] = []
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("Traceback (most recent call last):"):
            frames: list[tuple[str, int, str]] = []
            i += 1
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                m = _FRAME.match(lines[i])
                if m:
                    frames.append((m.group(1), int(m.group(2)), m.group(3)))
                i += 1
            error = lines[i].strip() if i < len(lines) else ""
            if frames or error:
                found.append(_Failure(frames, error))
            continue
        m = _PYTEST_FRAME.match(lines[i])
        if m:  # pytest's short form: `tests/test_x.py:8: AssertionError`, after `E   ...` lines
            errors = [ln[1:].strip() for ln in lines[max(0, i - 12):i] if ln.startswith("E ")]
            found.append(_Failure([(m.group(1), int(m.group(2)), "?")], errors[0] if errors else m.group(3)))
        i += 1
    unique: list[_Failure] = []
    for f in found:
        if all((f.frames[-1:], f.error) != (u.frames[-1:], u.error) for u in unique):
            unique.append(f)
    return unique


class _Tree:
    """The work tree's Python files as the digest reads them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._parsed: dict[str, ast.Module | None] = {}

    def rel(self, printed: str) -> str | None:
        """The work-tree path of a path a traceback printed (absolute, or relative to the work tree), or None for
        a file outside it or in a virtualenv, cache or site-packages."""
        try:
            path = Path(printed) if printed.startswith("/") else self.root / printed
            path = path.resolve()
            rel = path.relative_to(self.root)
        except (OSError, ValueError, RuntimeError):
            return None
        if any(part in _SKIP_PARTS for part in rel.parts) or not path.is_file():
            return None
        return rel.as_posix()

    def text(self, rel: str) -> str:
        try:
            return (self.root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def module(self, rel: str) -> ast.Module | None:
        if rel not in self._parsed:
            try:
                self._parsed[rel] = ast.parse(self.text(rel))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._parsed[rel] = None
        return self._parsed[rel]

    def line(self, rel: str, n: int) -> str:
        lines = self.text(rel).splitlines()
        return lines[n - 1].strip() if 0 < n <= len(lines) else ""

    def module_file(self, dotted: str) -> str | None:
        for candidate in (dotted.replace(".", "/") + ".py", dotted.replace(".", "/") + "/__init__.py"):
            found = self.rel(candidate)
            if found:
                return found
        return None

    def functions(self, rel: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        tree = self.module(rel)
        if tree is None:
            return []
        found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(node)
            elif isinstance(node, ast.ClassDef):
                found += [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return found

    def enclosing(self, rel: str, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for fn in self.functions(rel):
            if fn.lineno <= line <= (fn.end_lineno or fn.lineno):
                return fn
        return None

    def source(self, rel: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        lines = self.text(rel).splitlines()
        start = min([d.lineno for d in fn.decorator_list] + [fn.lineno])
        end = fn.end_lineno or fn.lineno
        shown = range(start, min(end, start + MAX_FUNCTION_LINES - 1) + 1)
        body = "\n".join(f"{n:4d}  {lines[n - 1]}" for n in shown if n <= len(lines))
        more = f"\n      [... {end - shown[-1]} more lines]" if end > shown[-1] else ""
        return f"{rel}, lines {start}-{end}:\n{body}{more}"

    def code_files(self, limit: int = 300) -> list[str]:
        found: list[str] = []
        for path in sorted(self.root.rglob("*.py")):
            rel = path.relative_to(self.root)
            if any(part in _SKIP_PARTS or part.startswith(".") for part in rel.parts[:-1]):
                continue
            if not _is_test(rel.as_posix()):
                found.append(rel.as_posix())
            if len(found) >= limit:
                break
        return found


def _defines(tree: _Tree, rel: str) -> str:
    names = [f"{fn.name} (line {fn.lineno})" for fn in tree.functions(rel)]
    return ", ".join(names[:12]) if names else "no functions"


def _not_defined(tree: _Tree, rel: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str:
    """What a NameError raised in `fn` means there: the name is none of its parameters (the 1.5B wrote
    `if skip_missing:` in an `average(values)` the tests call with the values alone, and read the NameError four
    times without seeing it)."""
    args = fn.args
    params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    params += [f"*{args.vararg.arg}"] if args.vararg else []
    params += [f"**{args.kwarg.arg}"] if args.kwarg else []
    if name in [p.lstrip("*") for p in params]:
        return ""  # raised in a nested function of its own: not this
    return (f"  {name!r} is not a parameter of {fn.name} (it takes {', '.join(params) or 'nothing'}), nor a name "
            f"{rel} defines: the function has no {name!r} to use. Write that line without it, or give {name} a value in "
            f"{fn.name} before it.")


Function = ast.FunctionDef | ast.AsyncFunctionDef


def called_name(call: ast.Call) -> str:
    """The name a call calls: `f` for `f(...)` and `m.f(...)`; "" for anything else."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _defaults(fn: Function) -> dict[str, ast.expr]:
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    found = dict(zip([p.arg for p in positional[len(positional) - len(a.defaults):]], a.defaults, strict=True))
    found.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None})
    return found


def _argument(text: str, fn: Function) -> tuple[str, dict[str, ast.expr | None]] | None:
    """The first call of `fn` in the line `text`: the call as written, and per parameter of `fn` the expression it
    passes (None: left to its default); None when the line makes no such call or passes `*args`/`**kwargs`."""
    try:
        module = ast.parse(text.strip())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    a = fn.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    for call in ast.walk(module):
        if not isinstance(call, ast.Call):
            continue
        if called_name(call) != fn.name:
            continue
        if any(isinstance(x, ast.Starred) for x in call.args) or any(k.arg is None for k in call.keywords):
            return None
        passed: dict[str, ast.expr | None] = {name: None for name in _defaults(fn)}
        passed.update(zip(positional, call.args, strict=False))
        passed.update({k.arg: k.value for k in call.keywords if k.arg})
        return ast.unparse(call), passed
    return None


def _default_decides(callers: list[tuple[str, Function | None]], fn: Function) -> str:
    """What a parameter left to its default does in the failing call, when `fn` tests it in an `if`: the 1.5B wrote
    `total(values, skip_missing=False)` with `if skip_missing:` before the old `return sum(values)`, and the test's
    `total([1, None, 2])` went on failing in that return, the branch it meant never taken; then it gave `average` a
    `skip_missing=False` too and passed it on, and the test's `average([1, None, 3])` left both to their defaults.
    `callers` are the lines that made the failing call, innermost first, each with the function it is in."""
    for name, default in _defaults(fn).items():
        guard = next((n for n in ast.walk(fn) if isinstance(n, (ast.If, ast.IfExp, ast.While))
                      and any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(n.test))), None)
        if guard is None:
            continue
        callee, param, value = fn, name, default
        passed_on: list[tuple[str, str]] = []
        for text, caller in callers:
            found = _argument(text, callee)
            if found is None:
                break
            call, args = found
            arg = args.get(param)
            if arg is None:
                word = "while" if isinstance(guard, ast.While) else "if"
                via = "".join(f", which {a} passes on to {b}" for a, b in passed_on)
                test = guard.test
                taken = (True if isinstance(test, ast.Name) else False if isinstance(test, ast.UnaryOp)
                         and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name) else None)
                shown = ast.unparse(value)
                # the 1.5B read "or with a default that does it" and passed `skip_missing=False` explicitly instead
                instead = (f"with `{param}={taken}` as {callee.name}'s default, which takes that branch" if
                           taken is not None and shown != str(taken) else "with a default that does it")
                return (f"  `{call}` passes no {param!r}, so {param} is {shown} there ({callee.name}'s "
                        f"default){via}, and that is what `{word} {ast.unparse(test)}` (line {guard.lineno}) of "
                        f"{fn.name} sees in this call. What the test checks must happen in such a call: without "
                        f"{param!r}, or {instead}.")
            if caller is None or not isinstance(arg, ast.Name) or arg.id not in _defaults(caller):
                break  # a value of the caller's own: not a default left unpassed
            passed_on.insert(0, (caller.name, callee.name))
            callee, param, value = caller, arg.id, _defaults(caller)[arg.id]
    return ""


def _scale(error: str) -> str:
    """Two numbers a failed equality compared, one a power of ten times the other (10 to a million): the 1.5B's
    `parse_cents` gave 12300 for 123 (`int(text.replace('.', '')) * 100`) and it added `+ 100`, then another,
    reading "12300 != 123" four times without seeing the `* 100` too many."""
    found = _NOT_EQUAL.match(error)
    if not found:
        return ""
    try:
        a, b = Decimal(found.group(1)), Decimal(found.group(2))
    except InvalidOperation:
        return ""
    if not a or not b:
        return ""
    big, small = (a, b) if abs(a) > abs(b) else (b, a)
    ratio = big / small
    if ratio not in {Decimal(10) ** k for k in range(1, 7)}:
        return ""
    return f"  {big} is {small} * {ratio:f}: one side is {ratio:f} times the other."


def digest(output: str, root: Path) -> str:
    """The digest of a failed run's output, or "" when it shows no traceback of the work tree."""
    try:
        return _digest(output, Path(root).resolve())
    except Exception:  # noqa: BLE001 - a hint that cannot be made must never fail the tool call
        return ""


def _digest(output: str, root: Path) -> str:
    tree = _Tree(root)
    parts: list[str] = []
    shown_functions: set[tuple[str, str]] = set()
    for failure in _failures(output)[:MAX_FAILURES]:
        frames = [(rel, line, name) for printed, line, name in failure.frames if (rel := tree.rel(printed))]
        if not frames and not (_NO_ATTR.search(failure.error) or _NO_NAME.search(failure.error)):
            continue
        tests = [f for f in frames if _is_test(f[0])]
        code = [f for f in frames if not _is_test(f[0])]
        lines = []
        if tests:
            rel, line, name = tests[-1]
            lines.append(f"- {rel} line {line}, in {name}: {tree.line(rel, line)}")
        elif code:
            rel, line, name = code[0]
            lines.append(f"- called from {rel} line {line}, in {name}: {tree.line(rel, line)}")
        if failure.error:
            lines.append(f"  {failure.error[:300]}" if lines else f"- {failure.error[:300]}")
        targets: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
        if code:  # raised in the work tree's own code: the function it was raised in
            rel, line, _name = code[-1]
            lines.append(f"  raised in {rel} line {line}: {tree.line(rel, line)}")
            fn = tree.enclosing(rel, line)
            if fn is not None:
                targets.append((rel, fn))
                unknown = _NOT_DEFINED.search(failure.error)
                if unknown and (note := _not_defined(tree, rel, fn, unknown.group(1))):
                    lines.append(note)
        if scale := _scale(failure.error):
            lines.append(scale)
        literal = _NOT_INT.search(failure.error)
        others = dict.fromkeys(c for c in literal.group(1).strip().lstrip("+-") if not c.isdigit()) if literal else {}
        if literal and others:
            # the 1.5B's parse_cents ran int() on '1.23' and flipped `* 100` and `// 100` after it, again and again
            lines.append(f"  int() reads a whole number written in digits alone: {literal.group(1)!r} has "
                         f"{' and '.join(repr(c) for c in list(others)[:3])} in it.")
        missing = _NO_ATTR.search(failure.error) or _NO_NAME.search(failure.error)
        if missing:
            module, name = ((missing.group(1), missing.group(2)) if missing.re is _NO_ATTR
                            else (missing.group(2), missing.group(1)))
            found = tree.module_file(module)
            if found:
                lines.append(f"  {found} has no {name!r} yet; it defines: {_defines(tree, found)}. The test expects "
                             f"{name} in {found}: add it there.")
        elif not code and tests:  # the test's assertion failed: the functions its line calls
            rel, line, _name = tests[-1]
            called = [c.rsplit(".", 1)[-1] for c in _CALLED.findall(tree.line(rel, line))]
            for wanted in dict.fromkeys(called):
                if wanted.startswith("assert") or wanted in ("self", "print", "len", "str", "int", "float", "list"):
                    continue
                for path in tree.code_files():
                    fn = next((f for f in tree.functions(path) if f.name == wanted), None)
                    if fn is not None:
                        targets.append((path, fn))
                        break
        # the lines that made the failing call, innermost first: the frames before the one it was raised in, or
        # the test's own line
        chain = frames[-2::-1] if code else tests[-1:]
        callers = [(tree.line(r, n), tree.enclosing(r, n)) for r, n, _ in chain]
        for rel, fn in targets:
            if (rel, fn.name) in shown_functions or len(shown_functions) >= MAX_FUNCTIONS:
                continue
            shown_functions.add((rel, fn.name))
            lines.append(f"  The code under test, {fn.name} in {tree.source(rel, fn)}")
            if note := _default_decides(callers, fn):
                lines.append(note)
            if not _returns_value(fn) and not fn.name.startswith("__"):
                # the 1.5B's parse_cents computed `cents = ...` and ended there: "None != 123", five times
                lines.append(f"  {fn.name} has no `return` with a value, so a call of it gives None.")
        parts.append("\n".join(lines))
    if not parts:
        return ""
    return ("\n\nWhat failed, read from the output above (the tests say what the code must do: change the code, not "
            "the tests):\n" + "\n".join(parts))
