"""The Claude Code CLI backend and its stream-json parser."""
