"""Suite-wide setup.

Sessions run the agent and the gates in a room of kernel namespaces as the suite's own uid
(runner.adapters.sandbox.identity), which needs no folder opened to other users. Tests that still run something
as another user (the attack worlds' helpers) must reach what a test hands it: pytest makes its temporary folders
private (0700), so each test's `tmp_path` and the folders above it are made searchable (o+x: others may open what
they know the name of, never list it). Nothing is made readable or writable that was not already.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

import tests.hypothesis_profiles  # noqa: F401 (loads the Hypothesis profile PLAN_RUNNER_HYPOTHESIS names)


# GitHub's pacing (0.25 s between calls, 1 s between writes) and backoff waits are for GitHub's sake; against the
# suite's local server they were most of an in-process job's time (tests/integration/test_action_modes.py: 83 s -> 38 s).
# The testing switch keeps the same retries and limits without the waits (RetryPolicy.default, runner/adapters/github/
# api.py), for in-process jobs and the CLI subprocesses that inherit this environment. A test that wants the production
# waits passes its own RetryPolicy (tests/unit/test_github_retry_default.py pins both).
os.environ.setdefault("PLAN_RUNNER_TEST_GITHUB_WAITS", "0")


def _searchable(path: Path, stop: Path) -> None:
    for folder in (path, *path.parents):
        try:
            mode = folder.stat().st_mode
        except OSError:
            return
        if not mode & stat.S_IXOTH:
            os.chmod(folder, stat.S_IMODE(mode) | stat.S_IXOTH)
        if folder == stop or folder == folder.parent:
            return


@pytest.fixture(autouse=True)
def _agent_can_reach_tmp_path(request: pytest.FixtureRequest) -> None:
    if "tmp_path" in request.fixturenames:
        _searchable(request.getfixturevalue("tmp_path"), Path(tempfile.gettempdir()))


def agent_writable(repo: Path, name: str, plan_id: str = "calc") -> Path:
    """A file the agent (and the gates) of `plan_id` in `repo` (made later is fine) may append to, for tests whose
    scripted agent reports through it; the test reads it afterwards. It lies in the plan's agent area
    (judge_dir("agents")/<key>, as plan-runner's child with this process's environment finds it), the one place a
    room shows the agent at the same path the judge sees: a file anywhere else outside the clone is out of its
    reach, which is the sandbox working. The area is plan-runner's; the file's folder is the test's own."""
    path = agent_visible(repo, name, plan_id)
    path.touch()
    return path


def agent_visible(repo: Path, name: str, plan_id: str = "calc") -> Path:
    """Where `agent_writable` puts `name`, without making it (a file the test makes later, for the agent to see)."""
    from runner.adapters.sandbox.agent_clone import area_for
    from runner.adapters.sandbox.origin import ORIGIN

    root = area_for(repo, plan_id).root
    if not os.path.lexists(repo) and os.path.lexists(root / ORIGIN):
        # An area plan-runner used for a repository at this path that is gone: left by an earlier run whose
        # temporary folders had the same names (pytest numbers them afresh once the old ones are removed). Its
        # reports and its agent's files would be read as this test's.
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(root)], check=True)
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    folder = root / "test-reports"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / name


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before any test (in the controller, before xdist's workers start): the agent areas and seed stores of
    repositories that are gone removed, as plan-runner's own sweep does (runner/adapters/sandbox/sweep.py). An
    earlier run on this machine leaves the areas of its temporary repositories, and pytest numbers its temporary
    folders afresh once the old ones are removed, so a test's repository can have the path of an earlier run's:
    its area (named by that path) would be read as this test's before its first session made it anew (CI17's
    `test_killed_job_is_reconciled...` found the earlier run's agent commit and killed plan-runner before its
    session started)."""
    if hasattr(session.config, "workerinput"):
        return
    from runner.adapters.sandbox import sweep
    from runner.core.errors import PlanRunnerError

    try:
        sweep.sweep(wait=True)
    except (OSError, PlanRunnerError) as err:
        print(f"conftest: the sweep of gone repositories' agent areas failed: {err}")


# Per-file durations (setup + call + teardown of every test in the file), printed at the end of a run when
# PLAN_RUNNER_FILE_DURATIONS is set (.ci/run sets it): where the suite's time goes, file by file.
_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001 (pytest's hook signature)
    if not os.environ.get("PLAN_RUNNER_FILE_DURATIONS") or not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"time per test file ({total:.0f} s in all)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {100 * seconds / total:5.1f} %  {path}")
