#!/usr/bin/env python3
"""The release workflow's check before it builds: the pushed tag names the version in pyproject.toml, and
CHANGELOG.md has a section for that version; that section is printed (the GitHub release's notes).

    python3 scripts/release-notes.py v0.1.0 > notes.md

Exit 2 with what, why and how to fix it when the tag, the version and the changelog disagree. Standard
library only (it runs on the runner's bare python3 before anything is installed)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TAG = re.compile(r"v(?P<version>\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?)")


def release_notes(tag: str, pyproject: str, changelog: str) -> str:
    """The CHANGELOG section of the version `tag` names; ValueError saying what disagrees."""
    match = _TAG.fullmatch(tag)
    if not match:
        raise ValueError(f"tag {tag!r} is not a release tag: push a tag vMAJOR.MINOR.PATCH, such as v0.1.0")
    version = tomllib.loads(pyproject)["project"]["version"]
    if match["version"] != version:
        raise ValueError(f"tag {tag} names version {match['version']}, but pyproject.toml says {version}: "
                         f"set [project] version = \"{match['version']}\" in pyproject.toml, commit, and tag that commit")
    heading = re.compile(rf"(?m)^## \[{re.escape(version)}\][^\n]*\n")
    found = heading.search(changelog)
    if not found:
        raise ValueError(f"CHANGELOG.md has no section `## [{version}] - YYYY-MM-DD`: move the Unreleased entries "
                         f"under that heading, commit, and tag that commit")
    rest = changelog[found.end():]
    end = re.search(r"(?m)^## \[", rest)
    notes = (rest[:end.start()] if end else rest).split("\n[", 1)[0].strip()
    if not notes:
        raise ValueError(f"CHANGELOG.md's section for {version} is empty: say what changed in this release")
    return notes + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: release-notes.py TAG", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(release_notes(argv[0], (ROOT / "pyproject.toml").read_text(encoding="utf-8"),
                                       (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")))
    except ValueError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
