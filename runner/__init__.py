"""plan-runner: run coding agents through multi-stage plans; judge sessions from evidence."""

__version__ = "0.1.0"
