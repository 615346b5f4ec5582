"""scripts/release-notes.py: the release workflow builds nothing unless the tag, the version and the changelog
agree, and the GitHub release's notes are exactly the version's section."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("release_notes", ROOT / "scripts" / "release-notes.py")
release = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release)

PYPROJECT = '[project]\nname = "plan-runner"\nversion = "0.2.0"\n'
CHANGELOG = """# Changelog

## [Unreleased]

## [0.2.0] - 2026-12-07

### Fixed

- a thing

## [0.1.0] - 2026-12-06

- the first
"""


def test_the_notes_are_the_versions_section() -> None:
    assert release.release_notes("v0.2.0", PYPROJECT, CHANGELOG) == "### Fixed\n\n- a thing\n"


@pytest.mark.parametrize(("tag", "pyproject", "changelog", "says"), [
    ("0.2.0", PYPROJECT, CHANGELOG, "not a release tag"),
    ("v0", PYPROJECT, CHANGELOG, "not a release tag"),
    ("v0.1.0", PYPROJECT, CHANGELOG, "names version 0.1.0, but pyproject.toml says 0.2.0"),
    ("v0.2.0", PYPROJECT, CHANGELOG.replace("## [0.2.0] - 2026-12-07", "## 0.2.0"), "no section `## [0.2.0]"),
    ("v0.2.0", PYPROJECT, CHANGELOG.replace("### Fixed\n\n- a thing\n", ""), "is empty"),
])
def test_a_disagreement_says_what_and_how_to_fix(tag, pyproject, changelog, says) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("(", r"\(")):
        release.release_notes(tag, pyproject, changelog)


def test_the_projects_changelog_has_an_unreleased_section_and_the_version_is_semantic() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    import tomllib
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert release._TAG.fullmatch(f"v{version}") and version.startswith("0.")
