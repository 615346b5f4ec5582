"""The network policy (runner.core.network) and the plan's `network:` key: host rules, defaults, model access."""

from __future__ import annotations

import pytest

from runner.core.backend_spec import BACKENDS
from runner.core.errors import PlanError
from runner.core.network import (
    PLACEHOLDER_KEY,
    REGISTRIES,
    AllowList,
    HostRule,
    ModelAccess,
    Refusal,
    allow_list,
    expand,
    model_access,
    parse_rule,
    refusals_line,
)
from runner.core.plan import NetworkConfig
from runner.core.planfile import parse_plan, plan_json_schema

BODY = "# P\n\n## Stage 1: A\n- [ ] 1.1 x\n"


def plan_with(front: str):
    return parse_plan(f"---\n{front}---\n{BODY}", "plans/p.md")


def problems_of(front: str) -> list:
    with pytest.raises(PlanError) as info:
        plan_with(front)
    return info.value.problems


# ---- host rules -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "host", "port", "allowed"), [
    ("github.com", "github.com", 443, True),
    ("github.com", "GitHub.com.", 80, True),  # names compare case- and trailing-dot-insensitively
    ("github.com", "github.com", 22, False),  # a bare host: 443 and 80 only
    ("github.com", "api.github.com", 443, False),  # an exact name is not its subdomains
    ("github.com", "evilgithub.com", 443, False),
    ("*.github.com", "api.github.com", 443, True),
    ("*.github.com", "a.b.github.com", 443, True),
    ("*.github.com", "github.com", 443, False),  # subdomains only, not the domain itself
    ("*.github.com", "evilgithub.com", 443, False),
    ("*.github.com", "api.github.com.evil.org", 443, False),
    ("github.com:22", "github.com", 22, True),
    ("github.com:22", "github.com", 443, False),
    ("*", "anything.example", 443, True),
    ("*", "anything.example", 8080, False),
    ("*:8080", "anything.example", 8080, True),
    ("10.1.2.3:5432", "10.1.2.3", 5432, True),
    ("[::1]:8080", "::1", 8080, True),
    ("[::1]:8080", "[::1]", 8080, True),
])
def test_rule_matches(rule: str, host: str, port: int, allowed: bool) -> None:
    """A rule allows exactly its host (or subdomains), on its port or 443/80."""
    assert parse_rule(rule).matches(host, port) is allowed


@pytest.mark.parametrize(("text", "says"), [
    ("https://pypi.org/simple", "write only the host (and a port): `pypi.org`"),
    ("pypi.org/simple", "`pypi.org`"),
    ("", "an empty host"),
    ("a b", "contains a space"),
    ("py*.org", "a wildcard stands only at the start"),
    ("*.com", "a whole top-level domain"),
    ("host:0", "the port must be a number from 1 to 65535"),
    ("host:http", "the port must be a number"),
    ("[::1", "needs its `]`"),
    ("[1.2.3.4]:80", "brackets hold an IPv6 address"),
    ("::1:80:zz", "is not a host"),
    ("under_score.com", "is not a host name"),
    ("-lead.com", "is not a host name"),
])
def test_bad_rules_say_how_to_write_them(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_rule(text)
    assert says in str(info.value)


def test_literal_rules_name_the_address() -> None:
    """Only a rule naming the address itself may reach a local one (the proxy's loopback guard reads this)."""
    assert parse_rule("127.0.0.1:8000").literal and parse_rule("localhost:3000").literal
    assert parse_rule("[::1]:80").literal
    assert not parse_rule("*").literal and not parse_rule("example.com").literal


def test_registries_expand_and_duplicates_go() -> None:
    rules = expand(("registries", "pypi.org", "github.com", "github.com"))
    assert [str(r) for r in rules.rules] == [*REGISTRIES, "github.com"]
    assert rules.rule_for("files.pythonhosted.org", 443) == HostRule("files.pythonhosted.org")
    assert rules.rule_for("example.com", 443) is None
    assert str(AllowList()) == "nothing"


# ---- the plan key -----------------------------------------------------------------------------------------------


def test_defaults() -> None:
    """The agent gets only its model; setup the registries; the gates nothing."""
    network = plan_with("").config.network
    assert network == NetworkConfig() and network.setup == ("registries",)
    assert allow_list(network, "gates").rules == ()
    assert allow_list(network, "agent").rules == ()
    assert {str(r) for r in allow_list(network, "setup").rules} == set(REGISTRIES)


def test_lists_are_read_the_one_way_they_are_checked() -> None:
    network = plan_with("network:\n  agent: [GitHub.COM, '*.Example.org:8443']\n  setup: [Registries, pypi.corp]\n"
                        "  gates: ['[::1]:9000']\n").config.network
    assert network.agent == ("github.com", "*.example.org:8443")
    assert network.setup == ("registries", "pypi.corp")
    assert str(allow_list(network, "gates")) == "[::1]:9000"
    assert allow_list(network, "setup").rule_for("pypi.org", 443) is not None
    assert allow_list(network, "gates").rule_for("pypi.org", 443) is None


def test_bad_entries_are_problems_on_their_lines() -> None:
    problems = problems_of("network:\n  agent:\n    - github.com\n    - https://api.example.com/v1\n"
                           "  gates: pypi.org\n  gate: []\n")
    by_line = {p.line: p for p in problems}
    assert set(by_line) == {5, 6, 7}
    assert "`network.agent[1]`" in by_line[5].what and "`api.example.com`" in by_line[5].what
    assert "YAML list" in by_line[6].fix  # a bare string is not a list
    assert "did you mean `gates`" in by_line[7].fix
    assert all(p.fix for p in problems)


def test_schema_shows_the_entries() -> None:
    network = plan_json_schema()["$defs"]["NetworkConfig"]["properties"]
    assert network["setup"]["default"] == ["registries"]
    assert "registries" in network["agent"]["items"]["description"]


# ---- the model endpoint -----------------------------------------------------------------------------------------


def test_api_keys_become_routes_with_placeholders() -> None:
    """An API key is a route: the proxy holds the key, the sandbox a placeholder and the route's address."""
    access = model_access(BACKENDS["anthropic"], None, {"ANTHROPIC_API_KEY": "sk-1"})
    (route,) = access.routes
    assert (route.name, route.upstream, route.header, route.value) == ("anthropic", "https://api.anthropic.com",
                                                                        "x-api-key", "sk-1")
    assert route.placeholder_env == "ANTHROPIC_API_KEY" and "sk-1" not in repr(route)
    assert route.inside_base_url(3128) == "http://127.0.0.1:3128/anthropic"
    assert access.hosts == () and PLACEHOLDER_KEY not in ("sk-1",)


@pytest.mark.parametrize(("env", "header", "value", "placeholder"), [
    ({"ANTHROPIC_API_KEY": "k", "CLAUDE_CODE_OAUTH_TOKEN": "o"}, "x-api-key", "k", "ANTHROPIC_API_KEY"),
    ({"ANTHROPIC_AUTH_TOKEN": "t"}, "authorization", "Bearer t", "ANTHROPIC_AUTH_TOKEN"),
    ({"CLAUDE_CODE_OAUTH_TOKEN": "o"}, "authorization", "Bearer o", "CLAUDE_CODE_OAUTH_TOKEN"),
])
def test_claude_code_credentials(env: dict, header: str, value: str, placeholder: str) -> None:
    (route,) = model_access(BACKENDS["claude-code"], None, env).routes
    assert (route.header, route.value, route.placeholder_env) == (header, value, placeholder)


def test_the_users_own_endpoint_is_the_upstream() -> None:
    """ANTHROPIC_BASE_URL / OPENAI_BASE_URL outside (a gateway, a test server) is where the route goes."""
    (a,) = model_access(BACKENDS["claude-code"], None, {"ANTHROPIC_API_KEY": "k",
                                                        "ANTHROPIC_BASE_URL": "https://gw.corp/api/claude"}).routes
    assert a.upstream == "https://gw.corp/api/claude" and a.inside_base_url(1) == "http://127.0.0.1:1/anthropic/api/claude"
    (o,) = model_access(BACKENDS["codex"], None, {"OPENAI_API_KEY": "sk-o"}).routes
    assert (o.header, o.value, o.base_url_env) == ("authorization", "Bearer sk-o", "OPENAI_BASE_URL")
    assert o.inside_base_url(9) == "http://127.0.0.1:9/openai/v1"


def test_providers_without_a_key_to_add_reach_their_hosts() -> None:
    """Bedrock, Vertex and a ChatGPT login sign or refresh inside the CLI: their hosts, not a route."""
    bedrock = model_access(BACKENDS["claude-code"], "bedrock", {"AWS_REGION": "eu-west-1"})
    assert bedrock.routes == () and "bedrock-runtime.eu-west-1.amazonaws.com" in bedrock.hosts
    vertex = model_access(BACKENDS["claude-code"], "vertex", {"CLOUD_ML_REGION": "us-east5"})
    assert "us-east5-aiplatform.googleapis.com" in vertex.hosts
    chatgpt = model_access(BACKENDS["codex"], None, {"CODEX_AUTH_JSON": "{}"})
    assert chatgpt.routes == () and "chatgpt.com" in chatgpt.hosts
    agent = allow_list(NetworkConfig(agent=("github.com",)), "agent", bedrock)
    assert agent.rule_for("bedrock-runtime.eu-west-1.amazonaws.com", 443) and agent.rule_for("github.com", 443)
    assert allow_list(NetworkConfig(), "gates", bedrock).rules == ()  # the model's hosts are the agent's only


def test_a_cloud_logins_own_gateway_is_reached_as_its_hosts_are() -> None:
    """ANTHROPIC_BEDROCK_BASE_URL / ANTHROPIC_VERTEX_BASE_URL (an LLM gateway): its host and port join the agent's
    hosts; one on the machine's loopback is a literal rule, which the sandbox shows at the same address."""
    gateway = model_access(BACKENDS["claude-code"], "bedrock", {"ANTHROPIC_BEDROCK_BASE_URL": "https://llm.corp/b"})
    assert "llm.corp:443" in gateway.hosts
    local = model_access(BACKENDS["claude-code"], "vertex", {"ANTHROPIC_VERTEX_BASE_URL": "http://127.0.0.1:8123/v1"})
    agent = allow_list(NetworkConfig(), "agent", local)
    assert agent.rule_for("127.0.0.1", 8123).literal and agent.loopback() == (("127.0.0.1", 8123),)
    assert model_access(BACKENDS["claude-code"], "bedrock", {"ANTHROPIC_BEDROCK_BASE_URL": "not a url"}).hosts[-1] \
        == "sts.amazonaws.com"  # nothing made of a value that names no host


def test_loopback_rules_with_a_port_are_the_ones_shown_inside() -> None:
    rules = expand(["127.0.0.1:5432", "localhost:3000", "[::1]:8080", "127.0.0.1", "10.0.0.5:5432", "*", "db:5432"])
    assert rules.loopback() == (("127.0.0.1", 5432), ("localhost", 3000), ("::1", 8080))


def test_backends_without_a_model() -> None:
    assert model_access(BACKENDS["command"], None, {"ANTHROPIC_API_KEY": "k"}) == ModelAccess()
    assert model_access(BACKENDS["script"], None, {"ANTHROPIC_API_KEY": "k"}) == ModelAccess()
    assert model_access(BACKENDS["anthropic"], None, {}) == ModelAccess()


def test_refusals_make_one_line() -> None:
    """What each phase was refused, most tried first, in one line; nothing refused, no line."""
    assert refusals_line({"agent": (), "gates": []}) is None
    line = refusals_line({"agent": [Refusal("a.example", 443, 2, "not allowed"), Refusal("b.example", 443, 9, "not allowed")],
                          "setup": [Refusal("::1", 22, 1, "resolves to the local address ::1")]})
    assert line == ("network refused (add a host to the plan's `network:` if it was needed): agent: b.example:443 "
                    "(9x, not allowed), a.example:443 (2x, not allowed); setup: [::1]:22 (1x, resolves to the local "
                    "address ::1)")
    twice = refusals_line({"setup": [Refusal("x.example", 443, 2, "not allowed"), Refusal("x.example", 443, 3, "not allowed")]})
    assert twice is not None and twice.endswith("setup: x.example:443 (5x, not allowed)")
    many = refusals_line({"gates": [Refusal(f"h{i}.example", 443, 1, "not allowed") for i in range(12)]}, limit=3)
    assert many.endswith("h1.example:443 (1x, not allowed), h10.example:443 (1x, not allowed), and 9 more")
