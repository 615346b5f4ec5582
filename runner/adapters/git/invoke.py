"""Running git: the one place a git process is started, with plan-runner's identity and the settings that keep it
from running code or following indirections someone else could have planted; and the long-lived object reader.

plan-runner's own commits (WIP leftovers, reverts) are made under a fixed identity with signing and hooks off: an
unattended job must not hang on a GPG prompt or be blocked by a pre-commit hook while saving the agent's work."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from git import Git
from git.exc import GitCommandError, GitCommandNotFound

from runner.core.errors import PlanRunnerError


WIP_TRAILER = "Plan-Runner-WIP"
REVERT_TRAILER = "Plan-Runner"
BOT_NAME = "plan-runner"
BOT_EMAIL = "plan-runner@users.noreply.github.com"

# Identity and non-interactivity for commands that create objects or talk to a remote.
BOT_ENV = {
    "GIT_AUTHOR_NAME": BOT_NAME,
    "GIT_AUTHOR_EMAIL": BOT_EMAIL,
    "GIT_COMMITTER_NAME": BOT_NAME,
    "GIT_COMMITTER_EMAIL": BOT_EMAIL,
    "GIT_TERMINAL_PROMPT": "0",
}
_NO_SIGN = ("-c", "commit.gpgsign=false")
# plan-runner's own git never runs code or follows indirections someone else could have planted:
# no hooks, no fsmonitor, no replace objects, no pager (docs/security.md, "The mechanism"). Nor does it start
# a background `gc --auto` (a repository of many loose objects): a detached gc still running when the agent starts would
# rewrite .git (info/refs, packs) during the agent's run, read by the guard as the agent's tampering.
_JUDGE_CONFIG = (("core.hooksPath", os.devnull), ("core.fsmonitor", "false"), ("core.untrackedCache", "false"),
                 ("protocol.ext.allow", "never"), ("gc.auto", "0"), ("maintenance.auto", "false"))


def judge_git_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that sanitise one git command, appended after any `GIT_CONFIG_*` entries already in
    this process's environment or in `base` (the push credentials live there and must survive)."""
    merged = {**os.environ, **(base or {})}
    try:
        n = int(merged.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        n = 0
    env = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_PAGER": "cat", "GIT_CONFIG_COUNT": str(n + len(_JUDGE_CONFIG))}
    for i, (key, value) in enumerate(_JUDGE_CONFIG, n):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


class RemoteAuth(Protocol):
    """plan-runner's credentials for the remote (the action's push token, runner.drivers.actions.push_auth): asked
    before each git command that talks to the remote, and told when the remote refused them."""

    def before_remote(self) -> None:
        """Make the credentials current (a token close to expiry is replaced)."""

    def refused(self, stderr: str) -> bool:
        """The remote refused the credentials (`stderr`, git's words): True when others are in place to try once
        more."""


_REMOTE_AUTH: list[RemoteAuth] = []  # at most one, for the process (the job's step)
_REMOTE_VERBS = frozenset({"push", "fetch", "ls-remote"})
# git's words for credentials a smart-HTTP remote refused: 401 (asks for a login git may not prompt for) or 403.
AUTH_REFUSED = re.compile(r"Authentication failed|could not read Username|terminal prompts disabled|"
                          r"The requested URL returned error: 40[13]|Invalid username or (password|token)|"
                          r"Permission to \S+ denied|Write access to repository not granted", re.IGNORECASE)


@contextmanager
def remote_auth(auth: RemoteAuth) -> Iterator[RemoteAuth]:
    """`auth` for every git command of this process that talks to a remote, while the block runs."""
    _REMOTE_AUTH.append(auth)
    try:
        yield auth
    finally:
        _REMOTE_AUTH.remove(auth)


def current_remote_auth() -> RemoteAuth | None:
    return _REMOTE_AUTH[-1] if _REMOTE_AUTH else None


def _verb(args: tuple[str, ...]) -> str:
    """The git subcommand of `args` (past `-c key=value` and other leading options)."""
    i = 0
    while i < len(args):
        if args[i] in ("-c", "-C"):
            i += 2
            continue
        if args[i].startswith("-"):
            i += 1
            continue
        return args[i]
    return ""


def run_git(repo: str | os.PathLike[str], *args: str, data: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """Run one git command in `repo`; stdout as bytes, untouched (no newline stripped).

    Raises GitCommandError on a non-zero exit (its `stderr` says why). A command that talks to the remote asks
    the process's RemoteAuth first, and once more after a refusal when it put other credentials in place.
    """
    auth = _REMOTE_AUTH[-1] if _REMOTE_AUTH and _verb(args) in _REMOTE_VERBS else None
    if auth is None:
        return _run_git(repo, *args, data=data, env=env)
    auth.before_remote()
    try:
        return _run_git(repo, *args, data=data, env=env)
    except GitCommandError as exc:
        if not AUTH_REFUSED.search(stderr_of(exc)) or not auth.refused(stderr_of(exc)):
            raise
    return _run_git(repo, *args, data=data, env=env)


def _run_git(repo: str | os.PathLike[str], *args: str, data: bytes | None = None,
             env: dict[str, str] | None = None) -> bytes:
    g = Git(str(repo))
    kwargs: dict[str, Any] = dict(stdout_as_string=False, strip_newline_in_stdout=False,
                                  env={**BOT_ENV, **(env or {}), **judge_git_env(env)})
    try:
        if data is None:
            return g.execute(["git", *args], **kwargs)
        # GitPython feeds stdin from a real file only.
        with tempfile.TemporaryFile() as stdin:
            stdin.write(data)
            stdin.seek(0)
            return g.execute(["git", *args], istream=stdin, **kwargs)
    except GitCommandNotFound as exc:
        raise PlanRunnerError(
            what="git is not installed or not on PATH",
            why=str(exc),
            fix="install git (2.31 or newer) and make sure `git --version` works in this job",
        ) from None


def git_text(repo: str | os.PathLike[str], *args: str) -> str:
    return run_git(repo, *args).decode("utf-8", "replace").strip()


def stderr_of(exc: GitCommandError) -> str:
    err = exc.stderr
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    return (err or "").strip().removeprefix("stderr:").strip().strip("'").strip()


def _fail(what: str, exc: GitCommandError, fix: str) -> PlanRunnerError:
    return PlanRunnerError(what=what, why=stderr_of(exc) or str(exc), fix=fix)


ZERO = "0" * 40


class CatFile:
    """One long-lived `git cat-file --batch`: every object read of a repository without a process each."""

    def __init__(self, repo: str | os.PathLike[str]) -> None:
        self.proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={**os.environ, **BOT_ENV, **judge_git_env()})
        # closed by its owner, else when it is collected, else at exit (a finalizer runs then too)
        self._finalizer = weakref.finalize(self, _close, self.proc)
        self._lock = threading.Lock()  # one question and its answer at a time, whichever thread asks

    def get(self, spec: str) -> tuple[bytes, bytes] | None:
        """(type, content) of `spec`, or None when it does not name an object."""
        got = self.get_with_sha(spec)
        return None if got is None else (got[1], got[2])

    def get_with_sha(self, spec: str) -> tuple[str, bytes, bytes] | None:
        """(sha, type, content) of `spec`, or None when it does not name an object. A newline would end the
        query early and start another: such a spec is refused (git names no object with one)."""
        if "\n" in spec or "\r" in spec:
            return None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(spec.encode("utf-8", "surrogateescape") + b"\n")
            self.proc.stdin.flush()
            header = self.proc.stdout.readline()
            if not header:
                raise PlanRunnerError(what="git cat-file stopped answering", why=f"reading {spec!r}",
                                      fix="run again; if it repeats, run `git fsck` on the repository")
            parts = header.split()
            if len(parts) != 3 or not parts[2].isdigit():
                return None  # "<spec> missing" or "ambiguous"
            data = self.proc.stdout.read(int(parts[2]) + 1)[:-1]
        return parts[0].decode(), parts[1], data

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self._finalizer()


def _close(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
