"""The architecture in the imports: a pure core, adapters to the world, backends, drivers.

Each group is a package of `runner`, so the tree shows the layering and this test enforces it.
Imports anywhere in a module count (also the ones inside functions, which load lazily).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The groups are the packages: `runner.core`, `runner.adapters`, `runner.backends`, `runner.drivers`.
# The package `runner` itself and `python -m runner` put it all together, so they count as drivers.
PACKAGES = ("core", "adapters", "backends", "drivers")
TOP_LEVEL = {"runner", "runner.__main__"}


def _package_of(module: str) -> str | None:
    if module in TOP_LEVEL:
        return "drivers"
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in PACKAGES else None


def _grouped() -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {g: set() for g in PACKAGES}
    for m in _modules():
        if _package_of(m):
            groups[_package_of(m)].add(m)
    return groups


# A group may import its own modules and those of the groups listed here, nothing else.
MAY_IMPORT = {
    "core": {"core"},
    "adapters": {"core", "adapters"},
    "backends": {"core", "adapters", "backends"},
    "drivers": {"core", "adapters", "backends", "drivers"},
}
# Everything outside the project the core may import: the standard library's pure parts and pydantic.
# Plan parsing is pure text-to-record, so PyYAML (a parser) and pathlib's pure paths are allowed too.
# markdown_it (markdown-it-py, pure Python, no I/O) is the CommonMark reading the tracker is checked against, so a
# checkpoint line means the same to plan-runner and to a reader of the rendered plan (runner/core/planfile_commonmark.py).
CORE_LIBRARIES = {"__future__", "collections", "dataclasses", "datetime", "difflib", "enum", "fnmatch", "functools", "hashlib", "ipaddress",
                  "json",
                  "markdown_it", "math", "pathlib", "pydantic", "re", "types", "typing", "urllib", "yaml"}
# Calls that read the clock, the environment or files: never in the core (time is a field of the evidence).
IMPURE_CALLS = {"now", "utcnow", "today", "open", "getenv", "monotonic", "time", "sleep", "read_text", "write_text"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # parsed once per run (every test reads the same tree; parsing it is most of their time)
def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted((ROOT / "runner").rglob("*.py"))}


def _imports(name: str, tree: ast.Module, known: set[str]) -> tuple[set[str], set[str]]:
    """(project modules, outside libraries) the module imports, anywhere in it."""
    inside, outside = set(), set()
    package = name if (ROOT / name.replace(".", "/") / "__init__.py").exists() else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for n in names:
            if n == "runner" or n.startswith("runner."):
                while n not in known:  # `runner.backends.common.base.X` -> the module that holds X
                    n = n.rpartition(".")[0]
                inside.add(n)
            else:
                outside.add(n)
    inside.discard(name)
    return inside, outside


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, tree, known)[0] for name, tree in modules.items()}


def _group(module: str) -> str:
    return _package_of(module) or "none"


def test_every_module_is_in_a_group_package():
    """A module lives in one of the four packages (so the tree shows where it sits), never beside them."""
    stray = sorted(m for m in _modules() if _package_of(m) is None)
    assert stray == [], "move these modules into runner/core, runner/adapters, runner/backends or runner/drivers"
    assert all(_grouped()[g] for g in PACKAGES), "every package holds modules"


def test_groups_import_only_inward():
    """The core imports only the core; adapters no backend or driver; backends no driver."""
    wrong = [f"{m} ({_group(m)}) imports {d} ({_group(d)})"
             for m, deps in _graph().items() for d in sorted(deps) if _group(d) not in MAY_IMPORT[_group(m)]]
    assert wrong == []


def test_group_graph_has_no_cycles():
    """Between groups the imports form a DAG: core <- adapters <- backends <- drivers."""
    edges = {(_group(m), _group(d)) for m, deps in _graph().items() for d in deps if _group(m) != _group(d)}
    order = list(PACKAGES)
    assert all(order.index(a) > order.index(b) for a, b in edges), sorted(edges)


def test_core_imports_only_pure_libraries():
    """The core's outside imports are pure parts of the standard library and pydantic: no git, HTTP, os, time."""
    modules = _modules()
    known = set(modules)
    wrong = [f"{m} imports {lib}" for m in sorted(_grouped()["core"]) for lib in sorted(_imports(m, modules[m], known)[1])
             if lib.split(".")[0] not in CORE_LIBRARIES]
    assert wrong == []


def test_core_reads_no_clock_environment_or_files():
    """No call in the core reads the clock, the environment or a file (`datetime.now`, `open`, `os.getenv`...)."""
    modules = _modules()
    wrong = []
    for m in sorted(_grouped()["core"]):
        for node in ast.walk(modules[m]):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if called in IMPURE_CALLS:
                    wrong.append(f"{m}:{node.lineno} calls {called}()")
    assert wrong == []


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others():
    """No import cycle between modules, lazy imports inside functions included: every module can be read, and
    loaded, after the ones it depends on."""
    assert _cycles(_graph()) == set()


def test_cycle_finder_finds_a_cycle():
    """The cycle check itself works: a three-module loop and a self-contained chain are told apart."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == set()


# The adapters are rooms: a package per part of the world, each importing only the core and the rooms listed here.
# Modules directly in `runner.adapters` are rooms of one module each.
ROOM_MAY_IMPORT = {
    "git": set(),                          # the git evidence and work-branch operations: nothing but the core
    "github": set(),                       # the REST API never runs processes or touches the sandbox
    "render": {"secrets"},                 # text for people is a function of records, secrets redacted
    "store": {"git", "secrets"},           # what it stores is cleared of secrets
    "sandbox": {"git", "netproxy", "secrets"},  # a room starts the allow-list relay inside its namespace
    "judge": {"git", "sandbox"},
    "advisor": set(),
    "plan_io": set(),
    "source": set(),
    "init": {"source"},
    "action_io": {"render", "secrets"},    # masks the agent's credentials in what the job prints
    "secrets": set(),                      # what a secret is, and every redaction of one
    "clock": set(),                        # the wall clock policy reads, and its testing switch
    "netproxy": set(),                     # the sandbox's allow-list proxy and relay: sockets, nothing else
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) >= 3 and parts[1] == "adapters" else None


def test_every_adapter_module_is_in_a_known_room():
    rooms = {_room(m) for m in _grouped()["adapters"]} - {None}
    assert rooms == set(ROOM_MAY_IMPORT), "a new room needs its line in ROOM_MAY_IMPORT"


def test_rooms_import_only_the_rooms_they_may():
    """e.g. github never imports sandbox, render imports only the core."""
    wrong = [f"{m} ({_room(m)}) imports {d} ({_room(d)})"
             for m, deps in _graph().items() if _room(m) for d in sorted(deps)
             if _room(d) and _room(d) != _room(m) and _room(d) not in ROOM_MAY_IMPORT[_room(m)]]
    assert wrong == []


def test_only_the_git_and_store_rooms_import_gitpython():
    """GitPython (and its gitdb) is the git and store rooms' business; every other module asks them."""
    modules = _modules()
    known = set(modules)
    users = sorted(m for m in modules if any(lib.split(".")[0] in {"git", "gitdb"} for lib in _imports(m, modules[m], known)[1]))
    assert all(_room(m) in {"git", "store"} for m in users), users


# The drivers and the backends are rooms too. The command line may start the Actions job (`plan-runner action`)
# and a session; the job starts sessions; the session (its phases, the preflight, the disk reserve) neither.
DRIVER_ROOM_MAY_IMPORT = {
    "cli": {"actions", "session"},
    "actions": {"session"},
    "session": set(),
}
# One package per backend, its parser beside it; what they share is `common`, which imports no backend.
BACKEND_ROOM_MAY_IMPORT = {
    "common": set(),
    "claude_code": {"common"},
    "codex": {"common"},
    "anthropic": {"common"},
    "command": {"common"},
    "script": {"common"},
}
_GROUP_ROOMS = {"drivers": DRIVER_ROOM_MAY_IMPORT, "backends": BACKEND_ROOM_MAY_IMPORT}


def _group_room(module: str) -> tuple[str, str] | None:
    parts = module.split(".")
    return (parts[1], parts[2]) if len(parts) >= 4 and parts[1] in _GROUP_ROOMS else None


def test_every_driver_and_backend_module_is_in_a_room():
    """No module directly in runner/drivers or runner/backends (their `__init__` aside): each is in a room."""
    modules = _modules()
    stray = sorted(m for m in modules if m not in TOP_LEVEL and _package_of(m) in _GROUP_ROOMS and m.count(".") < 3
                   and not (ROOT / m.replace(".", "/") / "__init__.py").exists())
    assert stray == [], "move these modules into a room (runner/drivers/<room>/ or runner/backends/<room>/)"
    rooms = {g: {r for m in modules if (gr := _group_room(m)) and gr[0] == g for r in [gr[1]]} for g in _GROUP_ROOMS}
    assert rooms == {g: set(table) for g, table in _GROUP_ROOMS.items()}, "a new room needs its line in the tables"


def test_driver_and_backend_rooms_import_only_the_rooms_they_may():
    """e.g. a session never imports the command line or the Actions job; one backend never imports another."""
    wrong = [f"{m} imports {d}" for m, deps in _graph().items() if _group_room(m) for d in sorted(deps)
             if _group_room(d) and _group_room(d)[0] == _group_room(m)[0] and _group_room(d) != _group_room(m)
             and _group_room(d)[1] not in _GROUP_ROOMS[_group_room(m)[0]][_group_room(m)[1]]]
    assert wrong == []
