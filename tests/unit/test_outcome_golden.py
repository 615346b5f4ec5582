"""Golden cases for the classifier, kept as data (tests/golden/outcomes.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core_builders import evidence, gate, signals
from runner.core.evidence import ExitKind, Flip
from runner.core.outcome import classify

CASES = yaml.safe_load((Path(__file__).parents[1] / "golden" / "outcomes.yaml").read_text())


def build(case: dict):
    kw = {}
    if "commits" in case:
        kw["commits"] = tuple(case["commits"])
    if "gates" in case:
        kw["gates"] = tuple(gate(**g) for g in case["gates"])
    if "flips" in case:
        kw["flips"] = tuple(Flip(**f) for f in case["flips"])
    if "signals" in case:
        s = dict(case["signals"])
        kw["signals"] = signals(ExitKind(s.pop("exit_kind")), **s)
    return evidence(**kw)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_case(case):
    """Each golden case's evidence classifies to its recorded outcome, blame and row."""
    v = classify(build(case))
    want = case["expect"]
    assert (v.outcome.value, v.blame.value, v.rule) == (want["outcome"], want["blame"], want["rule"])
    for key in ("all_failed", "zero_output"):
        if key in want:
            assert getattr(v, key) is want[key]
    if "rejected" in want:
        assert [r.split(":")[0] for r in v.rejected_flips] == want["rejected"]
