"""Preflight (docs/usage.md): before a run's first session, check what a session needs.

A setup mistake (no `claude` on the PATH, no API key for the plan's backend, a gate whose
command does not exist) would otherwise become recorded sessions: TimedOut starts, a park
with "Please run /login", GatesRed blamed on the agent. The preflight finds these first
and stops with what/why/fix, recording nothing. It reads the environment and the disk only:
no network, no git writes, no agent.

`problems(...)` returns every problem found (errors stop the run, warnings are printed);
`check(...)` raises one PlanRunnerError listing the errors.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runner.adapters.sandbox.agentenv import backend_agent_env, build_agent_env, clean_path
from runner.backends.common.base import executable_of
from runner.core.backend_spec import spec_of
from runner.core.errors import PlanRunnerError
from runner.core.plan import GateConfig, Plan
from runner.adapters.sandbox import identity as sandbox

# Words a shell runs without looking anything up on the PATH.
_SHELL_WORDS = frozenset("""
! [ [[ { } ( ) . : alias bg bind break builtin case cd command compgen complete continue declare dirs disown
echo enable eval exec exit export false fc fg for function getopts hash help history if jobs kill let local
logout mapfile popd printf pushd pwd read readarray readonly return select set shift shopt source suspend test
time times trap true type typeset ulimit umask unalias unset until wait while
""".split())

@dataclass(frozen=True)
class Problem:
    level: Literal["error", "warning"]
    what: str
    why: str
    fix: str

    def line(self) -> str:
        return f"{self.level}: {self.what}\n  why: {self.why}\n  fix: {self.fix}"


def _which(name: str, env: Mapping[str, str], cwd: Path) -> str | None:
    """Where a command word resolves: a path (relative to `cwd`) or a name on the environment's PATH."""
    if "/" in name:
        path = Path(name) if Path(name).is_absolute() else cwd / name
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(name, path=env.get("PATH", os.defpath))


def _login_file(backend: str, env: Mapping[str, str]) -> Path | None:
    """The file a CLI's own login (`codex login`) leaves, if the agent can see it (the spec's `login_file`).
    Claude Code is always given a private CLAUDE_CONFIG_DIR (docs/claude-code.md): a `claude` login is not used;
    without CODEX_HOME the Codex backend points Codex at its own folder, where a login elsewhere is unseen."""
    spec = spec_of(backend)
    if spec is None or spec.login_file is None or not env.get(spec.login_file[0]):
        return None
    candidate = Path(env[spec.login_file[0]]) / spec.login_file[1]
    return candidate if candidate.is_file() else None


def agent_executable(plan: Plan, env: Mapping[str, str]) -> tuple[str | None, str]:
    """(the command the backend will start, the setting that names it) or (None, "") for an in-process backend."""
    agent = plan.config.agent
    spec = spec_of(agent.backend)
    if spec is not None and spec.executable is not None:
        return executable_of(agent.backend, agent, env), f"agent.executable (or {spec.executable.override_env})"
    if agent.backend == "command":
        return agent.executable, "agent.executable"
    return None, ""


def _install_hint(backend: str) -> str:
    spec = spec_of(backend)
    return spec.install_hint if spec is not None else ""


def _check_agent(plan: Plan, env: Mapping[str, str], repo: Path) -> list[Problem]:
    agent = plan.config.agent
    found: list[Problem] = []
    exe, setting = agent_executable(plan, env)
    # The agent starts on its own PATH: yours without plan-runner's installation and your working copy's folders
    # (runner.drivers.session.phases), so a name is looked up there, as it will be.
    agent_env = {**env, "PATH": clean_path(env.get("PATH", ""), also=(repo,))}
    if agent.backend == "command" and not exe:
        found.append(Problem("error", "the command backend needs `agent.executable`",
                             "no agent CLI is named in the plan's front matter", _install_hint("command")))
    elif exe is not None and _which(exe, agent_env, repo) is None:
        yours = _which(exe, env, repo)
        if yours is not None:
            found.append(Problem("error", f"the agent's executable {exe!r} ({agent.backend} backend) is not on the "
                                          "agent's PATH",
                                 f"it is found at {yours}, in plan-runner's own installation or your working copy, "
                                 "which the agent's PATH leaves out: the session could not start it",
                                 f"name it by a path the agent can run (`agent.executable: {yours}` if that is "
                                 "outside both), or install it on the machine (e.g. /usr/local/bin)"))
        else:
            found.append(Problem("error", f"the agent's executable {exe!r} ({agent.backend} backend) cannot be found",
                                 f"it is neither a path to an executable file nor a program on the PATH ({setting})",
                                 _install_hint(agent.backend)))
    for name, server in agent.mcp_servers.items():
        if server.command is not None and _which(server.command, agent_env, repo) is None:
            found.append(Problem("error", f"MCP server {name!r}: command {server.command!r} cannot be found",
                                 "the agent's CLI starts it for every session; without it the plan's tools are missing "
                                 "and every session would work without them",
                                 "install it on the machine (or name it by its path), or correct `agent.mcp_servers` "
                                 "in the plan"))
    if agent.backend == "script":
        if not agent.script:
            found.append(Problem("error", "the script backend needs `agent.script`", "no session script is named",
                                 "add `script: path/to/sessions.yaml` under `agent:`"))
        else:
            path = Path(agent.script) if Path(agent.script).is_absolute() else repo / agent.script
            if not path.is_file():
                found.append(Problem("error", f"the agent's script {agent.script} does not exist",
                                     f"no file at {path}", "correct `agent.script` in the plan"))
    found += credential_problems(agent.backend, env, agent.passed_env, agent.provider)
    return found


def credential_problems(backend: str, env: Mapping[str, str], allow: tuple[str, ...] = (),
                        provider: str | None = None) -> list[Problem]:
    """The backend's credentials as its agent will see them (after the allow-list): the way of paying `env`
    selects (runner.core.backend_spec: an API key, a subscription token, Bedrock, Vertex, a login file) must be
    complete."""
    spec = spec_of(backend)
    if spec is None or not spec.auth:
        return []
    agent_env = backend_agent_env(env, backend, allow, provider)
    way = spec.selected_auth(agent_env, provider)
    if way is None:
        return []
    missing = way.missing(agent_env)
    if way.switch is None:
        if not missing or _login_file(backend, agent_env) is not None:
            return []
        login = {"claude-code": " (a `claude` /login is not used: each session gets a private config dir)",
                 "codex": " (a `codex login` is not used: the backend gives Codex its own CODEX_HOME "
                          "unless you set CODEX_HOME)"}.get(backend, "")
        names = way.needs[0]
        return [Problem("error", f"no credentials for the {backend} backend",
                        f"none of {', '.join(names)} is set in plan-runner's environment, so the agent could not "
                        "authenticate and every session would fail the same way",
                        f"{way.fix}{login}; then run again")]
    found = []
    if missing:
        found.append(Problem("error", f"{way.label} for the {backend} backend is incomplete",
                             f"{'the plan says `provider: ' + provider + '`' if provider else way.switch + ' is set'}, "
                             f"so the agent authenticates with {way.label}, and "
                             f"{'; '.join(missing)} is not set in plan-runner's environment: every session "
                             "would fail the same way", f"{way.fix}; then run again"))
    if way.file_env and agent_env.get(way.file_env) and not Path(agent_env[way.file_env]).is_file():
        found.append(Problem("error", f"{way.file_env} names no file",
                             f"{agent_env[way.file_env]} does not exist, and {way.label} reads the agent's "
                             "credentials from it", f"{way.fix}; then run again"))
    return found


def _first_word(command: str) -> str | None:
    """The program a shell command starts, when plan-runner can tell (None: a builtin, an expansion...)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None  # the shell parses it its own way; let the gate say so
    words = [w for w in words if not ("=" in w and w.split("=", 1)[0].isidentifier())][:1]  # skip VAR=value
    if not words:
        return None
    word = words[0]
    for sep in (";", "&&", "||", "|", "&"):
        word = word.split(sep, 1)[0]
    if not word or word in _SHELL_WORDS or any(c in word for c in "$`*?<>(){}"):
        return None  # a builtin, a keyword or an expansion: only the shell knows
    return word


def _untracked(repo: Path, path: Path) -> bool:
    """`path` (in the user's working copy) exists but git does not track it: a fresh checkout lacks it."""
    try:
        rel = path.resolve().relative_to(repo.resolve())
    except (ValueError, OSError):
        return False
    import subprocess

    done = subprocess.run(["git", "-C", str(repo), "ls-files", "--error-unmatch", "--", str(rel)],
                          capture_output=True)
    return done.returncode == 1  # 128: not a repository (nothing to tell)


_SETUP_HINT = ("add a `setup:` to the plan that makes it on a fresh checkout (a Python project: `setup: {run: "
               "[\"python3 -m venv .venv\", \".venv/bin/pip install -e .[test]\"], cache: [.venv], key: "
               "[pyproject.toml]}`, then run the gate as `.venv/bin/pytest`; a Node one: `setup: {run: [npm ci], "
               "cache: [node_modules], key: [package-lock.json]}`)")


def command_problem(label: str, command: str | None, env: Mapping[str, str], repo: Path, *,
                    cwd: str | None = None, checkout: Path | None = None, extra_env: Mapping[str, str] | None = None,
                    required: bool = True, made: Collection[str] = ()) -> Problem | None:
    """A command whose first word would not start where it runs: on a fresh checkout (`checkout`, set up
    already; else `repo`, the user's working copy, which may hold ignored files a checkout lacks), with the
    gates' PATH (`env`'s without plan-runner's own installation and without folders of `repo`). `required=False` (an optional gate): a warning, since its result decides
    nothing. `made`: paths an earlier `setup:` command makes (`made_by_setup`); without a checkout, a
    command under one of them is not reported (the set-up has not run here, and will before it)."""
    if command is None:
        return None
    word = _first_word(command)
    if word is None:
        return None
    if checkout is None and "/" in word and _under(word, made):
        return None
    level: Literal["error", "warning"] = "error" if required else "warning"
    judged = ("every session would be judged red for it" if required else
              "it would be red in every session's report; the gate is optional (`required: false`), so it decides "
              "nothing")
    root = checkout if checkout is not None else repo
    where = root / cwd if cwd else root
    gate_env = {**env, **(extra_env or {})}
    gate_env["PATH"] = clean_path(gate_env.get("PATH", ""), also=(repo,))
    found = _which(word, gate_env, where)
    if found is not None:
        if "/" in word and checkout is None and _untracked(repo, Path(found)):
            return Problem("warning", f"{label}: {word} is not tracked by git",
                           "gates and `setup:` run on a fresh checkout of the judged commit (tracked files only), "
                           "so it is there only if the plan's `setup:` makes it",
                           f"commit it, or {_SETUP_HINT}")
        return None
    user_cwd = repo / cwd if cwd else repo
    mine = _which(word, {**env, **(extra_env or {})}, user_cwd)
    if "/" in word:
        if mine is not None:
            return Problem(level, f"{label}: {word} is not in a fresh checkout of the base commit",
                           "it exists in your working copy but git does not track it (ignored or untracked), and "
                           "gates run on a fresh checkout of the judged commit as the agent's user: it would exit "
                           f"127 and {judged}", _SETUP_HINT)
        return Problem("warning", f"{label}: {word} does not exist yet",
                       "the command names a file that is not in the repository now",
                       "ignore this if the plan's work creates it; else correct the command, or " + _SETUP_HINT)
    if mine is not None:
        return Problem(level, f"{label}: command {word!r} is not on the gates' PATH",
                       f"it is found at {mine}, in plan-runner's own installation or your working copy, which the "
                       f"gates never see: they run on a fresh checkout as the agent's user, so it would exit 127 "
                       f"and {judged}",
                       f"install it for the project in the plan's `setup:` and name it by its path there; "
                       f"{_SETUP_HINT}")
    return Problem(level, f"{label}: command {word!r} is not found",
                   f"`{word}` is not a shell builtin and not on the PATH, so it would exit 127 and {judged}",
                   f"install {word} on the machine, or make it in the plan's `setup:`; or correct the command "
                   f"in the plan ({_SETUP_HINT})")


def gate_command_problem(gate: GateConfig, env: Mapping[str, str], repo: Path, *,
                         checkout: Path | None = None) -> Problem | None:
    """A command gate whose first word resolves to nothing where the gate runs (the shell would exit 127)."""
    return command_problem(f"gate {gate.name!r}", gate.run, env, repo, cwd=gate.cwd, checkout=checkout,
                           extra_env=gate.env)


@dataclass(frozen=True)
class PlanCommand:
    label: str
    command: str
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    required: bool = True  # False: an optional gate, whose result decides nothing
    made: frozenset[str] = frozenset()  # paths the `setup:` commands before it make


def made_by_setup(commands: Sequence[str], cache: Sequence[str] = ()) -> frozenset[str]:
    """The relative paths a list of `setup:` commands makes, as far as their words say: every word that is a
    relative path (`.venv` of `python3 -m venv .venv`, `node_modules` of `--prefix node_modules`), and the
    set-up's `cache:` paths (what it makes, by the plan's own account)."""
    out = {c.strip("/") for c in cache if c.strip("/")}
    for command in commands:
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        for word in words[1:]:
            word = word.split("=", 1)[-1].strip("/")
            if word and not word.startswith(("-", "/", "~", "$")) and not re.search(r"[*?\[\]{}<>|;&]", word):
                out.add(word)
    return frozenset(out)


def _under(word: str, made: Collection[str]) -> bool:
    path = word[2:] if word.startswith("./") else word
    return any(path == m or path.startswith(m + "/") for m in made)


def commands_of(plan: Plan) -> list[PlanCommand]:
    """Every gate, `verify:` and `setup:` command of the plan, with what the `setup:` before it makes."""
    setup = plan.config.setup
    everything = made_by_setup(setup.run, setup.cache) if setup is not None else frozenset()
    out = [PlanCommand(f"gate {g.name!r}", g.run, g.cwd, g.env, g.required, everything)
           for g in plan.config.gates if g.run]
    out += [PlanCommand(f"verify: of {c.id}", c.verify, made=everything) for c in plan.checkpoints if c.verify]
    if setup is not None:
        out += [PlanCommand(f"setup: command {i}", command, made=made_by_setup(setup.run[:i - 1]))
                for i, command in enumerate(setup.run, 1)]
    return out


def one_fix_each(found: list[Problem]) -> list[Problem]:
    """The same fix is given once: a later problem whose fix is word for word an earlier one's points to it."""
    first: dict[str, str] = {}
    out = []
    for p in found:
        if p.fix in first and len(p.fix) > 60:
            p = Problem(p.level, p.what, p.why, f"the same as for {first[p.fix]}")
        else:
            first.setdefault(p.fix, p.what)
        out.append(p)
    return out


def problems(plan: Plan, env: Mapping[str, str], repo: Path,
             checkout: Path | None = None, setup_failed: str | None = None, *, agent: bool = True,
             commands: bool = True) -> list[Problem]:
    """Every problem a session of `plan` would meet, errors first. `checkout`: a fresh checkout of the base
    commit, after `setup:` (`setup_failed`: what failed there), where the commands are resolved.
    `agent`/`commands`: check the agent's program and credentials / the plan's commands."""
    found = _check_agent(plan, env, repo) if agent else []
    if not commands:
        return sorted(found, key=lambda p: p.level != "error")
    gate_env = build_agent_env(env, allow=plan.config.agent.env, api_key_vars=())  # the gates' environment
    if setup_failed:
        error, _, said = setup_failed.partition("\n")
        found.append(Problem("error", "`setup:` fails on a fresh checkout of the base commit",
                             f"{error}; every session's gates would run on an environment that is not set up"
                             + (f"; the command's last lines:\n{said}" if said else ""),
                             "make the command work on a fresh clone of the repository (run it there by hand), "
                             "then run again"))
    for c in commands_of(plan):
        if setup_failed and c.label.startswith("setup:"):
            continue
        word = _first_word(c.command)
        if setup_failed and word is not None and "/" in word and _under(word, c.made):
            continue  # what the failed `setup:` did not make is its consequence, said once above (no "add a setup:")
        problem = command_problem(c.label, c.command, gate_env, repo, cwd=c.cwd, checkout=checkout, extra_env=c.env,
                                  required=c.required, made=c.made)
        if problem is not None:
            found.append(problem)
    return one_fix_each(sorted(found, key=lambda p: p.level != "error"))


def check(plan: Plan, env: Mapping[str, str], repo: Path, *, warn=lambda text: None,
          checkout: Path | None = None, setup_failed: str | None = None) -> None:
    """Raise one PlanRunnerError for the errors found; hand each warning to `warn`."""
    _raise(plan, problems(plan, env, repo, checkout, setup_failed), warn)


def _raise(plan: Plan, found: list[Problem], warn) -> None:
    for p in found:
        if p.level == "warning":
            warn(p.line())
    errors = [p for p in found if p.level == "error"]
    if not errors:
        return
    if len(errors) == 1:
        e = errors[0]
        then = "\n  " if "\n" in e.why else "; "  # after a command's quoted lines, on a line of its own
        raise PreflightError(what=f"preflight: {e.what}", why=f"{e.why}{then}nothing was run or recorded", fix=e.fix)
    raise PreflightError(
        what=f"preflight: {len(errors)} problems stop {plan.path} before its first session",
        why="; ".join(e.what for e in errors) + "; nothing was run or recorded",
        fix="\n".join(f"{i}. {e.fix}" for i, e in enumerate(errors, 1)))


class PreflightError(PlanRunnerError):
    """A setup problem found before any session: nothing was recorded."""


def before_first_session(ws, ports, *, warn=lambda text: None, session=None, full: bool = False) -> None:
    """The preflight of `run`/`session`: skipped when no session would start (the plan is parked or finished, or
    only the finish's pull request or a park is due).
    `session`: the state as the caller read it already (no second fetch).
    `full`: check the commands on a fresh, set-up checkout of the base even when the plan has sessions already
    (`run` does, once per run). A later session job checks the agent only: its commands were checked before the
    plan's first session, and a command the maintainer broke since is a set-up problem the session itself
    records as NeedsHuman, blaming no one; a second checkout of the whole tree per session is not worth it
    (docs/performance.md, section 1)."""
    from runner.core.policy import folded
    from runner.drivers.session import load_trusted_plan

    from runner.core.actions import RunSession, Wait
    from runner.core.policy import decide_start

    if session is not None:
        plan, state, current = session.trusted, session.state, session.plan
    else:
        plan, _ = load_trusted_plan(ws)
        entries, _ = ports.store.read(plan.id)
        state = folded(entries)  # from the stored snapshot when it holds: no entry parsed
        current = plan
    if state.parked or state.finished or not isinstance(decide_start(state, current), (RunSession, Wait)):
        return  # no agent will run (only a park or the finish's pull request is due): nothing of it to check
    from runner.drivers.session import isolation_of

    _raise(plan, problems(plan, ws.env, ws.repo, commands=False), warn)  # the agent: no checkout needed
    if state.sessions and not full:
        return
    from runner.adapters.sandbox import agent_clone

    # The plan's base (judge.base: written by the judge alone, under its lock) checked out at the trusted commit and
    # set up: the first session's gates then bring it to their commit incrementally (one write of the tree). What is
    # writable (a set-up's checkout, the mount point) is in the plan's own area while no session uses it (its in-use
    # lock taken alone), so the set-up cache is built at the path the gates run in and the first session restores
    # it instead of running `setup:` again (a venv names its own path); else in an area of this preflight's own:
    # two jobs starting the plan's first session at once both run a preflight, and the agent of the one that wins
    # may be running while the other's preflight sets up. The base's lock is taken first, waiting, and the in-use
    # lock only tried: a session takes them in that order (the base, then the area), so neither waits on the other.
    from runner.adapters.judge.base import BaseTree

    plan_area = agent_clone.area_for(ws.repo, plan.id)
    agent_clone.own_root(plan_area, ws.repo)
    with sandbox.leased(isolation_of(ws, plan), actions=ws.actions, repo=ws.repo) as identity, \
            BaseTree(plan_area, Path(ws.repo)).held():
        alone = agent_clone.hold_alone(plan_area)
        own = plan_area if alone is not None else agent_clone.area_for(ws.repo, f"{plan.id}~preflight-{os.getpid()}")
        try:
            gates = _as_it_will_run(ws, plan, identity, own)
            if gates is None or gates.trusted is None:
                _raise(plan, problems(plan, ws.env, ws.repo, agent=False), warn)
                return
            gates.tree(gates.trusted)  # (the base is held: above)
            gates.close()
            failed = setup_failure(gates.failures[0]) if gates.failures else None
            _raise(plan, problems(plan, ws.env, ws.repo, gates.host, failed, agent=False), warn)
        finally:
            if alone is None:
                agent_clone.discard_area(own, identity)  # in the background: nothing deleted on the critical path
            else:  # the plan's own: its set-up checkout is moved aside when the session's gates show the base
                os.close(alone)


def _as_it_will_run(ws, plan: Plan, identity, own):
    """The plan's base at the trusted commit, set up as the gates' will be (as the agent's user, with the gates'
    environment), shown in the preflight's own area `own` (runner.drivers.session.phases.gates_tree_for)."""
    from runner.adapters.judge import setup as setup_mod
    from runner.adapters.sandbox import agent_clone
    from runner.drivers.session.phases import gates_tree_for

    trusted = setup_mod.trusted_commit(ws.repo, ws.remote, plan.config.base)
    if trusted is None:
        return None
    (ws.scratch_dir / plan.id).mkdir(parents=True, exist_ok=True)
    return gates_tree_for(ws, plan, identity, agent_clone.area_for(ws.repo, plan.id), shown=own)


def setup_failure(result, lines: int = 12) -> str:
    """What failed in `setup:`: the error, and the command's last lines of output (what it said about why)."""
    said = [line for line in (result.output_tail or "").rstrip().splitlines() if line.strip()][-lines:]
    text = result.error or "a set-up command failed"
    return text + ("\n" + "\n".join(f"    | {line}" for line in said) if said else "")
