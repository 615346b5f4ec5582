"""One session's network: a proxy per phase (agent, setup, gates), started when first needed, closed at the end.

The sandbox asks `proxy(phase)` for the proxy a sandboxed process goes through (its socket bound in, its command
behind the relay, its environment from `sandbox_env`); the session's report takes `report_line()` once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from runner.adapters.netproxy.proxy import NetProxy, start_proxy
from runner.core.backend_spec import BACKENDS
from runner.core.network import PHASES, ModelAccess, Phase, Refusal, allow_list, model_access, refusals_line
from runner.core.plan import AgentConfig, NetworkConfig


class SessionNetwork:
    """The proxies of one session. `network` is the plan's NetworkConfig, `agent` its AgentConfig, `env`
    plan-runner's own environment (where the model key is read: it stays in this process)."""

    def __init__(self, network: NetworkConfig, agent: AgentConfig, env: Mapping[str, str]) -> None:
        self.access: ModelAccess = model_access(BACKENDS[agent.backend], agent.provider, env)
        self._network = network
        self._proxies: dict[Phase, NetProxy] = {}
        self._refused: dict[Phase, tuple[Refusal, ...]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def proxy(self, phase: Phase) -> NetProxy:
        """The proxy of `phase` ("agent", "setup" or "gates"; `verify:` is "gates"), started on first use."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; one of {', '.join(PHASES)}")
        with self._lock:
            if self._closed:
                raise RuntimeError("the session's network is closed")
            if phase not in self._proxies:
                routes = self.access.routes if phase == "agent" else ()
                self._proxies[phase] = start_proxy(allow_list(self._network, phase, self.access), routes)
            return self._proxies[phase]

    def refused(self) -> dict[Phase, tuple[Refusal, ...]]:
        """What each phase was refused so far (closed phases included)."""
        with self._lock:
            live = {phase: proxy.refused() for phase, proxy in self._proxies.items()}
        return {phase: self._refused.get(phase, ()) or live.get(phase, ()) for phase in PHASES
                if self._refused.get(phase) or live.get(phase)}

    def report_line(self) -> str | None:
        """The one line of the session's report about refused destinations; None when nothing was refused."""
        return refusals_line(self.refused())

    def close(self) -> None:
        """Close every proxy (their refusals stay readable). Idempotent."""
        with self._lock:
            self._closed = True
            proxies, self._proxies = self._proxies, {}
        for phase, proxy in proxies.items():
            self._refused[phase] = proxy.refused()
            proxy.close()

    def __enter__(self) -> SessionNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
