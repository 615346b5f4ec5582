"""Which source plan-runner was installed from: the repository and the full commit sha, so `init` can pin
the workflow's `uses:` to exactly that code.

Recorded at build time (`setup.py` writes `runner/data/source.json` into the wheel) or, for an editable
install or a checkout, read from the checkout's git. Neither known: None, and `init` says so plainly.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from importlib import metadata


def _version() -> str:
    try:
        return metadata.version("plan-runner")
    except metadata.PackageNotFoundError:  # running from a checkout that was never installed
        return "0.0.0"


__version__ = _version()
SOURCE_FILE = Path(__file__).resolve().parents[1] / "data" / "source.json"
_SHA = re.compile(r"[0-9a-f]{40}")
_GITHUB = re.compile(r"(?:https://github\.com/|git@github\.com:|ssh://git@github\.com/)"
                     r"(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Source:
    repository: str  # owner/repo on GitHub, "" when the origin is not a GitHub repository
    commit: str  # 40 hex digits
    version: str
    how: str  # "recorded at build time" | "read from the checkout"
    dirty: bool = False  # the checkout has changes the commit does not hold


def github_repository(url: str) -> str:
    match = _GITHUB.match(url.strip())
    return match["repo"] if match else ""


def read_checkout(directory: Path, version: str = __version__) -> Source | None:
    """The checkout `directory` belongs to, as a Source; None when it is not a git checkout."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10,
                              env={"PATH": "/usr/local/bin:/usr/bin:/bin", "GIT_TERMINAL_PROMPT": "0"})
        return proc.stdout.strip() if proc.returncode == 0 else ""
    try:
        commit = git("rev-parse", "HEAD")
        if not _SHA.fullmatch(commit):
            return None
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        return Source(github_repository(git("config", "--get", "remote.origin.url")), commit, version,
                      "read from the checkout", dirty)
    except (OSError, subprocess.TimeoutExpired):
        return None


def recorded_source() -> Source | None:
    try:
        data = json.loads(SOURCE_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not _SHA.fullmatch(str(data.get("commit", ""))):
        return None
    return Source(str(data.get("repository", "")), data["commit"], str(data.get("version", __version__)),
                  "recorded at build time")


def installed_source() -> Source | None:
    return recorded_source() or read_checkout(Path(__file__).resolve().parents[2])


def record_source(checkout: Path, target: Path, version: str) -> bool:
    """At build time: write what `read_checkout` finds into `target` (source.json). False when nothing."""
    found = read_checkout(checkout, version)
    if found is None or found.dirty:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"repository": found.repository, "commit": found.commit, "version": version}),
                      encoding="utf-8")
    return True
