"""Benchmarks: scripts that print figures (not timed tests). Entry point: `python benchmarks/run.py`."""
