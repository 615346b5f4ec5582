"""The core pinned at its boundaries: examples and oracle properties that kill the mutants of
runner/outcome.py and runner/policy.py (see `python -m benchmarks.mutation` and docs/reliability.md)."""

from __future__ import annotations

import pytest

from runner.policy import RunState


def test_evolve_rejects_a_misspelt_field():
    """Evolving frozen state with a field it does not have is an error naming the field, not a silent no-op."""
    with pytest.raises(TypeError, match="no field.*sesions"):
        RunState().evolve(sesions=3)
    assert RunState().evolve(sessions=3).sessions == 3
