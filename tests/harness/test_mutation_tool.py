"""The mutation check's own mutator: one real change per mutant, never in text, every mutant compiles."""

from __future__ import annotations

import ast

from benchmarks.mutation import EQUIVALENT, ROOT, TARGETS, TESTS, mutants, mutated_source


def _strings(tree: ast.AST) -> list[str]:
    return sorted(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def test_every_mutant_compiles_changes_the_code_and_leaves_text_alone():
    """Each mutant of outcome.py and policy.py parses, differs from the original, and keeps every string."""
    for path in TARGETS:
        original = ast.parse((ROOT / path).read_text())
        shape, strings = ast.dump(original), _strings(original)  # once: a dump is most of a mutant's check
        sites = mutants(path)
        assert len(sites) > 100 and len({m.key for m in sites}) >= len(sites) * 0.8
        for m in sites:
            tree = ast.parse(mutated_source(path, m.index))
            assert ast.dump(tree) != shape, m.key
            assert _strings(tree) == strings or m.replacement in ("pass", "return None") \
                or m.replacement.startswith("(drop"), m.key


def test_the_check_runs_each_modules_own_tests_and_lists_equivalents_with_reasons():
    """Both core modules have their test files listed; every equivalent mutant carries a reason."""
    assert set(TESTS) == set(TARGETS) and all(TESTS[t] for t in TARGETS)
    assert all(reason.strip() for reason in EQUIVALENT.values())
