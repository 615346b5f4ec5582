"""Every reference the code makes to a document resolves inside the repository: a `docs/*.md` file named exists,
a section quoted after it is one of its headings, and nothing cites a file or an issue the repository does not
hold (a SPEC, an "issue N")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = re.compile(r"(docs/[\w-]+\.md)(?:,\s*\"([^\"\s][^\"]*)\")?")
FOREIGN = re.compile(r"\bSPEC\b(?! *=)|\(issue \d+|issue \d+(, item \d+)?\)")


def _sources() -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "runner").rglob("*.py"))]


def _headings(doc: Path) -> set[str]:
    """Its headings, and the bold titles paragraphs open with (`**Network**`)."""
    lines = doc.read_text().splitlines()
    return ({line.lstrip("#").strip() for line in lines if line.startswith("#")}
            | {m.group(1) for line in lines if (m := re.match(r"\*\*([^*]+?)\.?\*\*", line))})


def test_every_document_and_section_named_in_the_code_exists():
    wrong = []
    for name, text in _sources():
        for m in DOC.finditer(re.sub(r"\s*\n\s*#?\s*", " ", text)):
            doc = ROOT / m.group(1)
            if not doc.is_file():
                wrong.append(f"{name}: {m.group(1)} does not exist")
            elif m.group(2) and not any(h == m.group(2) or h.startswith(m.group(2) + " (") for h in _headings(doc)):
                wrong.append(f"{name}: {m.group(1)} has no section {m.group(2)!r}")
    assert wrong == []


def test_no_reference_to_a_document_outside_the_repository():
    wrong = [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for name, text in _sources() for m in FOREIGN.finditer(text)]
    assert wrong == []
