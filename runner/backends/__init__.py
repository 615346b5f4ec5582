"""Agent backends. Every backend, built-in or third-party, registers the same way."""

from __future__ import annotations

from runner.backends.base import AgentBackend, SessionRequest, get_backend, register_backend

__all__ = ["AgentBackend", "SessionRequest", "get_backend", "register_backend"]
