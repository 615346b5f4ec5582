"""What of the agent's CLI state plan-runner keeps for the next session: an allow-list.

The agent wrote its CLI's state folder; all of it is the agent's output. Only what a CLI needs to resume a
session is kept: its session transcripts, JSON lines, read as such (every line a JSON object, UTF-8). A file
anywhere else (settings, hooks, an MCP configuration, the CLI's own state file), or one that does not read as
JSON lines (compressed, binary, anything else) is dropped, so the next session starts with plan-runner's
configuration only, and every byte kept is text the store's secret scan (`runner.adapters.store.dirs`,
`redact`) can read.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

# Paths relative to the saved state folder (runner.backends.claude_code.CONFIG_SUBDIR, codex's CODEX_HOME).
RESUMABLE = (
    re.compile(r"claude-config/projects/[^/]+/[^/]+\.jsonl"),  # Claude Code: projects/<cwd slug>/<session id>.jsonl
    re.compile(r"codex-home/sessions/(?:[^/]+/)*rollout-[^/]+\.jsonl"),  # Codex: sessions/YYYY/MM/DD/rollout-*.jsonl
    re.compile(r"[A-Za-z0-9_-]+\.json"),  # the built-in agent (runner.backends.anthropic): <session id>.json, one object
)
TRANSCRIPT_LIMIT = 8 * 2**20  # bytes read to check one transcript; a bigger one is dropped


def reads_as_jsonl(path: Path) -> str | None:
    """Why `path` is not JSON lines (None: it is): UTF-8 text whose every non-empty line is a JSON object (a
    `.json` file: one JSON object)."""
    size = path.stat().st_size
    if size > TRANSCRIPT_LIMIT:
        return f"{size:,} bytes, over {TRANSCRIPT_LIMIT:,}"
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text (compressed or binary)"
    if path.suffix == ".json":
        try:
            return None if isinstance(json.loads(text), dict) else "not a JSON object"
        except ValueError:
            return "not JSON"
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            return f"line {number} is not JSON"
        if not isinstance(value, dict):
            return f"line {number} is not a JSON object"
    return None


def keep_resumable(root: Path) -> list[str]:
    """Remove from `root` (plan-runner's own copy of the agent's state, regular files only) every file that is not
    a session transcript reading as JSON lines, and the folders left empty. The transcripts left out, and why."""
    left_out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink() or not path.is_file() or not any(p.fullmatch(rel) for p in RESUMABLE):
                path.unlink()  # the CLI's settings, caches and own state: dropped every time, not worth a warning
                continue
            why = reads_as_jsonl(path)
            if why is not None:
                path.unlink()
                left_out.append(f"{rel[:200]}: {why}")
        for name in dirnames:
            sub = Path(dirpath) / name
            if not sub.is_symlink() and sub.is_dir() and not any(sub.iterdir()):
                sub.rmdir()
    return left_out
