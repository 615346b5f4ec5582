"""A parameter no test passes is refused only while the function's body stays as it was
(runner.backends.anthropic.signatures.unused_parameters).

On red-first the 1.5B, after a named loop, wrote `total(values, skip_missing=False)` whose body summed the values
that are not None: the fix of `total`, refused for the parameter, and it went back to the old body (docs/real-model.md,
issue 47, fourth round). A signature alone changes nothing the tests check; a body that changes is the work, and the
gate judges it. The docstring and the layout are not the body.
"""

from __future__ import annotations

from pathlib import Path

from runner.backends.anthropic.signatures import unused_parameters

REPORT = 'def total(values):\n    """The sum, None skipped."""\n    return sum(values)\n'
TEST = "from report import total\n\n\ndef test_total():\n    assert total([1, None, 2]) == 3\n"


def _root(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_report.py").write_text(TEST)
    return tmp_path


def test_a_new_parameter_with_the_body_unchanged_is_named(tmp_path: Path) -> None:
    same = 'def total(values, skip_missing=False):\n    """The sum, None\n    skipped."""\n\n    return sum( values )\n'
    found = unused_parameters(_root(tmp_path), "report.py", REPORT, same)
    assert found.startswith("`total` would take 'skip_missing', which no test passes")


def test_a_new_parameter_with_a_new_body_is_the_work(tmp_path: Path) -> None:
    fixed = ('def total(values, skip_missing=False):\n    """The sum, None skipped."""\n'
             "    return sum([x for x in values if x is not None])\n")
    assert unused_parameters(_root(tmp_path), "report.py", REPORT, fixed) == ""
