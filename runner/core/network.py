"""What a sandboxed run may reach on the network: host rules, the plan's lists, the model endpoint.

Pure: the plan's `network:` lists and the backend's credentials in, frozen records out. The proxy that
enforces them is runner.adapters.netproxy; the sandbox (runner.adapters.sandbox) gives every run a network
namespace whose only way out is that proxy.

Three phases, three lists (docs/plan-format.md, "Network"):

* `agent`: its backend's model endpoint (always) plus what the plan lists;
* `setup`: the package registries (`registries`) unless the plan lists otherwise;
* `gates` (and `verify:`): nothing unless listed.

For an API-key backend the model endpoint is a *route*, not a host: the agent talks plain HTTP to the proxy
on its own loopback (`ANTHROPIC_BASE_URL`), and the proxy adds the key on its way to the real endpoint, so the
key never enters the sandbox.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from runner.core.backend_spec import BackendSpec

Phase = Literal["agent", "setup", "gates"]
PHASES: tuple[Phase, ...] = ("agent", "setup", "gates")

REGISTRIES_WORD = "registries"
ANY_HOST = "*"
# `registries` stands for these: the public package registries of the common toolchains (what `pip install`,
# `npm ci`, `cargo fetch`, `go mod download`, `bundle install` and Maven/Gradle fetch from by default).
REGISTRIES: tuple[str, ...] = (
    "pypi.org", "files.pythonhosted.org",                              # pip, uv, poetry
    "registry.npmjs.org", "registry.yarnpkg.com",                     # npm, yarn, pnpm
    "crates.io", "index.crates.io", "static.crates.io",               # cargo
    "proxy.golang.org", "sum.golang.org",                             # go
    "rubygems.org", "index.rubygems.org",                             # gem, bundler
    "repo.maven.apache.org", "repo1.maven.org", "plugins.gradle.org",  # maven, gradle
)
DEFAULT_PORTS = (443, 80)

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class HostRule:
    """One allowed destination: a host name, `*.domain` (its subdomains), an IP address or `*` (any host);
    a port, or None for 443 and 80."""

    host: str
    port: int | None = None

    @property
    def literal(self) -> bool:
        """Names the address itself (an IP or `localhost`): only such a rule may reach loopback or link-local."""
        return self.host == "localhost" or _ip(self.host) is not None

    def matches(self, host: str, port: int) -> bool:
        if (port not in DEFAULT_PORTS) if self.port is None else (port != self.port):
            return False
        host = normalise_host(host)
        if self.host == ANY_HOST:
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _loopback(host: str) -> bool:
    address = _ip(host)
    return host == "localhost" or (address is not None and address.is_loopback)


def normalise_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def parse_rule(text: str) -> HostRule:
    """`host`, `*.domain`, `host:port`, `1.2.3.4:8080`, `[::1]:8080` or `*`; ValueError saying how to write it."""
    raw = text.strip()
    if not raw:
        raise ValueError("an empty host; write a host name such as `github.com`")
    if "://" in raw or "/" in raw:
        host = urlsplit(raw if "://" in raw else "//" + raw).hostname or raw
        raise ValueError(f"{raw!r} is a URL or a path; write only the host (and a port): `{host}`")
    if any(c.isspace() for c in raw):
        raise ValueError(f"{raw!r} contains a space; write one host per entry")
    host, port = raw, None
    if raw.startswith("["):
        close = raw.find("]")
        if close < 0:
            raise ValueError(f"{raw!r}: an IPv6 address in brackets needs its `]`, e.g. `[::1]:8080`")
        host, rest = raw[1:close], raw[close + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{raw!r}: after `]` only `:port` may follow")
        port = _port(raw, rest[1:]) if rest else None
        if not isinstance(_ip(host), ipaddress.IPv6Address):
            raise ValueError(f"{raw!r}: brackets hold an IPv6 address, e.g. `[2001:db8::1]:8080`")
        return HostRule(str(_ip(host)), port)
    if raw.count(":") > 1:
        if isinstance(_ip(raw), ipaddress.IPv6Address):
            return HostRule(str(_ip(raw)), None)
        raise ValueError(f"{raw!r} is not a host; an IPv6 address with a port is written `[::1]:8080`")
    if ":" in raw:
        host, port_text = raw.split(":", 1)
        port = _port(raw, port_text)
    host = normalise_host(host)
    if host == ANY_HOST:
        return HostRule(ANY_HOST, port)
    if _ip(host) is not None:
        return HostRule(str(_ip(host)), port)
    name = host[2:] if host.startswith("*.") else host
    if "*" in name:
        raise ValueError(f"{raw!r}: a wildcard stands only at the start, for subdomains (`*.example.com`), "
                         "or alone (`*`, any host)")
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels) or len(name) > 253:
        raise ValueError(f"{raw!r} is not a host name (letters, digits, `-` and dots, e.g. `api.github.com`)")
    if host.startswith("*.") and len(labels) < 2:
        raise ValueError(f"{raw!r} would allow a whole top-level domain; name the domain, e.g. `*.example.com`")
    return HostRule(host, port)


def _port(raw: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{raw!r}: the port must be a number from 1 to 65535")
    return int(text)


def check_entry(text: str) -> str:
    """A plan's list entry, checked and written the one way it is read (lower case); `registries` as is."""
    if text.strip().lower() == REGISTRIES_WORD:
        return REGISTRIES_WORD
    return str(parse_rule(text))


@dataclass(frozen=True)
class AllowList:
    """The destinations one sandboxed run may reach through the proxy (everything else is refused)."""

    rules: tuple[HostRule, ...] = ()

    def rule_for(self, host: str, port: int) -> HostRule | None:
        """The first rule allowing host:port, or None."""
        return next((r for r in self.rules if r.matches(host, port)), None)

    def loopback(self) -> tuple[tuple[str, int], ...]:
        """The machine's own services these rules name with a port (`127.0.0.1:5432`, `localhost:3000`,
        `[::1]:8080`): the sandbox shows each at the same port of its own loopback (runner.adapters.netproxy.relay)."""
        return tuple((r.host, r.port) for r in self.rules if r.port is not None and _loopback(r.host))

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.rules) or "nothing"


def expand(entries: Iterable[str]) -> AllowList:
    """A plan's list as rules: `registries` becomes the registry hosts; duplicates dropped, order kept."""
    rules: list[HostRule] = []
    for entry in entries:
        for text in (REGISTRIES if entry == REGISTRIES_WORD else (entry,)):
            rule = parse_rule(text)
            if rule not in rules:
                rules.append(rule)
    return AllowList(tuple(rules))


# ---- the model endpoint ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """The model endpoint as the proxy serves it: requests to http://127.0.0.1:PORT/<name>/... inside the sandbox
    go to `upstream`'s origin with the same path, the client's key headers removed and `header: value` added."""

    name: str  # the path prefix inside, e.g. "anthropic"
    upstream: str  # the real base URL, e.g. https://api.anthropic.com (or the user's own ANTHROPIC_BASE_URL)
    header: str  # lower-case: "x-api-key" or "authorization"
    value: str = field(repr=False)  # the secret header value (a key, or "Bearer <token>")
    base_url_env: str = "ANTHROPIC_BASE_URL"  # set inside to the route's address
    secret_env: tuple[str, ...] = ()  # variables that must not enter the sandbox
    placeholder_env: str = ""  # the variable set inside to PLACEHOLDER_KEY (the CLIs refuse to start without one)

    def inside_base_url(self, port: int) -> str:
        path = urlsplit(self.upstream).path.rstrip("/")
        return f"http://127.0.0.1:{port}/{self.name}{path}"


# What the sandbox's agent holds instead of its key: a value the proxy strips, useless anywhere else.
PLACEHOLDER_KEY = "plan-runner-proxy-adds-the-key"
STRIPPED_HEADERS = ("x-api-key", "authorization", "proxy-authorization")

ANTHROPIC_SECRETS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
OPENAI_SECRETS = ("OPENAI_API_KEY", "CODEX_API_KEY")


@dataclass(frozen=True)
class ModelAccess:
    """How the agent reaches its model: routes (key added by the proxy) and hosts it connects to itself."""

    routes: tuple[Route, ...] = ()
    hosts: tuple[str, ...] = ()


def model_access(spec: BackendSpec, provider: str | None, env: Mapping[str, str]) -> ModelAccess:
    """The model endpoint of `spec`'s agent, paid the way `provider` (or `env`) selects."""
    way = spec.selected_auth(env, provider)
    if way is None:  # command, script: no model plan-runner knows of; the plan lists what they reach
        return ModelAccess()
    if way.provider == "bedrock":
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        return ModelAccess(hosts=(f"bedrock-runtime.{region}.amazonaws.com", f"bedrock.{region}.amazonaws.com",
                                  f"sts.{region}.amazonaws.com", "sts.amazonaws.com",
                                  *_gateway(env.get("ANTHROPIC_BEDROCK_BASE_URL"))))
    if way.provider == "vertex":
        region = env.get("CLOUD_ML_REGION") or "global"
        regional = () if region == "global" else (f"{region}-aiplatform.googleapis.com",)
        return ModelAccess(hosts=(*regional, "aiplatform.googleapis.com", "oauth2.googleapis.com",
                                  "sts.googleapis.com", "iamcredentials.googleapis.com",
                                  *_gateway(env.get("ANTHROPIC_VERTEX_BASE_URL"))))
    if way.provider == "anthropic":
        upstream = env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        for name, header, prefix in (("ANTHROPIC_API_KEY", "x-api-key", ""),
                                     ("ANTHROPIC_AUTH_TOKEN", "authorization", "Bearer "),
                                     ("CLAUDE_CODE_OAUTH_TOKEN", "authorization", "Bearer ")):
            if any(name in group for group in way.needs) and env.get(name):
                return ModelAccess(routes=(Route("anthropic", upstream, header, prefix + env[name],
                                                 "ANTHROPIC_BASE_URL", ANTHROPIC_SECRETS, name),))
        return ModelAccess()
    if way.provider == "openai":
        if env.get("OPENAI_API_KEY"):
            upstream = env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
            return ModelAccess(routes=(Route("openai", upstream, "authorization", "Bearer " + env["OPENAI_API_KEY"],
                                             "OPENAI_BASE_URL", OPENAI_SECRETS, "OPENAI_API_KEY"),))
        # a ChatGPT login (auth.json): its tokens refresh against auth.openai.com, so the CLI holds them
        return ModelAccess(hosts=("chatgpt.com", "auth.openai.com", "api.openai.com"))
    return ModelAccess()


def _gateway(url: str | None) -> tuple[str, ...]:
    """The host of a cloud login's own endpoint (`ANTHROPIC_BEDROCK_BASE_URL`, `ANTHROPIC_VERTEX_BASE_URL`: an LLM
    gateway), with its port: the CLI signs its requests itself, so it reaches the gateway as it would the cloud's
    host; one on the machine's loopback is shown inside the sandbox at the same address."""
    if not url:
        return ()
    parts = urlsplit(url.strip())
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ()
    if not parts.hostname:
        return ()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return (f"{host}:{port}",)


def allow_list(network: object, phase: Phase, access: ModelAccess = ModelAccess()) -> AllowList:
    """What a run of `phase` may reach: the plan's list for it (`network` is the plan's NetworkConfig), and for
    the agent its model's hosts."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    extra = tuple(access.hosts) if phase == "agent" else ()
    return expand((*extra, *getattr(network, phase)))


# ---- what was refused, for the session's report ------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """Connections to one destination a run was not allowed to reach (counted by the proxy)."""

    host: str
    port: int
    count: int
    why: str  # "not allowed", "resolves to the local address 127.0.0.1", ...

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port} ({self.count}x, {self.why})" if self.port else f"{host} ({self.count}x, {self.why})"


def refusals_line(by_phase: Mapping[Phase, Iterable[Refusal]], *, limit: int = 10) -> str | None:
    """One line for the session's report: what each phase was refused (the same destination from several runs of
    a phase counted together), most tried first; None if nothing was."""
    parts = []
    for phase, refusals in by_phase.items():
        merged: dict[tuple[str, int], Refusal] = {}  # a phase's several runs (setup: the clone's, the gates')
        for r in refusals:
            had = merged.get((r.host, r.port))
            merged[(r.host, r.port)] = r if had is None else Refusal(r.host, r.port, had.count + r.count, had.why)
        rows = sorted(merged.values(), key=lambda r: (-r.count, r.host, r.port))
        if rows:
            shown = ", ".join(str(r) for r in rows[:limit])
            more = f", and {len(rows) - limit} more" if len(rows) > limit else ""
            parts.append(f"{phase}: {shown}{more}")
    if not parts:
        return None
    return "network refused (add a host to the plan's `network:` if it was needed): " + "; ".join(parts)
