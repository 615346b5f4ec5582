"""The judge runs nothing another user could have written (docs/security.md, "The trust boundary, shown by attack", invariant 1).

plan-runner starts programs by name (`git`, `sudo`) long after the agent ran. A folder on the way to any of
them that another user can write, or rename entries in, lets that user plant the program: GitHub's Ubuntu
image makes /opt world-writable (`chmod -R 777 /opt`) and puts /opt/pipx_bin first on PATH. (The agent itself
writes nothing outside its area: its room shows the rest of the machine read-only, runner.adapters.sandbox.room.)
So, at import of runner.adapters (`harden_path`):

* every PATH entry is kept only when it, and every folder above it, belongs to root or plan-runner's user
  and nobody else may write it (a sticky folder such as /tmp counts as safe: others cannot rename what
  is not theirs); plan-runner's own process then runs with that PATH, so every subprocess it starts (git
  through GitPython included: its executable is also set absolutely) resolves names there only;
* `sudo`, `git` and `sh` are resolved to absolute paths from those folders;
* `resolve` can also check that plan-runner's own code (its package, every `sys.path` folder, the interpreter as
  executed) is in such folders (`check_code`).

The agent's own PATH is the environment it was given (runner.adapters.sandbox.agentenv): it may use
whatever it likes, nothing of it runs as the judge.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import PlanRunnerError

_REQUIRED = ("git", "sh")


def replaceable(path: str | Path) -> Path | None:
    """The first folder or file on the way to `path` (as written, and as its links resolve) that a user other
    than root and plan-runner's own could write or rename entries in; None when there is none."""
    me = os.geteuid()
    seen: set[str] = set()
    for candidate in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        chain = [*reversed(candidate.parents), candidate]
        for p in chain:
            key = str(p)
            if key in seen:
                continue
            seen.add(key)
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                return p  # missing: whoever may write the folder above could create it
            except OSError:
                return p
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in (0, me):
                    return p
                continue  # the link's own folder is checked; its target is checked as the real path
            if st.st_uid not in (0, me):
                return p
            others = st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid not in (0, os.getegid()))
            if others and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
                return p
            if others and p == candidate:
                return p  # the file itself (or the last folder) writable by others, sticky or not
    return None


@dataclass(frozen=True)
class Tools:
    path: str  # the PATH plan-runner's own subprocesses get: folders only root or plan-runner can write
    dropped: tuple[str, ...]  # PATH entries left out, and why
    git: str
    sh: str
    sudo: str | None
    python: str  # the interpreter as executed (what runs the agent's launcher)

    def which(self, name: str) -> str | None:
        return _which(name, self.path)


def _which(name: str, path: str) -> str | None:
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def resolve(path: str | None = None, *, check_code: bool = True) -> Tools:
    """The trusted PATH and tools for this process (see the module's docstring); raises with what/why/fix."""
    entries = [e for e in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) if e]
    kept: list[str] = []
    dropped: list[str] = []
    for entry in entries:
        if not os.path.isabs(entry):
            dropped.append(f"{entry} (not an absolute path)")
            continue
        if not os.path.isdir(entry):
            continue
        bad = replaceable(entry)
        if bad is not None:
            dropped.append(f"{entry} ({bad} can be written by other users)")
        elif entry not in kept:
            kept.append(entry)
    for system in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if system not in kept and os.path.isdir(system) and replaceable(system) is None:
            kept.append(system)
    safe = os.pathsep.join(kept)
    found = {name: _which(name, safe) for name in (*_REQUIRED, "sudo")}
    for name in _REQUIRED:
        if found[name] is None:
            raise PlanRunnerError(
                what=f"no `{name}` in a folder only root or plan-runner's user can write",
                why="plan-runner runs nothing the agent's user could have written: "
                    + ("; ".join(dropped) if dropped else f"`{name}` is not on PATH"),
                fix=f"install {name} in /usr/bin (the system package), or put a root-owned folder holding it on "
                    "PATH; make folders on PATH writable only by root (`chmod o-w,g-w FOLDER`)")
    python = sys.executable
    problems: list[str] = []
    if check_code:
        for where in _code_paths():
            bad = replaceable(where)
            if bad is not None:
                problems.append(f"{where} (through {bad})")
    if problems:
        raise PlanRunnerError(
            what="plan-runner's own code can be replaced by other users: " + "; ".join(problems[:4]),
            why="the agent's user could rename it and plant a look-alike that runs as plan-runner (with the "
                "tokens and sudo) the next time a module or template is loaded",
            fix="install plan-runner (its venv or package) in a folder owned by root or by the user running it "
                "and writable by no one else (e.g. /usr/local/lib/plan-runner, `chmod -R go-w` it); on GitHub's "
                "hosted image not under /opt or $RUNNER_TOOL_CACHE, which are world-writable")
    return Tools(path=safe, dropped=tuple(dropped), git=str(found["git"]), sh=str(found["sh"]),
                 sudo=found["sudo"], python=python)


def _code_paths() -> list[str]:
    package = Path(__file__).resolve().parents[2]  # the `runner` package
    paths = [sys.executable, str(package)]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and not entry.endswith(".zip"):
            paths.append(entry)
    for folder, dirs, _files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        paths.append(folder)
    out: list[str] = []
    for p in paths:
        if p not in out:
            out.append(p)
    return out


def harden_path() -> None:
    """At import of the sandbox room, before plan-runner runs any program: this process's PATH becomes the
    trusted one (and GitPython's git absolute), so not even the first `git` comes from a folder others can
    write. Never refuses."""
    try:
        tools = resolve(check_code=False)
    except PlanRunnerError:
        return
    os.environ["PATH"] = tools.path
    os.environ["GIT_PYTHON_GIT_EXECUTABLE"] = tools.git


def which(name: str) -> str | None:
    """`name` on this process's PATH: the trusted one once `harden_path` ran (importing runner.adapters does)."""
    return _which(name, os.environ.get("PATH", os.defpath))
