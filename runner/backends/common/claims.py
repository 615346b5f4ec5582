"""What an agent's text claims about its own work: hints for the report, never a verdict. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable

_CLAIMS = re.compile(
    r"all (?:the )?tests (?:now )?pass(?:ed|ing)?|tests? (?:are )?(?:now )?(?:passing|green)"
    r"|\b(?:i am|i'm|we are|it is|it's|all|everything is|task is|work is)\s+done\b|\bdone\b"
    r"|\bcompleted?\b|\bfinished\b|\bimplemented\b|ready for review|checkpoint \S+ (?:is )?(?:done|complete)",
    re.IGNORECASE,
)
_DONE = re.compile(r"\bdone\b|\bcompleted?\b|\bfinished\b|ready for review|all (?:the )?tests (?:now )?pass",
                   re.IGNORECASE)


def parse_claims(texts: Iterable[str]) -> tuple[tuple[str, ...], bool | None]:
    """(claims found, claimed_done): `claimed_done` is None when the text claims nothing either way."""
    claims: list[str] = []
    done = False
    for text in texts:
        for m in _CLAIMS.finditer(text):
            claim = " ".join(m.group(0).lower().split())
            if claim not in claims:
                claims.append(claim)
        done = done or bool(_DONE.search(text))
    return tuple(claims[:10]), (True if done else None)
