"""The set-up cache restored into the gates' read-only base (runner.adapters.judge.base), attacked through the real
CLI: the gates of session 1 (the agent's code) swap the restored venv's python for one that passes everything,
with its times put back. Session 2 must be judged on the set-up the judge restored, not on that python. The swap
lands in the gate's own overlay layer, gone with its process: the base never saw it (the cache stays "in place").
The mechanism alone, and its mutation (the base bound writable): test_attacks_gates_reuse.py."""

from __future__ import annotations

import pytest

from tests.attack_world import CREDITED, arena  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

SETUP = """\
setup:
  run: ["python3 -m venv --without-pip build/venv"]
  cache: [build]
  key: [requirements.txt]
"""


def test_a_gate_that_swaps_the_kept_set_up_reaches_no_later_session(arena):
    a = arena("kept_setup_poison", front_extra=SETUP, files={"requirements.txt": "clean\n"},
              gate="build/venv/bin/python -m unittest discover -s tests -q")
    first = a.session()
    assert (a.loot / "poisoned").exists(), first.out  # the positive control: the swap did happen
    second = a.session()
    a.assert_all_well(second)
    assert second.outcome not in CREDITED, second.out
    assert not any(g["passed"] for g in second.out["gates"] if g["name"] == "tests"), second.out["gates"]
