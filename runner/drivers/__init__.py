"""Drivers: one session, the local loop, the GitHub Actions modes, the command line."""
