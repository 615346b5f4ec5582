"""Agent backends: one module each, declared in the table runner.core.backend_spec.BACKENDS."""

from __future__ import annotations

from runner.backends.common.base import AgentBackend, SessionRequest, get_backend

__all__ = ["AgentBackend", "SessionRequest", "get_backend"]
