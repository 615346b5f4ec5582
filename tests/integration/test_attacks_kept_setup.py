"""The set-up cache kept in the gates' tree between sessions (agent_clone.KeptSetup), attacked through the real
CLI: the gates of session 1 (the agent's code) swap the restored venv's python for one that passes everything,
with its times put back. Session 2 must be judged on the set-up the judge restored, not on that python.
The gates' tree walk (kept_tree.prune, whose record holds the restored entries too) moves the changed file
aside, and KeptSetup.intact, which in a tree that walk brought back compares the walk's record with the
restore's instead of walking the cache again, refuses it, so the cache is restored again. Where the tree is
made fresh instead, intact's own walk refuses it (tests/integration/test_kept_setup.py pins that walk alone;
test_attacks_gates_reuse.py::test_a_kept_cache_in_a_tree_brought_back_is_judged_by_the_proof_alone, the
comparison with the proof's record and its positive control)."""

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
