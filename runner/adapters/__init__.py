"""Adapters to the world: git, gates, GitHub, the state store, processes, files, the terminal."""
