"""One line of an agent's JSON output, read so that every text in it can be written as UTF-8.

JSON carries what UTF-8 cannot: a lone surrogate (`"\\ud800"`, which Node's JSON.stringify writes for a string
that holds one, and a model's reply can). Python's json module hands it on as a str that no UTF-8 write accepts,
so the first record, transcript or terminal line holding the agent's words would fail. Each backend reads its
agent's lines here; every lone surrogate becomes U+FFFD. A line without a `\\u` escape of one (almost all) costs
two substring searches more than `json.loads`.
"""

from __future__ import annotations

import json
from typing import Any

from runner.core.bounds import utf8_safe

__all__ = ["loads", "utf8_safe"]


def loads(line: str) -> Any:
    """`json.loads(line)`, its texts UTF-8-safe (ValueError as json.loads raises it)."""
    value = json.loads(line)
    if "\\ud" in line or "\\uD" in line:  # (the lines are decoded with errors="replace": no raw surrogate)
        return utf8_safe(value)
    return value
