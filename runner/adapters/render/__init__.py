"""Text for people: prompts, reports, job summaries, the terminal."""
