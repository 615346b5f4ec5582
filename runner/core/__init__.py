"""The pure core: records, decisions, parsers of text into records. No clock, no environment, no I/O."""
