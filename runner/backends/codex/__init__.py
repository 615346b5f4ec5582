"""The Codex CLI backend and its `codex exec --json` parser."""
