"""A bounded mutation check of the pure core: `python -m benchmarks.mutation`.

Each mutant changes one operator, constant, condition, keyword argument or statement of
`runner/core/outcome.py` or `runner/core/policy.py` (never text: reason strings and docstrings are not
behaviour). The core's tests run against every mutant in a forked child (the libraries are
imported once, in the parent); a mutant is killed when a test fails. A surviving mutant either
appears in EQUIVALENT below, with why no test can tell it from the original, or fails the check.

Exit status 0 when every non-equivalent mutant is killed; 1 otherwise (the survivors are listed).
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("runner/core/outcome.py", "runner/core/policy.py")
# The tests run against each module's mutants, fastest killers first (pytest stops at the first failure).
TESTS = {
    "runner/core/outcome.py": ("tests/unit/test_outcome.py", "tests/unit/test_core_pinned.py", "tests/unit/test_outcome_golden.py",
                          "tests/unit/test_core_properties.py"),
    "runner/core/policy.py": ("tests/unit/test_policy.py", "tests/unit/test_core_pinned.py", "tests/unit/test_core_properties.py"),
}

# Mutants no test can kill because the program behaves the same; key -> why.
# A key is `module:function:original -> replacement` (see Mutant.key).
EQUIVALENT: dict[str, str] = {
    'runner.core.policy:RunState:discriminator="action" -> (drop discriminator=)':
        "RunState is folded, never validated from data: `pending` only ever receives an action object already built "
        "(through `evolve`, which does not validate), so the union's discriminator is never consulted",
    "runner.core.outcome:match:return [] -> return None":
        "a rule's matcher returns its reasons; `classify` tests them for truth only, and [] and None are both false",
    "runner.core.outcome:_agent_error:return [] -> return None":
        "as above: the no-match value of a matcher is only tested for truth",
    "runner.core.outcome:_rolled_over:return [] -> return None":
        "as above: the no-match value of a matcher is only tested for truth",
    "runner.core.policy:_resume:instructions=s.state.instructions -> (drop instructions=)":
        "(the resume after a stall) unreachable through `fold`: a stalled or timed-out session is not blamed on the "
        "environment, so folding it clears `instructions`; the resumed agent session still has them in its context",
    "runner.core.policy:decide_after_advice:instructions=state.instructions -> (drop instructions=)":
        "unreachable through `fold`: the advisor is consulted only after a stall or an agent-blamed session, and "
        "folding either clears `instructions`",
    "runner.core.policy:<module>:4 -> 5":
        "FOLD_VERSION, the tag of stored snapshots: the writer and the reader use the same constant, so any value "
        "folds the same; what matters (a snapshot of another version is refolded) is tested against the constant",
    "runner.core.policy:_backoff:20 -> 21":
        "the exponent's bound only keeps 2 ** n small; the cap is reached long before (5 min x 2^7 > 6 h, "
        "30 s x 2^5 > 10 min), so any bound above 7 gives the same waits",
}


@dataclass(frozen=True)
class Mutant:
    module: str  # "runner.core.outcome"
    function: str  # enclosing def or class, "<module>" at the top level
    line: int
    original: str
    replacement: str
    index: int  # the n-th mutation site of the module

    @property
    def key(self) -> str:
        return f"{self.module}:{self.function}:{self.original} -> {self.replacement}"


_SWAP_CMP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
             ast.GtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
             ast.BitOr: ast.Sub, ast.BitAnd: ast.BitOr, ast.Mod: ast.Mult}


def _is_docstring(node: ast.AST, parent: ast.AST | None) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))


class _Sites(ast.NodeTransformer):
    """Walks a module; with `apply=None` it lists the mutation sites, with `apply=n` it makes mutation n."""

    def __init__(self, source: str, module: str, apply: int | None = None) -> None:
        self.source, self.module, self.apply = source, module, apply
        self.sites: list[Mutant] = []
        self.count = 0
        self.lines = source.splitlines(keepends=True)
        self.scope = ["<module>"]
        self.done = False

    # --- bookkeeping -------------------------------------------------------------------------
    def _site(self, node: ast.AST, replacement: ast.AST | str, make, keep: ast.AST | None = None) -> ast.AST:
        """Record a site at `node`; return the mutation when it is the one to apply, else `keep` (default `node`)."""
        n = self.count
        self.count += 1
        if self.apply is None:  # listing: each site's text (two unparses; making one mutant needs none of them)
            original = self._segment(node) or ast.unparse(node)
            text = replacement if isinstance(replacement, str) else ast.unparse(replacement)
            self.sites.append(Mutant(self.module, self.scope[-1], getattr(node, "lineno", 0),
                                     " ".join(original.split()), text, n))
        if self.apply == n:
            self.done = True
            return make()
        return node if keep is None else keep

    def _segment(self, node: ast.AST) -> str | None:
        """The node's source text (`ast.get_source_segment` splits the whole file on every call)."""
        if getattr(node, "end_lineno", None) is None:
            return None
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return self.lines[first].encode()[node.col_offset:node.end_col_offset].decode()
        parts = [self.lines[first].encode()[node.col_offset:].decode(), *self.lines[first + 1:last],
                 self.lines[last].encode()[:node.end_col_offset].decode()]
        return "".join(parts)

    def _scoped(self, node):  # the body only: decorators and signatures are not behaviour of the table
        self.scope.append(node.name)
        node.body = [self.visit(s) for s in node.body]
        self.scope.pop()
        return node

    visit_FunctionDef = visit_ClassDef = _scoped

    # --- what is not behaviour -----------------------------------------------------------------
    def visit_Expr(self, node: ast.Expr):
        if _is_docstring(node, None):
            return node
        node = self.generic_visit(node)
        return self._site(node, "pass", lambda: ast.Pass())

    def visit_JoinedStr(self, node):  # text only
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_arguments(self, node):  # annotations and defaults of signatures: leave alone
        return node

    def visit_Assert(self, node):
        return node

    def visit_Raise(self, node):
        return node

    # --- operators ----------------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare):
        node = self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swapped = _SWAP_CMP.get(type(op))
            if swapped is None:
                continue
            def make(i=i, swapped=swapped):
                new = copy.deepcopy(node)
                new.ops[i] = swapped()
                return new
            node = self._site(node, make(), make)
        return node

    def visit_BoolOp(self, node: ast.BoolOp):
        node = self.generic_visit(node)
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        def make():
            return ast.BoolOp(op=other(), values=node.values)
        return self._site(node, make(), make)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return self._site(node, node.operand, lambda: node.operand)
        return node

    def visit_BinOp(self, node: ast.BinOp):
        node = self.generic_visit(node)
        swapped = _SWAP_BIN.get(type(node.op))
        if swapped is None:
            return node
        def make():
            return ast.BinOp(left=node.left, op=swapped(), right=node.right)
        return self._site(node, make(), make)

    def visit_Constant(self, node: ast.Constant):
        v = node.value
        if isinstance(v, bool):
            new = ast.Constant(not v)
        elif isinstance(v, (int, float)):
            new = ast.Constant(v + 1)
        elif v is None:
            return node
        else:
            return node  # text
        return self._site(node, new, lambda: new)

    def visit_IfExp(self, node: ast.IfExp):
        node = self.generic_visit(node)
        def make():
            return ast.IfExp(test=node.test, body=node.orelse, orelse=node.body)
        return self._site(node, make(), make)

    def visit_If(self, node: ast.If):
        node.test = self.visit(node.test)
        node.body = [self.visit(s) for s in node.body]
        node.orelse = [self.visit(s) for s in node.orelse]
        def make():
            new = copy.copy(node)
            new.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
            return new
        return self._site(node.test, "not (...)", make, keep=node)

    def visit_Return(self, node: ast.Return):
        node = self.generic_visit(node)
        if node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None):
            return node
        return self._site(node, "return None", lambda: ast.Return(value=ast.Constant(None)))

    def visit_Call(self, node: ast.Call):
        node = self.generic_visit(node)
        for i, kw in enumerate(node.keywords):
            if kw.arg is None:
                continue
            def make(i=i):
                new = copy.copy(node)
                new.keywords = node.keywords[:i] + node.keywords[i + 1:]
                return new
            node = self._site(kw, f"(drop {kw.arg}=)", make, keep=node)
        return node

    def visit_AugAssign(self, node: ast.AugAssign):
        node = self.generic_visit(node)
        return self._site(node, "pass", lambda: ast.Pass())


def mutants(path: str) -> list[Mutant]:
    source = (ROOT / path).read_text()
    module = path.removesuffix(".py").replace("/", ".")
    sites = _Sites(source, module)
    sites.visit(ast.parse(source))
    return sites.sites


def mutated_source(path: str, index: int) -> str:
    source = (ROOT / path).read_text()
    module = path.removesuffix(".py").replace("/", ".")
    sites = _Sites(source, module, apply=index)
    tree = ast.fix_missing_locations(sites.visit(ast.parse(source)))
    assert sites.done, f"no mutation site {index} in {path}"
    text = ast.unparse(tree)
    compile(text, path, "exec")  # a mutant that does not compile is a bug of the mutator, never a kill
    return text


# --- running ----------------------------------------------------------------------------------


def _child(path: str, index: int | None, tests: tuple[str, ...]) -> None:
    """In a forked child: install the mutant (or the original) as the module, run the tests, exit."""
    import types

    from hypothesis import settings

    settings.register_profile("mutation", derandomize=True, database=None, deadline=None)
    settings.load_profile("mutation")
    module = path.removesuffix(".py").replace("/", ".")
    source = (ROOT / path).read_text() if index is None else mutated_source(path, index)
    mod = types.ModuleType(module)
    mod.__file__ = str(ROOT / path)
    sys.modules[module] = mod
    import runner
    setattr(runner, module.rsplit(".", 1)[1], mod)
    if not os.environ.get("MUTATION_VERBOSE"):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    try:
        exec(compile(source, str(ROOT / path), "exec"), mod.__dict__)  # a mutant that cannot load is killed
        code = 0 if _run_tests(tests) else 1
    except BaseException:  # noqa: BLE001 - any failure of any test kills the mutant
        if os.environ.get("MUTATION_VERBOSE"):
            import traceback
            traceback.print_exc()
        code = 1
    os._exit(int(code))


def _run_tests(tests: tuple[str, ...]) -> bool:
    """Call every test function of the files in order (no pytest start-up per mutant: this is what makes the check
    affordable). Hypothesis tests run as they are; `parametrize` runs each case; a test that needs a fixture is not
    one of the core's (they are pure) and is refused. Raises at the first failing test."""
    import importlib
    import inspect

    functions = [(test, name, fn) for test in tests
                 for name, fn in list(vars(importlib.import_module(Path(test).stem)).items())
                 if name.startswith("test_") and callable(fn)]
    # examples first, properties (hypothesis) last: most mutants die on an example, in a fraction of the time
    functions.sort(key=lambda t: hasattr(t[2], "hypothesis"))
    for test, name, fn in functions:
        cases = [((), {})]
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "parametrize":
                names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else mark.args[0]
                values = mark.args[1]
                cases = [((), dict(zip(names, v if len(names) > 1 else (v,)))) for v in values]
        if cases == [((), {})] and inspect.signature(fn).parameters:
            raise SystemExit(f"{test}::{name} needs a fixture; the mutation check cannot run it")
        for args, kwargs in cases:
            fn(*args, **kwargs)
    return True


def _start(path: str, index: int | None, tests: tuple[str, ...]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            _child(path, index, tests)
        finally:
            os._exit(3)
    return pid


def run(targets: tuple[str, ...], tests: dict[str, tuple[str, ...]], jobs: int, timeout_s: float,
        limit: int | None, progress: bool = False, keys: set[str] | None = None) -> tuple[list[tuple[Mutant, str]], float]:
    """(mutant, result) for every mutant; result is killed, survived or timeout."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "unit")]  # the tests are imported by name
    os.chdir(ROOT)
    import hypothesis  # noqa: F401 - imported once, before forking
    import pydantic  # noqa: F401
    import pytest  # noqa: F401

    import runner.core.actions, runner.core.evidence, runner.core.ledger, runner.core.plan  # noqa: E401,F401
    assert not any(t.removesuffix(".py").replace("/", ".") in sys.modules for t in targets)
    for path in targets:  # the original must pass, or every mutant would look killed
        pid = _start(path, None, tests[path])
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the tests fail on the unmutated {path}; fix them first "
                             f"(pytest {' '.join(tests[path])})")
    per_target = [[(path, m) for m in mutants(path) if keys is None or m.key in keys] for path in targets]
    # interleaved, so a run cut short (or --limit) has looked at every module
    todo = [pm for group in zip_longest(*per_target) for pm in group if pm is not None][:limit]
    total = len(todo)
    results: list[tuple[Mutant, str]] = []
    running: dict[int, tuple[Mutant, float]] = {}
    started = time.monotonic()
    while todo or running:
        while todo and len(running) < jobs:
            path, m = todo.pop(0)
            running[_start(path, m.index, tests[path])] = (m, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for p, (m, t0) in list(running.items()):
                if time.monotonic() - t0 > timeout_s:
                    os.kill(p, signal.SIGKILL)
            select.select([], [], [], 0.02)
            continue
        m, _ = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        results.append((m, "timeout" if code == -signal.SIGKILL else "killed" if code != 0 else "survived"))
        if progress:
            print(f"[{len(results)}/{total}] {results[-1][1]:8} {m.module}:{m.line}: {m.key}", file=sys.stderr, flush=True)
    return sorted(results, key=lambda r: (r[0].module, r[0].index)), time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant before it counts as killed")
    parser.add_argument("--limit", type=int, default=None, help="test only the first N mutants (a quick look)")
    parser.add_argument("--target", action="append", help="module file to mutate (default: outcome.py and policy.py)")
    parser.add_argument("--list", action="store_true", help="list the mutants without running them")
    parser.add_argument("--progress", action="store_true", help="print each mutant's result as it comes (stderr)")
    parser.add_argument("--keys", type=argparse.FileType(), help="test only the mutants whose keys are listed, one a line "
                        "(e.g. the SURVIVED lines of an earlier run)")
    args = parser.parse_args(argv)
    targets = tuple(args.target or TARGETS)
    if args.list:
        for path in targets:
            for m in mutants(path):
                print(f"{m.module}:{m.line}: {m.key}")
        return 0
    keys = None
    if args.keys:
        keys = {line.split(": ", 1)[1].strip() if line.startswith("SURVIVED ") else line.strip()
                for line in args.keys if line.strip()}
    results, elapsed = run(targets, TESTS, args.jobs, args.timeout, args.limit, args.progress, keys)
    survived = [m for m, r in results if r == "survived"]
    equivalent = [m for m in survived if m.key in EQUIVALENT]
    unexplained = [m for m in survived if m.key not in EQUIVALENT]
    killed = sum(r != "survived" for _, r in results)
    behavioural = len(results) - len(equivalent)
    for path in targets:
        mod = path.removesuffix(".py").replace("/", ".")
        rows = [(m, r) for m, r in results if m.module == mod]
        k = sum(r != "survived" for _, r in rows)
        e = sum(m.key in EQUIVALENT for m, r in rows if r == "survived")
        print(f"{path}: {len(rows)} mutants, {k} killed, {e} equivalent, {len(rows) - k - e} surviving")
    rate = 100.0 * killed / behavioural if behavioural else 100.0
    print(f"behavioural kill rate: {killed}/{behavioural} = {rate:.1f} % "
          f"({len(equivalent)} equivalent mutants excluded; {elapsed:.0f} s)")
    complete = args.limit is None and not args.target and keys is None
    stale = sorted(set(EQUIVALENT) - {m.key for m, _ in results}) if complete else []
    for key in stale:
        print(f"stale EQUIVALENT entry (no such mutant any more): {key}")
    for m in unexplained:
        print(f"SURVIVED {m.module}:{m.line}: {m.key}")
    return 1 if unexplained or stale else 0


if __name__ == "__main__":
    sys.exit(main())
