"""Adapters to the world: git, gates, GitHub, the state store, processes, files, the terminal.

Importing any adapter first makes plan-runner's own PATH the trusted one (folders only root or plan-runner's
user can write; runner.adapters.sandbox.tools), before any room runs a program (GitPython runs `git` as
soon as it is imported)."""

from runner.adapters.sandbox import tools as _tools

_tools.harden_path()
