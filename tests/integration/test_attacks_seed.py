"""The seed store the agent's clone borrows its objects from (runner.adapters.sandbox.agent_clone.seed_store):
the agent reads it and writes nothing in it, and pointing its own alternates at the judge's repository
reaches nothing of the judge's (SPEC 4b, 1 and 3). Same arena and checks as tests/integration/test_attacks.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.attack_world import arena  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


def test_the_agent_writes_nothing_in_the_seed_store_and_reads_nothing_of_the_judge_through_alternates(arena):
    a = arena("seed_store")
    run = a.session()
    report = (a.loot / "seed-report").read_text().splitlines()
    borrowed = [line.split()[1:] for line in report if line.startswith("BORROWS ")][0]
    stores = [Path(p).parent for p in borrowed if "/seeds/" in p]
    assert stores, report  # the clone borrows the judge's store (not the judge's own .git)
    assert not [line for line in report if line.startswith(("WROTE", "READ"))], report
    assert sum(line.startswith("DENIED") for line in report) >= 6, report
    store = stores[0]
    st = os.lstat(store)
    assert st.st_uid == os.geteuid() and not st.st_mode & 0o022
    assert "fsmonitor" not in (store / "config").read_text()
    assert not (store / "refs/heads/evil").exists() and not (store / "objects/info/alternates").exists()
    assert not (store / "hooks/reference-transaction").exists()
    fsck = subprocess.run(["git", "fsck", "--connectivity-only", "--no-dangling"], cwd=store, capture_output=True,
                          text=True)
    assert fsck.returncode == 0, fsck.stderr[-2000:]
    assert not (a.loot / "judge-config").exists()
    assert not (a.repo / ".git/objects/info/alternates").exists()
    assert run.outcome == "Advanced", run.out
    a.assert_all_well(run)
