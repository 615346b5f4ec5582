"""Why a model endpoint cannot be reached: name lookup, TCP connect, TLS handshake, each within seconds.

Used when a backend's API calls get no HTTP answer at all (Claude Code's `api_retry` lines then carry no
status, only `"error":"unknown"`): the probe turns that into a reason a person can act on, with the fix.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from runner.core.evidence import ExitKind, SessionSignals

UNREACHABLE = "the model endpoint cannot be reached"  # how every backend's error for it begins


def is_unreachable(signals: SessionSignals) -> bool:
    """The session ended because the agent's model endpoint could not be reached."""
    return signals.exit_kind is ExitKind.TRANSIENT and (signals.error or "").startswith(UNREACHABLE)


def probe(url: str, *, timeout_s: float = 5.0) -> str | None:
    """What stops a connection to `url` (None: it can be reached, the trouble is elsewhere)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or parts.scheme not in ("http", "https"):
        return f"{url!r} is not an http(s) URL"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"{url!r} has an invalid port"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"the name {host} does not resolve (DNS: {exc.strerror or exc})"
    last = "no address"
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout_s)
        try:
            sock.connect(address)
        except ConnectionRefusedError:
            last = f"connection refused at {host}:{port}"
            sock.close()
            continue
        except OSError as exc:
            last = f"cannot connect to {host}:{port} ({exc.strerror or type(exc).__name__})"
            sock.close()
            continue
        if parts.scheme != "https":
            sock.close()
            return None
        import ssl  # (here: 5 ms of every session's start, for a probe that runs only when the endpoint fails)

        try:
            with ssl.create_default_context().wrap_socket(sock, server_hostname=host):
                return None
        except ssl.SSLError as exc:
            return f"the TLS handshake with {host}:{port} failed ({exc.reason or exc})"
        except OSError as exc:
            return f"the TLS handshake with {host}:{port} failed ({exc.strerror or type(exc).__name__})"
        finally:
            sock.close()
    return last


def shown(url: str) -> str:
    """`url` without any user name or password in it (a URL may carry credentials)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return parts._replace(netloc=host + port).geturl()


def unreachable_reason(url: str, key_var: str, *, timeout_s: float = 5.0, found: str | None = None) -> str:
    """The error text for a session whose endpoint cannot be reached: what, where, and the fix (`found`: what
    a probe already found; else the endpoint is probed now)."""
    found = found or probe(url, timeout_s=timeout_s)
    url = shown(url)
    what = found or "no HTTP answer (the endpoint took the connection but never answered)"
    return (f"{UNREACHABLE}: {what}; endpoint {url}. Fix: check the URL "
            f"(ANTHROPIC_BASE_URL / OPENAI_BASE_URL in `agent.env` or the job's environment), the network, "
            f"and that {key_var} belongs to that endpoint")
