"""What one agent backend is, declared once: the table every part of plan-runner reads.

The plan's schema (`agent.backend`), the preflight (the executable, the credentials), the agent's environment
allow-list (runner.adapters.sandbox.agentenv), the action's installer (runner.drivers.actions.install), `logs`
(runner.drivers.cli.transcripts) and `get_backend` (runner.backends.common.base) all read `BACKENDS`; nothing else names a
backend's package, credentials or files.

A plain table, not a plugin registry: a backend runs inside plan-runner's trusted process (it is handed the
agent's identity, its credentials and the state's transcript folder), its CLI is pinned to the version its stream
parser is tested against, and the JSON schema editors read is generated from this table. A backend is added by
adding a row here and a module under runner/backends (and its tests), reviewed like the rest of the trusted code.
Pure data: no environment, no files.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Executable:
    """The program a CLI backend starts: `agent.executable`, else the override variable, else `default` on the PATH."""

    default: str
    override_env: str  # read from plan-runner's own environment (the action's installer sets it)


@dataclass(frozen=True)
class NpmPackage:
    """The pinned CLI the action installs (and scripts/install-*.sh give the tests)."""

    package: str
    version: str  # the version plan-runner's stream parser is tested against
    binary: str  # the executable's name in node_modules/.bin


@dataclass(frozen=True)
class AuthWay:
    """One way the backend's agent can authenticate (one way is enough).

    `switch`: a variable that selects this way (CLAUDE_CODE_USE_BEDROCK); None for the default way.
    `needs`: groups of names, each group satisfied by any one of its names being set (non-empty).
    `file_env`: a variable naming a credentials file that must exist (GOOGLE_APPLICATION_CREDENTIALS).
    `passes`: extra variable patterns the agent receives only when this way is selected (AWS_*, ...).
    """

    provider: str  # the plan's `agent.provider` that chooses it
    label: str
    needs: tuple[tuple[str, ...], ...]
    fix: str
    switch: str | None = None
    file_env: str | None = None
    passes: tuple[str, ...] = ()

    def selected(self, env: Mapping[str, str]) -> bool:
        return self.switch is None or _truthy(env.get(self.switch))

    def missing(self, env: Mapping[str, str]) -> list[str]:
        """The groups not satisfied, each as 'A or B'."""
        return [" or ".join(group) for group in self.needs if not any(env.get(n) for n in group)]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class BackendSpec:
    name: str
    factory: str  # "module:Class", imported when a session needs it
    summary: str
    credentials: tuple[str, ...] = ()  # variable patterns always passed to the agent (its own, and nothing else)
    auth: tuple[AuthWay, ...] = ()  # empty: no credentials needed or checked (command, script)
    login_file: tuple[str, str] | None = None  # (the variable naming the folder, the file): a CLI's own login
    login_content_env: str | None = None  # a variable holding that file's content (the action's input)
    executable: Executable | None = None
    install: NpmPackage | None = None
    install_hint: str = ""
    transcripts: tuple[str, ...] = ()  # file name patterns of its transcripts in the state's transcript folder

    def selected_auth(self, env: Mapping[str, str], provider: str | None = None) -> AuthWay | None:
        """The way the plan's `agent.provider` names; without one, the way `env` switches on (a local user's
        CLAUDE_CODE_USE_BEDROCK=1), else the default one."""
        if provider is not None:
            return next((w for w in self.auth if w.provider == provider), None)
        switched = [w for w in self.auth if w.switch is not None and w.selected(env)]
        if switched:
            return switched[0]
        defaults = [w for w in self.auth if w.switch is None]
        return defaults[0] if defaults else None

    def credential_patterns(self, env: Mapping[str, str], provider: str | None = None) -> tuple[str, ...]:
        """What the agent receives as its credentials: the backend's own patterns, plus those of the way
        selected (a Bedrock agent gets AWS_*; an API-key agent never sees an AWS key)."""
        way = self.selected_auth(env, provider)
        return self.credentials + (way.passes if way is not None and way.switch is not None else ())

    def switches(self, provider: str | None) -> dict[str, str]:
        """The variables that tell the agent's CLI which way it pays (CLAUDE_CODE_USE_BEDROCK=1), for the plan's
        `agent.provider`; set in the agent's environment by plan-runner."""
        way = self.selected_auth({}, provider) if provider is not None else None
        return {way.switch: "1"} if way is not None and way.switch else {}

    @property
    def providers(self) -> tuple[str, ...]:
        return tuple(w.provider for w in self.auth)

    def owns_transcript(self, filename: str) -> bool:
        return any(fnmatch.fnmatchcase(filename, p) for p in self.transcripts)


ANTHROPIC_VARS: tuple[str, ...] = ("ANTHROPIC_*", "CLAUDE_CODE_*")
OPENAI_VARS: tuple[str, ...] = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_*")

AWS_VARS: tuple[str, ...] = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                             "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE",
                             "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")
VERTEX_VARS: tuple[str, ...] = ("CLOUD_ML_REGION", "VERTEX_REGION_*", "GOOGLE_APPLICATION_CREDENTIALS",
                                "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT")

_CLAUDE_AUTH = (
    AuthWay("anthropic", "Anthropic API key or Claude subscription token",
            (("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),),
            "set the action's `anthropic-api-key` or `claude-code-oauth-token` input (locally: export "
            "ANTHROPIC_API_KEY=... or CLAUDE_CODE_OAUTH_TOKEN=..., made by `claude setup-token`)"),
    AuthWay("bedrock", "Amazon Bedrock", (("AWS_REGION", "AWS_DEFAULT_REGION"),
                               ("AWS_ACCESS_KEY_ID", "AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE")),
            "give the job AWS credentials before plan-runner's step (the workflow `init --auth bedrock` writes "
            "assumes a role through OIDC with aws-actions/configure-aws-credentials) and set AWS_REGION",
            switch="CLAUDE_CODE_USE_BEDROCK", passes=AWS_VARS),
    AuthWay("vertex", "Google Vertex AI", (("ANTHROPIC_VERTEX_PROJECT_ID",), ("CLOUD_ML_REGION",),
                                 ("GOOGLE_APPLICATION_CREDENTIALS",)),
            "authenticate the job to Google Cloud before plan-runner's step (the workflow `init --auth vertex` "
            "writes uses google-github-actions/auth through OIDC) and set ANTHROPIC_VERTEX_PROJECT_ID and "
            "CLOUD_ML_REGION", switch="CLAUDE_CODE_USE_VERTEX", file_env="GOOGLE_APPLICATION_CREDENTIALS",
            passes=VERTEX_VARS),
)

BACKENDS: dict[str, BackendSpec] = {spec.name: spec for spec in (
    BackendSpec(
        "claude-code", "runner.backends.claude_code.backend:ClaudeCodeBackend", "the Claude Code CLI (stream-json)",
        credentials=ANTHROPIC_VARS, auth=_CLAUDE_AUTH,
        executable=Executable("claude", "PLAN_RUNNER_CLAUDE"),
        install=NpmPackage("@anthropic-ai/claude-code", "2.1.332", "claude"),
        install_hint="install Claude Code (`npm install -g @anthropic-ai/claude-code`), or set `agent.executable` "
                     "to its path in the plan",
        transcripts=("claude-stream.jsonl",)),
    BackendSpec(
        "anthropic", "runner.backends.anthropic.backend:AnthropicAgentBackend",
        "plan-runner's built-in agent on the Messages API",
        credentials=ANTHROPIC_VARS,
        auth=(AuthWay("anthropic", "Anthropic API key", (("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),),
                      "set the action's `anthropic-api-key` input (locally: export ANTHROPIC_API_KEY=...)"),),
        transcripts=("*.json",)),
    BackendSpec(
        "codex", "runner.backends.codex.backend:CodexBackend", "the Codex CLI (`codex exec --json`)",
        credentials=OPENAI_VARS,
        auth=(AuthWay("openai", "OpenAI API key or ChatGPT login", (("OPENAI_API_KEY", "CODEX_AUTH_JSON"),),
                      "set the action's `openai-api-key` input, or `codex-auth-json` with the contents of a ChatGPT "
                      "login's auth.json (`codex login`, then ~/.codex/auth.json; locally: export OPENAI_API_KEY=... "
                      "or CODEX_HOME=<folder holding auth.json>)"),),
        login_file=("CODEX_HOME", "auth.json"), login_content_env="CODEX_AUTH_JSON",
        executable=Executable("codex", "PLAN_RUNNER_CODEX"),
        install=NpmPackage("@openai/codex", "0.171.0", "codex"),
        install_hint="install Codex (`npm install -g @openai/codex`), or set `agent.executable` to its path in the plan",
        transcripts=("codex-events.jsonl",)),
    BackendSpec(
        "command", "runner.backends.command.backend:CommandBackend", "any CLI named by `agent.executable`",
        install_hint="set `agent.executable` in the plan to a program on the PATH or a path relative to the repository",
        transcripts=("command-output.log",)),
    BackendSpec(
        "script", "runner.backends.script.backend:ScriptBackend", "a scripted stand-in agent (demo, tests)",
        credentials=ANTHROPIC_VARS,  # it plays a Claude Code agent
        transcripts=("script-*.jsonl",)),
)}

BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)
PROVIDERS: tuple[str, ...] = tuple(dict.fromkeys(p for spec in BACKENDS.values() for p in spec.providers))


def spec_of(name: str) -> BackendSpec | None:
    return BACKENDS.get(name)
