"""Regular expressions compiled on first use.

A command-line process pays for every module-level `re.compile` at import: the fingerprint
and rate-limit parsers alone hold dozens of patterns (about 20 ms to compile) that most
sessions, whose gates pass and whose agents hit no limit, never use.
"""

from __future__ import annotations

import re
from typing import Any


class LazyPattern:
    """Stands in for `re.compile(pattern, flags)`; compiles on the first attribute used."""

    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._pattern, self._flags)
        return getattr(compiled, name)
