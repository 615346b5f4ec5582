"""The environment an agent's process gets: an allow-list, never the GitHub token.

plan-runner pushes, dispatches and comments; the agent only edits the work tree.
So the agent's process sees the basics a shell needs, its own backend's credentials
(invariant 7, least credentials: docs/security.md, "The trust boundary, shown by attack") and the names the plan lists in `agent.env`;
nothing else from the job's environment. Claude Code never sees an OpenAI key, Codex
never sees an Anthropic key, and a `command` agent sees no key at all unless the
plan names it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from collections.abc import Iterable, Mapping

from runner.core.backend_spec import ANTHROPIC_VARS, OPENAI_VARS, spec_of  # noqa: F401 (re-exported)
from runner.adapters.secrets import GITHUB_PREFIXES, is_github_credential
from runner.core.errors import PlanRunnerError

BASE_VARS: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TERM", "TMPDIR", "TZ", "SHELL",
    # the agent commits; its identity is not a secret
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
)


def credential_vars(backend: str, env: Mapping[str, str] | None = None, provider: str | None = None) -> tuple[str, ...]:
    """The variable patterns a backend's agent receives as its credentials, from the backend's spec
    (runner.core.backend_spec): its own, plus those of the way of paying the plan's `agent.provider` (or `env`)
    selects (Bedrock: AWS_*; Vertex: the Google ones); command: none (a plan passes what its command needs by name
    in `agent.env`)."""
    spec = spec_of(backend)
    return spec.credential_patterns(env or {}, provider) if spec is not None else ()


def backend_agent_env(parent: Mapping[str, str], backend: str, allow: Iterable[str] = (),
                      provider: str | None = None) -> dict[str, str]:
    """The agent's environment for its backend: the allow-list with the backend's credentials for the way it pays
    (`provider`), and the switch that tells its CLI that way (CLAUDE_CODE_USE_BEDROCK=1). The session, the
    preflight and the tests build it here, once."""
    spec = spec_of(backend)
    return build_agent_env(parent, allow=allow, api_key_vars=credential_vars(backend, parent, provider),
                           extra=spec.switches(provider) if spec is not None else {})


_RESTRICTED_NAME = re.compile(r"TOKEN|SECRET|PASSWORD", re.IGNORECASE)  # only passed when named exactly


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def build_agent_env(
    parent: Mapping[str, str],
    *,
    allow: Iterable[str] = (),
    api_key_vars: Iterable[str] = ANTHROPIC_VARS,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Pick the agent's environment out of `parent`.

    `allow` is the plan's `agent.env`: exact names (a name with `*` is a pattern that
    never matches secret-looking names). `api_key_vars` are the backend's own
    credential patterns, passed even though they look secret. `extra` is set
    verbatim afterwards (plan-runner's own variables for the agent). A GitHub
    credential in `allow` is an error, not silently dropped, so the plan author learns.
    """
    allow = tuple(allow)
    api_key_vars = tuple(api_key_vars)
    for name in allow:
        if is_github_credential(name) or (name.upper().startswith(GITHUB_PREFIXES) and "*" in name):
            raise PlanRunnerError(
                what=f"the plan asks to pass {name!r} to the agent",
                why="GitHub credentials never reach the agent: plan-runner, not the agent, pushes and dispatches",
                fix=f"remove {name!r} from `agent.env` in the plan's front matter; give the agent "
                "only what its own tools need, by exact name",
            )
    exact = {n for n in allow if "*" not in n and "?" not in n}
    patterns = tuple(n for n in allow if n not in exact)
    env: dict[str, str] = {}
    for name, value in parent.items():
        if is_github_credential(name):
            continue
        if name in exact or _matches(name, api_key_vars):
            env[name] = value
        elif (_matches(name, BASE_VARS) or _matches(name, patterns)) and not _RESTRICTED_NAME.search(name):
            env[name] = value
    for name, value in (extra or {}).items():
        if is_github_credential(name):
            raise PlanRunnerError(
                what=f"refusing to set {name!r} in the agent's environment",
                why="GitHub credentials never reach the agent",
                fix="this is a bug in plan-runner or a plugin backend; please report it",
            )
        env[name] = value
    if "PATH" in env and "PATH" not in (extra or {}):
        env["PATH"] = clean_path(env["PATH"])  # nothing of plan-runner's on the agent's or the gates' PATH
    return env


def own_roots() -> tuple[str, ...]:
    """Where plan-runner itself lives: its virtualenv (never a system prefix) and its source tree."""
    # the folder holding the `runner` package (a checkout of plan-runner, or site-packages)
    roots = [os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))]
    if sys.prefix != sys.base_prefix:
        roots.append(os.path.realpath(sys.prefix))
    return tuple(roots)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def clean_path(value: str, also: Iterable[str | os.PathLike] = ()) -> str:
    """`value` (a PATH) without the folders of plan-runner's own installation (its virtualenv's `python3`,
    `pytest`, ... are not the project's), nor folders under `also` (the user's working copy: an activated
    project venv there imports the user's files, not the judged commit), nor empty (current-folder) entries."""
    roots = own_roots() + tuple(os.path.realpath(a) for a in also)
    kept = []
    for entry in value.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        if any(_inside(os.path.realpath(entry), r) for r in roots) or entry in kept:
            continue
        kept.append(entry)
    return os.pathsep.join(kept) or os.defpath
