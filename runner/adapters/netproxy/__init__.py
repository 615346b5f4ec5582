"""The network of a sandboxed run: an allow-list proxy outside the sandbox, a relay inside (docs/plan-format.md, "Network")."""

from runner.adapters.netproxy.proxy import NetProxy, start_proxy
from runner.adapters.netproxy.relay import INSIDE_PORT, INSIDE_SOCKET, RELAY_SOURCE, relay_argv

__all__ = ["INSIDE_PORT", "INSIDE_SOCKET", "RELAY_SOURCE", "NetProxy", "relay_argv", "start_proxy"]
