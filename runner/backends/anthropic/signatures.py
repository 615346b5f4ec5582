"""What a change to a Python file does to the calls the tests make: for the built-in agent's write_file and edit_file.

Small models asked for new behaviour reach for the signature: the 1.5B, asked to make `total` skip missing values,
gave it a `skip_missing` parameter that no test passes (the gate stayed red, sessions long); asked to add
`parse_cents`, it wrote a second `dollars`. Both are visible the moment the file is written, next to the test's own
call: a parameter added to a function the tests call, which none of their calls passes, and a function defined
twice. This names them; the tool decides what to do with it (runner.backends.anthropic.tools).

Pure but for reading the work tree's test files; never raises (what cannot be read says nothing).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from runner.backends.anthropic.failures import _SKIP_PARTS, _is_test, called_name

MAX_TEST_FILES = 200
MAX_TEST_BYTES = 200_000
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Call:
    """One call of a function in a test file: where, the line as written, and what it passes."""

    path: str
    line: int
    text: str
    positional: int
    keywords: frozenset[str]
    open_ended: bool  # `*args` or `**kwargs`: any parameter may be passed


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _top_functions(tree: ast.Module) -> dict[str, FunctionNode]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _params(fn: FunctionNode) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def _signature(fn: FunctionNode) -> str:
    return ast.unparse(fn.args)


def test_calls(root: Path, name: str, limit: int = 3) -> list[Call]:
    """The calls of `name` (as `name(...)` or `something.name(...)`) in the work tree's test files."""
    found: list[Call] = []
    seen = 0
    for path in sorted(root.rglob("*.py")):
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if any(part in _SKIP_PARTS or part.startswith(".") for part in rel.parts[:-1]) or not _is_test(rel.as_posix()):
            continue
        seen += 1
        if seen > MAX_TEST_FILES:
            break
        try:
            text = path.read_text(encoding="utf-8", errors="replace")[:MAX_TEST_BYTES]
        except OSError:
            continue
        if name not in text:
            continue
        tree = _parse(text)
        if tree is None:
            continue
        lines = text.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if called_name(node) != name:
                continue
            open_ended = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            line = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
            found.append(Call(rel.as_posix(), node.lineno, line, len(node.args),
                              frozenset(k.arg for k in node.keywords if k.arg), open_ended))
    found.sort(key=lambda c: (c.path, c.line))
    return found[:limit] if limit else found


def _passes(call: Call, fn: FunctionNode, param: str) -> bool:
    """Whether `call` may pass `param` of `fn` (by keyword, by position, or through `*args`/`**kwargs`)."""
    if call.open_ended or param in call.keywords:
        return True
    positional = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args)]
    return param in positional and positional.index(param) < call.positional


def _body(fn: FunctionNode) -> str:
    """What a function does: its body without the docstring, as the AST reads it (layout and comments aside)."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return "\n".join(ast.dump(node) for node in body)


def unused_parameters(root: Path, rel: str, before: str, after: str, task: str = "") -> str:
    """A sentence per function of `rel` the tests call that gained a parameter none of their calls passes and the
    `task` text does not name, while its body does what it did, or "". A body that changes too is the work (the 1.5B,
    told the first time, wrote `total(values, skip_missing=False)` summing the values that are not None: refused, it
    went back to the old body); only the signature alone changes nothing the tests check."""
    old_tree, new_tree = _parse(before), _parse(after)
    if old_tree is None or new_tree is None:
        return ""
    old, new = _top_functions(old_tree), _top_functions(new_tree)
    notes = []
    for name, fn in new.items():
        if name not in old:
            continue
        added = [p for p in _params(fn) if p not in _params(old[name]) and not re.search(rf"\b{re.escape(p)}\b", task)]
        if not added or _body(fn) != _body(old[name]):
            continue
        calls = test_calls(root, name, limit=0)
        if not calls or any(_passes(c, fn, p) for c in calls for p in added):
            continue
        shown = "; ".join(f"{c.path} line {c.line}: `{c.text}`" for c in calls[:3])
        was = old[name]
        lines = before.splitlines()
        body = "\n".join(f"{n:4d}  {lines[n - 1]}" for n in range(was.lineno, (was.end_lineno or was.lineno) + 1)
                         if n <= len(lines))
        notes.append(f"`{name}` would take {', '.join(repr(p) for p in added)}, which no test passes: the tests call "
                     f"it as before ({shown}), so a new parameter cannot change what they check. Keep "
                     f"`def {name}({_signature(was)}):` and change a line of its body (edit_file, old_string: that "
                     f"line as it is now) to do what the task asks. It reads now:\n{body}")
    return "\n".join(notes)


def duplicates(root: Path, rel: str, before: str, after: str, focus: str = "") -> str:
    """A sentence naming each top-level function `after` defines more than once where `before` did not, or "".
    The names the tests want that `focus` (the checkpoint at hand) mentions are the only ones named, if any is."""
    old_tree, new_tree = _parse(before), _parse(after)
    if new_tree is None:
        return ""
    lines: dict[str, list[int]] = {}
    for n in new_tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.decorator_list:  # not an @overload
            lines.setdefault(n.name, []).append(n.lineno)
    old_counts: dict[str, int] = {}
    for n in (old_tree.body if old_tree is not None else ()):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.decorator_list:
            old_counts[n.name] = old_counts.get(n.name, 0) + 1
    twice = {name: at for name, at in lines.items() if len(at) > 1 and len(at) > old_counts.get(name, 0)}
    if not twice:
        return ""
    named = "; ".join(f"`{name}` on lines {', '.join(str(n) for n in at)}" for name, at in twice.items())
    first = next(iter(twice))
    wanted = wanted_by_tests(root, rel, after, limit=0)
    wanted = [w for w in wanted if re.search(rf"\b{re.escape(w[0])}\b", focus)] or wanted[:3]
    asked = ("; the tests use " + ", ".join(f"`{name}` ({path} line {line})" for name, path, line in wanted)
             + f", which {rel} does not define yet") if wanted else ""
    return (f"{rel} would define the same function more than once ({named}): Python keeps only the last one. To "
            f"change `{first}`, edit the one that is there (line {twice[first][0]}) instead of adding another; a new "
            f"function needs a new name, the one the task asks for{asked}.")


def redefined(before: str, after: str, focus: str) -> tuple[str, list[tuple[str, int]]]:
    """`after` with the old definition taken out of each function it defines twice where one of the two is the
    definition `before` had and the other is new, for the functions the checkpoint at hand (`focus`) names; and per
    such function (its name, the line `before` had it on). `(after, [])` when there is none.

    Python keeps the last of two definitions, and the 1.5B, asked for `parse_cents`, added its next try as a second
    `parse_cents` at the end every time (refused, it wrote the file with `parse_cents` alone, refused again, and
    never made the one-line edit of the definition that was there): the new definition is the change it means. A
    function the checkpoint does not name (a second `dollars` when `parse_cents` was asked for) is left to
    `duplicates`, as are two new definitions, a name defined twice before, and a decorated one (an @overload)."""
    old_tree, new_tree = _parse(before), _parse(after)
    if old_tree is None or new_tree is None or not focus:
        return after, []
    olds: dict[str, list[FunctionNode]] = {}
    news: dict[str, list[FunctionNode]] = {}
    for tree, into in ((old_tree, olds), (new_tree, news)):
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.decorator_list:
                into.setdefault(n.name, []).append(n)
    taken: list[tuple[str, FunctionNode, int]] = []
    for name, nodes in news.items():
        was = olds.get(name, [])
        if len(nodes) != 2 or len(was) != 1 or not re.search(rf"\b{re.escape(name)}\b", focus):
            continue
        same = [n for n in nodes if ast.dump(n) == ast.dump(was[0])]
        if len(same) == 1:
            taken.append((name, same[0], was[0].lineno))
    if not taken:
        return after, []
    lines = after.splitlines(keepends=True)
    drop: set[int] = set()
    for _, node, _ in taken:
        end = node.end_lineno or node.lineno
        while end < len(lines) and not lines[end].strip():  # the blank lines after it go with it
            end += 1
        drop.update(range(node.lineno - 1, end))
    text = "".join(line for n, line in enumerate(lines) if n not in drop)
    text = text.rstrip("\n") + "\n"
    if _parse(text) is None:
        return after, []
    return text, [(name, line) for name, _, line in taken]


def kept_by_import(rel: str, before: str, after: str) -> tuple[str, list[str]]:
    """`after` with each `from <this module> import a, b` it adds replaced by the definitions of a and b as `before`
    had them, when each is a function or class `before` defined and `after` does not; and the names so kept.
    `(after, [])` otherwise. Asked for parse_cents, the 1.5B wrote moneyfmt.py whole as `from tools.moneyfmt import
    dollars` and a right parse_cents: the import of a name from the module itself means "keep it"."""
    old_tree, new_tree = _parse(before), _parse(after)
    if old_tree is None or new_tree is None or not rel.endswith(".py"):
        return after, []
    module = module_name(rel)
    old_defs = {n.name: n for n in old_tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    new_names = {n.name for n in new_tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    was = {ast.dump(n) for n in old_tree.body if isinstance(n, ast.ImportFrom)}
    imports = [n for n in new_tree.body if isinstance(n, ast.ImportFrom) and n.module == module and not n.level
               and ast.dump(n) not in was]
    if not imports or not all(a.name in old_defs and a.name not in new_names and not a.asname
                              for n in imports for a in n.names):
        return after, []
    old_lines = before.splitlines()
    lines = after.splitlines()
    kept: list[str] = []
    for node in sorted(imports, key=lambda n: n.lineno, reverse=True):
        blocks = []
        for alias in node.names:
            d = old_defs[alias.name]
            start = min([x.lineno for x in d.decorator_list] + [d.lineno])
            blocks.append("\n".join(old_lines[start - 1: d.end_lineno or d.lineno]))
            kept.insert(0, alias.name)
        lines[node.lineno - 1: node.end_lineno or node.lineno] = ("\n\n\n".join(blocks) + "\n").splitlines()
    text = "\n".join(lines) + "\n"
    if _parse(text) is None:
        return after, []
    return text, kept


def self_imports(rel: str, before: str, after: str, focus: str = "") -> str:
    """A sentence when `after` imports from the module `rel` is (`from tools.moneyfmt import parse_cents` in
    tools/moneyfmt.py) where `before` did not, or "". Shown "cannot import name 'parse_cents' from
    'tools.moneyfmt'", the 1.5B added the test's import line to the module itself, and then again with more names:
    a name the module does not define cannot come from the module."""
    new_tree = _parse(after)
    if new_tree is None or not rel.endswith(".py"):
        return ""
    module = module_name(rel)

    def own(tree: ast.Module | None) -> list[ast.stmt]:
        found: list[ast.stmt] = []
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.ImportFrom) and node.module == module and not node.level:
                found.append(node)
            elif isinstance(node, ast.Import) and any(a.name == module for a in node.names):
                found.append(node)
        return found

    was = {ast.dump(n) for n in own(_parse(before))}
    added = [n for n in own(new_tree) if ast.dump(n) not in was]
    if not added:
        return ""
    lines = after.splitlines()
    first = added[0]
    text = lines[first.lineno - 1].strip() if 0 < first.lineno <= len(lines) else ast.unparse(first)
    defined = {n.name for n in new_tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    old_tree = _parse(before)
    had = {n.name for n in (old_tree.body if old_tree is not None else ())
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    named = [a.name for n in added if isinstance(n, ast.ImportFrom) for a in n.names if a.name not in defined]
    missing = [name for name in dict.fromkeys(named) if name not in had]
    keep = [name for name in dict.fromkeys(named) if name in had]
    # the checkpoint's own words give the signature (`Add parse_cents(text): ...`); a template with `...` in it the
    # 1.5B copied as it was, `def parse_cents(...):`, a syntax error
    given = re.search(rf"\b{re.escape(missing[0])}\(([\w\s,=*]*)\)", focus) if missing else None
    todo = ""
    if missing:
        how = (f"`def {missing[0]}({given.group(1).strip()}):` and its body" if given else
               f"the whole function, its `def {missing[0]}` line with the parameters the tests pass, and its body")
        todo = (f" To add {', '.join(missing)}, define it in {rel}: edit_file with an empty old_string and new_string "
                f"{how} (it goes at the end).")
    todo += (f" {', '.join(keep)}: {rel} defines {'it' if len(keep) == 1 else 'them'} already; keep "
             f"{'it' if len(keep) == 1 else 'them'} as {'it is' if len(keep) == 1 else 'they are'}." if keep else "")
    return (f"{rel} would import from itself (line {first.lineno}: `{text}`): a module cannot take a name from "
            f"itself, so what the tests import from {rel} must be defined in it.{todo}")


def module_name(rel: str) -> str:
    dotted = rel[:-3].replace("/", ".") if rel.endswith(".py") else rel.replace("/", ".")
    return dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted


def wanted_by_tests(root: Path, rel: str, text: str, limit: int = 3) -> list[tuple[str, str, int]]:
    """The names the work tree's test files take from the module `rel` (`from m import f`, `m.f`) that `text` does
    not define at its top level: (name, test file, line), first use each."""
    tree = _parse(text)
    if tree is None:
        return []
    defined: set[str] = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in n.names)
    module = module_name(rel)
    found: dict[str, tuple[str, str, int]] = {}
    seen = 0
    for path in sorted(root.rglob("*.py")):
        rel_test = path.relative_to(root)
        if any(p in _SKIP_PARTS or p.startswith(".") for p in rel_test.parts[:-1]) or not _is_test(rel_test.as_posix()):
            continue
        seen += 1
        if seen > MAX_TEST_FILES:
            break
        try:
            source = path.read_text(encoding="utf-8", errors="replace")[:MAX_TEST_BYTES]
        except OSError:
            continue
        if module.rsplit(".", 1)[-1] not in source:
            continue
        test_tree = _parse(source)
        if test_tree is None:
            continue
        aliases: set[str] = set()
        for node in ast.walk(test_tree):
            if isinstance(node, ast.ImportFrom) and node.module == module and not node.level:
                for a in node.names:
                    if a.name != "*" and a.name not in defined:
                        found.setdefault(a.name, (a.name, rel_test.as_posix(), node.lineno))
            elif isinstance(node, ast.Import):
                aliases.update(a.asname or a.name for a in node.names if a.name == module)
        if aliases:
            for node in ast.walk(test_tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                        and node.attr not in defined):
                    found.setdefault(node.attr, (node.attr, rel_test.as_posix(), node.lineno))
    ordered = sorted(found.values(), key=lambda f: (f[1], f[2]))
    return ordered[:limit] if limit else ordered


def return_replaced(rel: str, text: str, new_string: str) -> tuple[str, int, str, str] | None:
    """For a single indented `return` line added at the end of a Python file whose last function ends with a
    `return`: the text with that return replaced by the new one (indented as the old), the line, the function's
    name and the old return as written; else None. A line after a function's final `return` would never run, so
    the return it brings is the one meant: the 1.5B added `    return int(text.replace('.', '')) * 100` at the end
    of moneyfmt.py, meaning parse_cents's `return int(text) * 100`, in two rounds; refused, it wrote the whole file
    as that one line."""
    added = [line for line in new_string.splitlines() if line.strip()]
    if not rel.endswith(".py") or len(added) != 1 or not added[0][:1].isspace():
        return None
    tree = _parse(text)
    new_return = _parse(added[0].strip())
    last = tree.body[-1] if tree is not None and tree.body else None
    if (not isinstance(last, (ast.FunctionDef, ast.AsyncFunctionDef)) or not isinstance(last.body[-1], ast.Return)
            or new_return is None or len(new_return.body) != 1 or not isinstance(new_return.body[0], ast.Return)):
        return None
    final = last.body[-1]
    lines = text.splitlines(keepends=True)
    first = lines[final.lineno - 1]
    if final.lineno == last.lineno or not first.lstrip().startswith("return"):  # `def f(): return 1`, `x; return 1`
        return None
    indent = first[: len(first) - len(first.lstrip())]
    old = "".join(lines[final.lineno - 1: final.end_lineno or final.lineno]).strip()
    if old == added[0].strip():
        return None
    result = "".join([*lines[: final.lineno - 1], indent + added[0].strip() + "\n", *lines[final.end_lineno or final.lineno:]])
    if _parse(result) is None:
        return None
    return result, final.lineno, last.name, old


def indented_append(rel: str, text: str, new_string: str) -> str:
    """Why indented code added at the end of a Python file that ends with a function would go into that function's
    body after everything it does, with the function shown; "" otherwise (a method after a class is fine). The
    1.5B added `    return int(text.replace('.', '')) * 100` at the end, again and again, meaning to change
    `parse_cents`'s return line: each time a change, each time dead code."""
    first = next((line for line in new_string.splitlines() if line.strip()), "")
    if not rel.endswith(".py") or not first[:1].isspace():
        return ""
    tree = _parse(text)
    last = tree.body[-1] if tree is not None and tree.body else None
    if not isinstance(last, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ""
    lines = text.splitlines()
    end = last.end_lineno or last.lineno
    shown = "\n".join(f"{n:4d}  {lines[n - 1]}" for n in range(last.lineno, end + 1) if n <= len(lines))
    final = lines[end - 1].strip() if 0 < end <= len(lines) else ""
    return (f"new_string is indented, so at the end of {rel} it would go inside `{last.name}`, after its last line "
            f"(line {end}: `{final}`), which runs first. To change a line of `{last.name}`, call edit_file with "
            f"old_string that line as it is now and new_string the line changed. `{last.name}` reads:\n{shown}")
