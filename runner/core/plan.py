"""The plan: front-matter configuration and the tracker, as frozen models.

Parsing text into these models lives in `runner.core.planfile`; this module is pure
data plus the few derived facts the policy needs.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from runner.core.evidence import CheckpointState
from runner.core.backend_spec import BACKEND_NAMES, BACKENDS, PROVIDERS
from runner.core.network import REGISTRIES_WORD, check_entry

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|m|min|mins|h|hr|hrs)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "sec": 1, "secs": 1, "m": 60, "min": 60, "mins": 60, "h": 3600, "hr": 3600, "hrs": 3600}


def parse_duration(value: object) -> float:
    """Minutes as a number (fractions allowed) or a string `45s`, `12m`, `2h`; returns seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 12 (minutes), '45s', '12m' or '2h', got a boolean")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value) * 60
        except OverflowError:  # a 400-digit integer from YAML must be a user error, not a crash
            raise ValueError("a duration this large is not a duration") from None
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"{value!r} is not a duration; write minutes as a number, or '45s', '12m', '2h'")
        unit = (m.group(2) or "m").lower()
        seconds = float(m.group(1)) * _UNIT_SECONDS[unit]
    else:
        raise ValueError(f"expected a duration such as 12 (minutes), '45s', '12m' or '2h', got {type(value).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    # The schema shows what a plan may contain (minutes or a string with a unit), not the
    # seconds the model stores, so editors validating front matter accept "45s".
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "description": "minutes"},
                {"type": "string", "pattern": _DURATION.pattern, "description": "e.g. '45s', '12m', '2h'"},
            ]
        }
    ),
]
"""Seconds, written in the plan as minutes or with a unit."""


class Config(BaseModel):
    """A section of the front matter. A duration is named for what it holds, seconds (`stall_s`); the plan's key is
    its alias (`stall_minutes`, where a bare number means minutes), the only name a model is built with."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


if TYPE_CHECKING:  # Literals made from the table at run time, which a type checker cannot read: str to it
    Backend = str
    Provider = str
else:
    Backend = Literal[BACKEND_NAMES]  # the rows of runner.core.backend_spec.BACKENDS
    Provider = Literal[PROVIDERS]  # every backend's ways of paying


# Tools plan-runner's sessions need (edit the tree, commit with git, tick the plan): never disallowed.
REQUIRED_TOOLS = ("Bash", "Edit", "Write", "Read")
# agent.args flags that would replace or fight plan-runner's own permission list, or its MCP configuration:
# refused (say it with agent.allowed_tools / disallowed_tools / mcp_servers instead).
CLAUDE_POLICY_FLAGS = ("--permission-mode", "--allowedTools", "--allowed-tools", "--disallowedTools",
                       "--disallowed-tools", "--dangerously-skip-permissions", "--allow-dangerously-skip-permissions",
                       "--mcp-config", "--strict-mcp-config", "--permission-prompt-tool", "--tools",
                       "--setting-sources", "--settings")
_TOOL_RULE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*(\(.*\))?$")
_MCP_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")  # no "__": it separates mcp__server__tool
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class McpServer(Config):
    """An MCP server the agent may use: a program it starts (stdio) or a URL (streamable HTTP)."""

    command: str | None = Field(None, description="stdio server: the program (on the agent's PATH, or a path).")
    args: tuple[str, ...] = Field((), description="stdio server: its arguments.")
    env: tuple[str, ...] = Field((), description="Names of variables from plan-runner's environment the server gets "
                                                 "(passed to the agent too, like agent.env; never GitHub tokens).")
    url: str | None = Field(None, description="HTTP server: its URL.")

    @model_validator(mode="after")
    def _one_kind(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server is either `command:` (stdio) or `url:` (HTTP): give one of them")
        if self.url is not None and (self.args or not re.match(r"^https?://", self.url)):
            raise ValueError("an HTTP MCP server is `url: http(s)://...` without `args`")
        bad = [n for n in self.env if not _ENV_NAME.match(n)]
        if bad:
            raise ValueError(f"`env` lists variable names, and {bad[0]!r} is not one")
        github = [n for n in self.env if n.upper().startswith(("GITHUB_", "GH_", "ACTIONS_"))]
        if github:
            raise ValueError(f"`env` may not pass {github[0]}: GitHub credentials never reach the agent or its tools")
        return self


class AgentConfig(Config):
    backend: Backend = "claude-code"
    provider: Provider | None = Field(
        None, description="How the agent pays, one of its backend's ways (runner/core/backend_spec.py): claude-code: "
        "anthropic (an API key or a subscription token), bedrock (Amazon Bedrock), vertex (Google Vertex AI); "
        "anthropic: anthropic; codex: openai (an API key or a ChatGPT login). Default: the backend's first, or what "
        "the environment switches on (CLAUDE_CODE_USE_BEDROCK=1).")
    model: str | None = Field(None, description="Model name passed to the backend.")
    executable: str | None = Field(None, description="CLI name or path, for CLI backends.")
    args: tuple[str, ...] = Field((), description="Extra arguments for CLI backends.")
    stall_s: Duration = Field(12 * 60, alias="stall_minutes", description="No output for this long -> Stalled.")
    time_limit_s: Duration = Field(90 * 60, alias="time_limit_minutes",
                                  description="Hard limit for one session -> TimedOut.")
    session_tokens: int = Field(600_000, gt=0, description="Token budget: nudge at 80 %, stop at 100 % -> RolledOver.")
    env: tuple[str, ...] = Field((), description="Extra environment variable names passed to the agent.")
    script: str | None = Field(None, description="script backend: path of the session script file.")
    prompt_via: Literal["stdin", "file"] = Field("stdin", description="command backend: how the prompt is given.")
    limit_patterns: tuple[str, ...] = Field((), description="command backend: regexes that mean a rate limit.")
    reset_pattern: str | None = Field(None, description="command backend: regex whose group 1 is the reset time.")
    mcp_servers: dict[str, McpServer] = Field(
        {}, description="claude-code, codex: MCP servers by name; each server's tools are allowed (mcp__<name>).")
    allowed_tools: tuple[str, ...] = Field(
        (), description="claude-code: tools allowed besides plan-runner's own (e.g. WebFetch, Bash(npm test:*), "
        "mcp__<server>__<tool>); codex: mcp__<server>__<tool> entries become the server's enabled_tools.")
    disallowed_tools: tuple[str, ...] = Field(
        (), description="claude-code: tools denied (denial wins); codex: mcp__<server>__<tool> entries become the "
        "server's disabled_tools. Never Bash, Edit, Write or Read: plan-runner's sessions need them.")

    @property
    def passed_env(self) -> tuple[str, ...]:
        """The variable names the agent's environment takes from plan-runner's: `env` and the MCP servers' own."""
        return tuple(dict.fromkeys([*self.env, *(n for s in self.mcp_servers.values() for n in s.env)]))

    @model_validator(mode="after")
    def _tools_and_servers(self) -> AgentConfig:
        uses_tools = bool(self.mcp_servers or self.allowed_tools or self.disallowed_tools)
        if uses_tools and self.backend not in ("claude-code", "codex"):
            raise ValueError(f"`mcp_servers`, `allowed_tools` and `disallowed_tools` are for the claude-code and codex "
                             f"backends; the {self.backend} backend has its own fixed tools")
        for name in self.mcp_servers:
            if not _MCP_NAME.match(name):
                raise ValueError(f"MCP server name {name!r}: letters, digits, '-' and single '_' only")
        for key in ("allowed_tools", "disallowed_tools"):
            for rule in getattr(self, key):
                if not _TOOL_RULE.match(rule):
                    raise ValueError(f"`{key}`: {rule!r} is not a tool name or rule like Bash(npm test:*)")
                if rule.startswith("mcp__"):
                    server = rule[5:].split("__", 1)[0]
                    if server not in self.mcp_servers:
                        raise ValueError(f"`{key}`: {rule!r} names no server of `mcp_servers`")
                elif self.backend == "codex":
                    raise ValueError(f"`{key}`: {rule!r}: Codex has no per-tool list for its own tools (its "
                                     "sandbox is the job); for codex name MCP tools, mcp__<server>__<tool>")
        required = [t for t in self.disallowed_tools if t in REQUIRED_TOOLS]
        if required:
            raise ValueError(f"`disallowed_tools` may not deny {required[0]}: plan-runner's sessions need "
                             f"{', '.join(REQUIRED_TOOLS)} (deny a narrower rule, e.g. {required[0]}(rm:*))")
        if self.backend == "claude-code":
            flags = [a for a in self.args if a.split("=", 1)[0] in CLAUDE_POLICY_FLAGS]
            if flags:
                raise ValueError(f"`agent.args` may not set {flags[0].split('=', 1)[0]}: it would replace or fight "
                                 "plan-runner's own permission list; use `agent.allowed_tools`, "
                                 "`agent.disallowed_tools` and `agent.mcp_servers` (docs/claude-code.md)")
        if self.backend == "codex":
            for i, a in enumerate(self.args):
                value = self.args[i + 1] if a in ("-c", "--config") and i + 1 < len(self.args) else \
                    a.split("=", 1)[1] if a.startswith("--config=") else ""
                if value.strip().startswith("mcp_servers"):
                    raise ValueError("`agent.args` may not configure mcp_servers: use `agent.mcp_servers`")
        return self

    @model_validator(mode="after")
    def _provider_of_the_backend(self) -> AgentConfig:
        ways = BACKENDS[self.backend].providers
        if self.provider is not None and self.provider not in ways:
            raise ValueError(f"`provider: {self.provider}` is not a way the {self.backend} backend pays"
                             + (f" (it has: {', '.join(ways)})" if ways else " (it takes no provider)"))
        return self


class AdvisorConfig(Config):
    model: str = Field("claude-haiku-4-5", description="A cheap model consulted at dead ends.")
    enabled: bool = True
    may_skip: bool = Field(False, description="Let the advisor's `skip` drop a checkpoint without a human. The "
                                              "advisor reads text the agent wrote: by default a `skip` parks the "
                                              "plan for a human instead.")


class GateConfig(Config):
    name: str = Field(min_length=1)
    run: str | None = Field(None, description="Shell command; exit code 0 is green.")
    http: str | None = Field(None, description="URL; status 2xx and a body that does not report failure is green.")
    checks: tuple[str, ...] | None = Field(None, description="Names of check runs / commit statuses to wait for.")
    required: bool = True
    timeout_s: Duration = Field(20 * 60, alias="timeout_minutes")
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @property
    def kind(self) -> str:
        if self.run is not None:
            return "command"
        if self.http is not None:
            return "http"
        return "checks"

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> GateConfig:
        given = [k for k in ("run", "http", "checks") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a gate needs exactly one of `run`, `http` or `checks`")
        if self.run is not None and not self.run.strip():
            raise ValueError("the gate's `run` command is empty")
        return self


class BudgetConfig(Config):
    slack: float = Field(2.0, ge=1.0, description="Stage attempts = expected sessions x slack.")
    max_sessions: int = Field(60, ge=1)
    max_cost_usd: float | None = Field(50.0, ge=0)
    max_backoffs: int = Field(6, ge=1, description="Consecutive LimitBackoffs before NeedsHuman.")
    max_resumes: int = Field(2, ge=0, description="Resumes of one stalled/timed-out session.")


class SetupConfig(Config):
    """Commands run on the fresh checkout before the gates (as the agent's identity: untrusted code)."""

    run: tuple[str, ...] = Field((), description="Shell commands, in order, e.g. `pip install -e .[test]`.")
    cache: tuple[str, ...] = Field((), description="Paths (relative to the checkout) the commands produce, "
                                                   "kept between sessions, e.g. `.venv`.")
    key: tuple[str, ...] = Field((), description="Files whose content keys the cache (lock files). The cache is "
                                                 "reused only while they, and the commands, are unchanged.")
    timeout_s: Duration = Field(20 * 60, alias="timeout_minutes")


HostEntry = Annotated[
    str,
    AfterValidator(check_entry),
    WithJsonSchema({"type": "string", "minLength": 1,
                    "description": "a host (`github.com`), its subdomains (`*.github.com`), `host:port`, an IP "
                                   "address, `*` (any host) or `registries` (the package registries)"}),
]
"""One entry of a `network:` list, written the one way it is read."""


class NetworkConfig(Config):
    """What the sandboxed runs may reach (through plan-runner's allow-list proxy; everything else is refused)."""

    agent: tuple[HostEntry, ...] = Field(
        (), description="Hosts the agent reaches besides its backend's model endpoint (always reachable; an API "
                        "key is added by the proxy, never given to the agent).")
    setup: tuple[HostEntry, ...] = Field(
        (REGISTRIES_WORD,), description="Hosts the `setup:` commands reach. Default: `registries` (PyPI, npm, "
                                        "crates.io, Go, RubyGems, Maven Central; docs/plan-format.md).")
    gates: tuple[HostEntry, ...] = Field(
        (), description="Hosts the gates and `verify:` commands reach. Default: none.")


class PlanConfig(Config):
    """The front matter. Always read from the session's base commit."""

    branch: str | None = Field(None, description="Work branch (default plan-runner/<file stem>).")
    base: str = Field("main", description="Where the final pull request goes.")
    handoff: str | None = Field(None, description="Path of the handoff file (default <plan dir>/<stem>.handoff.md).")
    agent: AgentConfig = Field(default_factory=AgentConfig)
    gates: tuple[GateConfig, ...] = ()
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    advisor: AdvisorConfig | None = None
    protected: tuple[str, ...] = Field(
        (), description="Paths the agent must not change (a trailing / protects a folder; `*`, `?` and `**` "
                        "are glob patterns, e.g. `**/conftest.py`), e.g. tests the gates rely on: a change is "
                        "reverted and parks the plan, like an edit of the gates.")
    agent_config_protected: bool = Field(
        True, description="The agent CLIs' own configuration in the repository (`.claude/`, `.mcp.json`, `.codex/`) "
                          "is protected like `protected:` paths; `false` lets the agent change it (each CLI is "
                          "still started with plan-runner's settings only).")
    isolation: Literal["auto", "user", "none"] = Field(
        "auto", description="How the agent and the gates are kept from plan-runner: `auto` (and `user`, the older "
                            "pooled-user design's value, which means the same now) runs them in a room of kernel "
                            "namespaces as plan-runner's own uid, whoever runs it; `none` runs them unconfined as "
                            "plan-runner's own user (local mode only, at your own risk).")
    setup: SetupConfig | None = Field(None, description="Commands run on the gates' fresh checkout before them.")
    network: NetworkConfig = Field(default_factory=NetworkConfig,
                                   description="What the agent, `setup:` and the gates may reach on the network.")


class Checkpoint(Config):
    id: str
    title: str
    state: CheckpointState = CheckpointState.TODO
    verify: str | None = None
    line: int = 0
    blocked_reason: str | None = None  # the text after `BLOCKED:` when state is BLOCKED


class Stage(Config):
    number: int
    title: str
    sessions: int = Field(1, ge=1, description="Expected sessions.")
    checkpoints: tuple[Checkpoint, ...] = ()
    line: int = 0


class Plan(Config):
    """A parsed plan: configuration plus the tracker as of some commit."""

    path: str  # repository-relative path of the plan file
    id: str  # stable plan id (from the file stem)
    config: PlanConfig
    title: str = ""
    stages: tuple[Stage, ...] = ()

    @property
    def work_branch(self) -> str:
        return self.config.branch or f"plan-runner/{self.id}"

    @property
    def checkpoints(self) -> tuple[Checkpoint, ...]:
        return tuple(c for s in self.stages for c in s.checkpoints)

    def checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.id == checkpoint_id), None)

    def stage_of(self, checkpoint_id: str) -> Stage | None:
        return next((s for s in self.stages if any(c.id == checkpoint_id for c in s.checkpoints)), None)

    def next_checkpoint(self, skipped: frozenset[str] = frozenset()) -> Checkpoint | None:
        """The first checkpoint not DONE and not skipped (it may be BLOCKED)."""
        return next(
            (c for c in self.checkpoints if c.state is not CheckpointState.DONE and c.id not in skipped),
            None,
        )

    def stage_attempt_budget(self, stage: Stage) -> int:
        return max(1, math.ceil(stage.sessions * self.config.budget.slack))
