"""What the code under test computed in a failed assertion, line by line: for the built-in agent's red runs.

A failed `assertEqual(average([1, None, 3]), 2)` says `1.3333333333333333 != 2` and no more; the 1.5B, shown that
and `return total(values) / (len(values) or 1)`, flipped `or 1` and `or 0` four times and never saw that
`len(values)` counts the None (docs/real-model.md, "What the model meant, and the check it skipped"). pytest shows
the parts of a failed `assert`; this shows the parts of the `return` the function under test ran, for the test's
own call: the call is made again by the project's interpreter, in the agent's sandbox like any command of its own,
and the values of the return's parts (its operands, its calls' results) are read in that return's frame.

`probes` is pure (it reads the output and the work tree's files, as the digest does); the tool runs `SCRIPT` with
the interpreter the failed command named and turns its answer into a line with `describe`. Only a call whose
arguments are literals is made (the test's own values, nothing of the test's fixtures), and only after a failure
that is an assertion in the test itself (the code ran to its end and returned).
"""

from __future__ import annotations

import ast
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from runner.backends.anthropic.failures import _failures, _is_test, _Tree, called_name
from runner.backends.anthropic.signatures import module_name

MAX_PARTS = 6
MAX_VALUE = 80
MARK = "plan-runner-probe:"

# Run as `python -c SCRIPT JSON` in the work tree: imports the module, calls the function with the literal
# arguments under a trace that catches the frame of its `return`, and evaluates each part of the return that ran in
# that frame. Prints one line, MARK + JSON: {"line": N, "parts": [[source, repr], ...], "result": repr} or {"error": ...}.
SCRIPT = r"""
import ast, importlib, json, sys
spec = json.loads(sys.argv[1])
sys.path.insert(0, ".")
def short(v):
    text = repr(v)
    return text if len(text) <= %(limit)d else text[:%(limit)d - 3] + "..."
try:
    fn = getattr(importlib.import_module(spec["module"]), spec["function"])
    args = [ast.literal_eval(a) for a in spec["args"]]
    kwargs = {k: ast.literal_eval(v) for k, v in spec["kwargs"].items()}
    seen = {}
    def local(frame, event, arg):
        if event == "return":
            seen["frame"], seen["line"], seen["result"] = frame, frame.f_lineno, arg
        return local
    def trace(frame, event, arg):
        return local if frame.f_code is fn.__code__ and "frame" not in seen else None
    sys.settrace(trace)
    try:
        fn(*args, **kwargs)
    finally:
        sys.settrace(None)
    frame = seen["frame"]
    parts = []
    for source in spec["returns"].get(str(seen["line"]), []):
        try:
            parts.append([source, short(eval(source, frame.f_globals, dict(frame.f_locals)))])
        except Exception as exc:
            parts.append([source, type(exc).__name__])
    print(%(mark)r + json.dumps({"line": seen["line"], "parts": parts, "result": short(seen["result"])}))
except Exception as exc:
    print(%(mark)r + json.dumps({"error": type(exc).__name__}))
""" % {"limit": MAX_VALUE, "mark": MARK}


@dataclass(frozen=True)
class Probe:
    """A call of the test's to make again, and the parts of each `return` of the function to read."""

    call: str  # as the test wrote it: `average([1, None, 3])`
    module: str  # dotted, importable from the work tree's root
    function: str
    args: tuple[str, ...]  # literal sources
    kwargs: tuple[tuple[str, str], ...]
    returns: tuple[tuple[int, str, tuple[str, ...]], ...]  # (line, the return as written, its parts)

    def spec(self) -> str:
        return json.dumps({"module": self.module, "function": self.function, "args": list(self.args),
                           "kwargs": dict(self.kwargs), "returns": {str(n): list(p) for n, _, p in self.returns}})


def _parts(expr: ast.expr) -> list[str]:
    """The parts of a returned expression worth a value: operands and calls, two levels down, no constants."""
    found: list[str] = []
    todo: list[tuple[ast.expr, int]] = [(expr, 0)]
    while todo and len(found) < MAX_PARTS:
        node, depth = todo.pop(0)
        children: list[ast.expr] = []
        if isinstance(node, ast.BinOp):
            children = [node.left, node.right]
        elif isinstance(node, ast.BoolOp):
            children = list(node.values)
        elif isinstance(node, ast.Compare):
            children = [node.left, *node.comparators]
        elif isinstance(node, ast.IfExp):
            children = [node.test, node.body, node.orelse]
        elif isinstance(node, ast.Call):  # a method's object, and the arguments
            children = ([node.func.value] if isinstance(node.func, ast.Attribute) else []) + [
                a for a in node.args if not isinstance(a, ast.Starred)]
        elif isinstance(node, ast.UnaryOp):
            children = [node.operand]
        for child in children:
            if isinstance(child, ast.Constant):
                continue
            source = ast.unparse(child)
            if source not in found and len(found) < MAX_PARTS:
                found.append(source)
            if depth < 1:
                todo.append((child, depth + 1))
    return found


def _returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[int, str, tuple[str, ...]]]:
    found: list[tuple[int, str, tuple[str, ...]]] = []
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            found.append((node.lineno, ast.unparse(node), tuple(_parts(node.value))))
        todo.extend(ast.iter_child_nodes(node))
    return found


def probes(output: str, root: Path) -> list[Probe]:
    """The first failed assertion of `output` whose test line calls a function of the work tree with literal
    arguments, as a Probe; [] when there is none."""
    try:
        return _probes(output, Path(root).resolve())
    except Exception:  # noqa: BLE001 - a hint that cannot be made must never fail the tool call
        return []


def _probes(output: str, root: Path) -> list[Probe]:
    tree = _Tree(root)
    for failure in _failures(output):
        frames = [(rel, line) for printed, line, _ in failure.frames if (rel := tree.rel(printed))]
        if not failure.error.startswith("AssertionError") or not frames or not all(_is_test(r) for r, _ in frames):
            continue
        rel, line = frames[-1]
        try:
            module = ast.parse(tree.line(rel, line))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for call in ast.walk(module):
            if not isinstance(call, ast.Call):
                continue
            name = called_name(call)
            if not name or name.startswith("assert"):
                continue
            try:
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    ast.literal_eval(arg)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
                continue
            for path in tree.code_files():
                parsed = tree.module(path)
                fn = next((f for f in parsed.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and f.name == name), None) if parsed is not None else None
                if fn is None:
                    continue
                returns = _returns(fn)
                if not returns:
                    break
                return [Probe(ast.unparse(call), module_name(path), name, tuple(ast.unparse(a) for a in call.args),
                              tuple((k.arg or "", ast.unparse(k.value)) for k in call.keywords), tuple(returns))]
    return []


def command(python: str, probe: Probe) -> str:
    return f"{shlex.quote(python)} -c {shlex.quote(SCRIPT)} {shlex.quote(probe.spec())}"


def describe(probe: Probe, answer: str) -> str:
    """The line the agent reads, from the script's answer (its output); "" when it says nothing usable."""
    line = next((ln[len(MARK):] for ln in answer.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        return ""
    try:
        found = json.loads(line)
    except ValueError:
        return ""
    if not isinstance(found, dict) or "line" not in found:
        return ""
    ran = next((text for n, text, _ in probe.returns if n == found.get("line")), None)
    if ran is None:
        return ""
    parts = "; ".join(f"{source} = {value}" for source, value in found.get("parts", [])[:MAX_PARTS])
    return (f"\n  In the call {probe.call}, line {found['line']} ran `{ran}`" + (f" with {parts}" if parts else "")
            + f": it returned {found.get('result')}.")
