"""Issue 48, item 5: `plan-runner status`'s "next" was a table column, cut mid-path in a narrow table. Through
the real CLI, piped and narrow: each plan's next action is one whole line below the table."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_first_hour import cli, make_repo

pytestmark = pytest.mark.integration


def test_status_prints_each_plans_next_action_whole(tmp_path):
    repo = make_repo(tmp_path)
    assert cli(repo, "run", "plans/calc.md").returncode == 3  # the first session asks for a human: parked
    wanted = json.loads(cli(repo, "status", "--json").stdout)[0]["next"]
    assert len(wanted) > 40, wanted  # long enough that a column of an 60-character table would cut it
    shown = cli(repo, "status", env={"COLUMNS": "60"})
    assert shown.returncode == 0, shown.stderr
    assert f"calc, next: {wanted}" in (shown.stdout + shown.stderr).splitlines(), shown.stdout + shown.stderr
