"""Suite-wide setup.

Sessions run the agent and the gates as an unprivileged user (runner.adapters.sandbox.identity) when the
suite runs as root, as it does in CI. That user must be able to reach what a test hands
the agent (a script in `tmp_path`, the test project): pytest makes its temporary folders
private (0700), so each test's `tmp_path` and the folders above it are made searchable
(o+x: others may open what they know the name of, never list it). Nothing is made
readable or writable that was not already.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest


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


def agent_writable(path: Path) -> Path:
    """A file the agent's (unprivileged) user may append to, for tests whose scripted agent reports through it."""
    path.touch()
    path.chmod(0o666)
    return path
