"""What a session spent, as the backend last read it: tokens, cost, and how sure the cost is.

* Cost is the backend's own figure where it reports one (Claude Code's `total_cost_usd`), else a list-price
  estimate (`cost_estimated`), and a lower bound (`cost_lower_bound`) when the session ended before the
  backend's final account (killed, stalled, crashed, interrupted): the call in flight is not in it.
* The session token budget (`agent.session_tokens`) counts `budget_tokens`: input, cache writes and output at
  full weight, cache reads at one tenth, which is what a cache read costs against fresh input on Anthropic's
  and OpenAI's price lists. A resumed session whose context is mostly cached rolls over when its cost says so,
  not after a tenth of it.
* `write_meter` keeps the last reading in `<transcript_dir>/meter.json` while the session runs, so a session
  plan-runner itself was stopped in (Ctrl-C, SIGTERM) is recorded with what it had spent (runner/drivers/session/cut_short.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.core.bounds import TOKEN_LIMIT, bound_cost

CACHE_READ_WEIGHT = 0.1
METER_FILE = "meter.json"

# Anthropic, USD per million tokens (input, output); cache reads 0.1x input, cache writes 1.25x input.
_ANTHROPIC_PRICES: tuple[tuple[str, float, float], ...] = (
    ("opus-4-5", 5.0, 25.0), ("opus-4-6", 5.0, 25.0), ("opus", 15.0, 75.0), ("sonnet", 3.0, 15.0),
    ("haiku-4", 1.0, 5.0), ("haiku-3-5", 0.8, 4.0), ("haiku", 0.25, 1.25),
)


def token_count(value: Any) -> int:
    """A usage count from untrusted JSON: a positive integer, at most TOKEN_LIMIT (10**400 would overflow every
    price computed from it); anything else (a string, a float, a bool, a negative) 0."""
    return min(value, TOKEN_LIMIT) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def budget_tokens(input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0) -> int:
    """Tokens as the session budget counts them; `input_tokens` is fresh input only (no cache reads or writes)."""
    return int(input_tokens + cache_write + output_tokens + cache_read * CACHE_READ_WEIGHT)


def anthropic_cost(model: str | None, input_tokens: int, output_tokens: int, cache_read: int = 0,
                   cache_write: int = 0) -> float | None:
    """A list-price estimate; `input_tokens` includes cache reads and writes. None for an unknown model."""
    name = (model or "").lower()
    for key, price_in, price_out in _ANTHROPIC_PRICES:
        if key in name:
            plain = max(0, input_tokens - cache_read - cache_write)
            total = plain * price_in + cache_read * price_in * 0.1 + cache_write * price_in * 1.25
            return round((total + output_tokens * price_out) / 1e6, 6)
    return None


@dataclass(frozen=True)
class Reading:
    tokens: int
    cost_usd: float | None
    estimated: bool
    written_at: datetime


def write_meter(transcript_dir: Path, tokens: int, cost_usd: float | None, estimated: bool) -> None:
    """The last reading, replaced atomically (a reader never sees half of it). Best effort: never raises."""
    try:
        folder = Path(transcript_dir)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (METER_FILE + ".tmp")
        tmp.write_text(json.dumps({"tokens": int(tokens), "cost_usd": bound_cost(cost_usd)[0], "estimated": bool(estimated),
                                   "written_at": datetime.now(UTC).isoformat()}), encoding="utf-8")
        os.replace(tmp, folder / METER_FILE)
    except OSError:
        pass


def read_meter(transcript_dir: Path, since: datetime) -> Reading | None:
    """The reading a session started at `since` left; None when there is none or it is an earlier session's."""
    try:
        data = json.loads((Path(transcript_dir) / METER_FILE).read_text(encoding="utf-8"))
        written = datetime.fromisoformat(data["written_at"])
        tokens = data["tokens"]
        cost = data["cost_usd"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    if written < since or not isinstance(tokens, int) or not (cost is None or isinstance(cost, (int, float))):
        return None
    return Reading(tokens=min(max(0, tokens), TOKEN_LIMIT), cost_usd=bound_cost(cost)[0],  # NaN, Infinity: bounded
                   estimated=bool(data.get("estimated")), written_at=written)
