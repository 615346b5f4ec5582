"""The plan's `setup:` commands, run on a fresh checkout before the gates, as the agent's identity (docs/security.md;
docs/usage.md, "The preflight and `setup:`").

They are the project's code (`pip install -e .` runs its setup.py), so they run as the agent's
identity, like the gates. What they produce under `cache:` is kept by plan-runner, out of the
agent's reach, and a cache holds only what the maintainer's code produced:

* it is built from a fresh checkout of the *trusted* commit (the base branch the plan's configuration
  is read from), never from a commit of the agent's, and sessions only restore it, never refresh it;
* it is keyed by the commands, the cache paths and the content of the `key:` files; a judged commit
  whose key files differ from the trusted commit's runs its set-up fresh and caches nothing;
* it is built and restored at one path per use (the gates' tree, the agent's clone), since what
  set-up makes (a virtualenv) names its own path; the gates' copy is restored into plan-runner's read-only
  base (runner.adapters.judge.base), which no untrusted process can write;
* it is read back member by member with checks of our own (runner/adapters/judge/untar.py), on every
  Python the package allows.

Agent code that runs during a session's set-up (a changed setup.py, a module shadowing the standard
library) therefore reaches no later session. Known limit: a key file the commands read but `key:` does
not name is not watched; the cache then holds the base's build of it (still the maintainer's code).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from dataclasses import dataclass

from runner.adapters.git import work as gitwork
from runner.adapters.judge import untar
from runner.adapters.judge.gates import run_command_gate
from runner.adapters.sandbox import fsafe
from runner.adapters.sandbox.identity import Identity
from runner.core.errors import PlanRunnerError
from runner.core.evidence import GateResult
from runner.core.plan import GateConfig, SetupConfig

CACHE_KEEP = 3  # cache archives kept per place (the newest)

SETUP_FIX = ("everything a gate needs beyond the repository's tracked files comes from the plan's `setup:` "
             "(gates run on a fresh checkout of the judged commit, as the agent's user): e.g. `setup: {run: "
             "[\"python3 -m venv .venv\", \".venv/bin/pip install -e .[test]\"], cache: [.venv], key: "
             "[pyproject.toml]}` for a Python project, `setup: {run: [npm ci], cache: [node_modules], key: "
             "[package-lock.json]}` for a Node one; then `plan-runner reply <plan> retry`")


def trusted_commit(repo: str | os.PathLike[str], remote: str | None, base: str) -> str | None:
    """The maintainer's commit: the base branch the plan's configuration is read from (as the session reads it)."""
    for ref in ([f"{remote}/{base}"] if remote else []) + [base]:
        sha = gitwork.ref_sha(repo, ref)
        if sha:
            return sha
    return None


def setup_key(setup: SetupConfig, repo: str | os.PathLike[str], sha: str) -> str:
    h = hashlib.sha256()
    for command in setup.run:
        h.update(b"run\0" + command.encode() + b"\0")
    for path in setup.cache:
        h.update(b"cache\0" + path.encode() + b"\0")
    for path in setup.key:
        text = gitwork.read_file_at(repo, sha, path)
        h.update(b"key\0" + path.encode() + b"\0" + (text or "\0absent").encode() + b"\0")
    return h.hexdigest()[:32]


def _place(cache_dir: Path, workdir: Path) -> Path:
    """The archives built for one path (what set-up makes is tied to where it ran)."""
    return cache_dir / hashlib.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:16]


def archive_path(cache_dir: Path, workdir: Path, key: str) -> Path:
    """Where the archive of `key` built at `workdir` is kept (the Actions cache carries these files across jobs:
    runner/drivers/actions/setup_cache.py)."""
    return _place(cache_dir, workdir) / f"{key}.tar"


def _restore(archive: Path, workdir: Path, roots: tuple[str, ...]) -> bool:
    """Extract the cache into `workdir` (a tree the agent's identity owns) through descriptors only: `workdir`
    is opened from its parent (plan-runner's own folder) without following a link, and everything below it
    is reached from that descriptor (untar, fsafe): no link the agent's identity placed, before or during
    the extraction, is followed."""
    try:
        with fsafe.opened_dir(workdir, below=workdir.parent) as fd:
            untar.extract(archive, workdir, roots, dest_fd=fd)
        return True
    except Exception:  # noqa: BLE001 - refused, truncated, unreadable: a broken cache is dropped, never trusted
        archive.unlink(missing_ok=True)
        return False


def _save(archive: Path, workdir: Path, paths: tuple[str, ...]) -> None:
    """Archive what set-up made in `workdir` (the agent's identity wrote it), read through descriptors only."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_suffix(".tmp")
    try:
        with fsafe.opened_dir(workdir, below=workdir.parent) as fd:
            untar.write(tmp, workdir, paths, source_fd=fd)
    except (OSError, untar.Refused, PlanRunnerError):
        tmp.unlink(missing_ok=True)
        return
    tmp.replace(archive)
    kept = sorted(archive.parent.glob("*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[CACHE_KEEP:]:
        old.unlink(missing_ok=True)


def _run_commands(setup: SetupConfig, workdir: Path, env: Mapping[str, str], identity: Identity,
                  on_event: Callable[[str, str], None]) -> GateResult | None:
    for i, command in enumerate(setup.run, 1):
        on_event("setup", command)
        # seconds, written with their unit: a bare number would be read as minutes again
        gate = GateConfig(name=f"setup {i}", run=command, timeout_minutes=f"{setup.timeout_s}s")
        result = run_command_gate(gate, workdir=workdir, env=env, identity=identity)
        if not result.passed:
            return result.model_copy(update={"error": (result.error or f"exit {result.exit_code}")
                                             + f" (setup command: {command})"})
    return None


def _base_problem(sha: str, result: GateResult) -> GateResult:
    return result.model_copy(update={"setup_problem": (
        f"`setup:` fails on a fresh checkout of the base commit {sha[:12]} too ({result.error}), so no session "
        f"could pass its gates; fix: make the command work on a fresh checkout of the base; " + SETUP_FIX)})


@dataclass(frozen=True)
class CloneSetup:
    """The set-up cache restored into the agent's clone, left there by the clone's update in place
    (agent_clone.prepare's `keep`) and restored again only when the archive is another file or a cache path is
    gone. The clone is the agent's own: what it does to its set-up there is its own business (the gates run on the
    judge's read-only base, and no cache is ever built from the clone), so nothing of it is proven."""

    scratch: Path

    def _record(self, workdir: Path) -> Path:
        return self.scratch / f"setup-{hashlib.sha256(str(workdir).encode()).hexdigest()[:12]}.restored"

    @staticmethod
    def _said(archive: Path, roots: tuple[str, ...]) -> str:
        st = os.stat(archive, follow_symlinks=False)
        return " ".join(map(str, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, *roots)))

    def intact(self, archive: Path, workdir: Path, roots: tuple[str, ...]) -> bool:
        try:
            said = self._record(workdir).read_text(encoding="utf-8")
            return said == self._said(archive, roots) and all(os.path.lexists(workdir / r) for r in roots)
        except OSError:
            return False

    def recorded(self, archive: Path, workdir: Path, roots: tuple[str, ...]) -> None:
        try:
            self.scratch.mkdir(parents=True, exist_ok=True)
            self._record(workdir).write_text(self._said(archive, roots), encoding="utf-8")
        except OSError:
            pass


def run_setup(setup: SetupConfig, *, sha: str, repo: str | os.PathLike[str], workdir: Path, env: Mapping[str, str],
              identity: Identity, cache_dir: Path, trusted_sha: str | None = None,
              checkout: Callable[[str], Path] | None = None,
              on_event: Callable[[str, str], None] = lambda e, d: None,
              keep: CloneSetup | None = None) -> tuple[GateResult, ...]:
    """Set `workdir` (a fresh checkout of `sha`) up; the failed command as a red gate result (empty: all good).
    `keep`: a cache restored into `workdir` (the agent's clone) by an earlier session is not restored again while
    it is there (CloneSetup).

    `checkout(rev)` makes a fresh checkout of `rev` at `workdir` again: with it and `trusted_sha`, a missing
    cache is built from the trusted commit (then `sha` is checked out again and the cache restored), and a
    command that fails is tried on the trusted commit: failing there too makes it a set-up problem. Without
    them nothing is cached or restored."""
    can_probe = checkout is not None and trusted_sha is not None and trusted_sha != sha
    roots = untar.clean_roots(setup.cache)
    if roots and checkout is not None and trusted_sha is not None:
        key = setup_key(setup, repo, sha)
        if key != setup_key(setup, repo, trusted_sha):
            on_event("setup", "the key files differ from the base commit's: set-up runs fresh, nothing is cached")
        else:
            archive = archive_path(cache_dir, workdir, key)
            if not archive.is_file():
                if trusted_sha != sha:
                    workdir = checkout(trusted_sha)
                on_event("setup", f"building the cache {key[:12]} from the base commit {trusted_sha[:12]}")
                failed = _run_commands(setup, workdir, env, identity, on_event)
                if failed is None:
                    _save(archive, workdir, roots)
                if trusted_sha != sha:
                    workdir = checkout(sha)
                elif failed is None:
                    if keep is not None and archive.is_file():  # the archive was made of exactly these files
                        keep.recorded(archive, workdir, roots)
                    return ()  # built right here: this checkout is set up
                if failed is not None:
                    return (_base_problem(trusted_sha, failed),)
            if archive.is_file():
                if keep is not None and keep.intact(archive, workdir, roots):
                    on_event("setup", f"cache {key[:12]} in place")
                    return ()
                restored = _restore(archive, workdir, roots)
                if restored:
                    if keep is not None:
                        keep.recorded(archive, workdir, roots)
                    on_event("setup", f"cache {key[:12]} restored")
                    return ()
                on_event("warning", f"the set-up cache {key[:12]} could not be restored: it was dropped")
                workdir = checkout(sha)
    failed = _run_commands(setup, workdir, env, identity, on_event)
    if failed is None:
        return ()
    if can_probe and checkout is not None and trusted_sha is not None:  # (can_probe says they are)
        base_dir = checkout(trusted_sha)
        on_base = _run_commands(setup, base_dir, env, identity, on_event)
        checkout(sha)  # the gates judge the judged commit, set up or not
        if on_base is not None:
            return (_base_problem(trusted_sha, failed),)
    elif trusted_sha == sha:
        return (_base_problem(sha, failed),)
    return (failed,)


def _untracked_tops(repo: str | os.PathLike[str], sha: str, workdir: Path, roots: tuple[str, ...]) -> list[str]:
    """The topmost paths in `workdir` that `sha` does not track (what set-up made), cache paths excluded."""
    tracked = set(gitwork.git_text(repo, "ls-tree", "-r", "--name-only", "-z", sha).split("\0")) - {""}
    dirs = {str(Path(p).parent) for p in tracked}
    dirs |= {str(parent) for d in list(dirs) for parent in Path(d).parents}
    found: list[str] = []
    walk = [""]
    while walk and len(found) < 1000:
        rel = walk.pop()
        try:  # through descriptors from the area: a folder swapped for a link is never listed (fsafe)
            with fsafe.opened_dir(workdir / rel if rel else workdir, below=workdir.parent) as fd:
                entries = []
                for name in sorted(os.listdir(fd)):
                    try:
                        entries.append((name, stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)))
                    except OSError:
                        continue
        except (OSError, PlanRunnerError):
            continue
        for name, is_dir in entries:
            path = f"{rel}/{name}" if rel else name
            if path == ".git" or path in roots or path in tracked:
                continue
            if path in dirs and is_dir:
                walk.append(path)
            else:
                found.append(path)
    return found


def _exclude(workdir: Path, made: list[str]) -> None:
    """Append `made` to the clone's .git/info/exclude, reached through descriptors from the area (fsafe): a
    `.git` or `info` the agent's identity made a link is refused, never written through."""
    try:
        with fsafe.opened_dir(workdir / ".git", below=workdir.parent) as git_fd:
            try:
                os.mkdir("info", 0o755, dir_fd=git_fd)
            except FileExistsError:
                pass
            info = fsafe.open_dir_at("info", git_fd)
            try:
                fd = os.open("exclude", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=info)
            finally:
                os.close(info)
    except (OSError, PlanRunnerError):
        return
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write("\n# made by the plan's setup: (plan-runner)\n" + "".join(f"/{p}\n" for p in made))


def set_up_clone(setup: SetupConfig, *, sha: str, repo: str | os.PathLike[str], workdir: Path, env: Mapping[str, str],
                 identity: Identity, cache_dir: Path, trusted_sha: str | None, checkout: Callable[[str], Path],
                 reclone: Callable[[], Path], on_event: Callable[[str, str], None] = lambda e, d: None,
                 keep: CloneSetup | None = None) -> str | None:
    """Run `setup:` in the agent's own clone (at `sha`) before the agent starts, so it can run the gates it is
    judged by; the same commands and cache rules as the gates' (the cache of this path is built from a checkout
    of the trusted commit, then the clone is made again). What set-up made is excluded from the clone's git
    (never committed as the agent's leftovers). A failure, in words (the agent is told, nobody is blamed)."""
    def again(rev: str) -> Path:
        return reclone() if rev == sha else checkout(rev)
    failed = run_setup(setup, sha=sha, repo=repo, workdir=workdir, env=env, identity=identity, cache_dir=cache_dir,
                       trusted_sha=trusted_sha, checkout=again, on_event=on_event, keep=keep)
    roots = untar.clean_roots(setup.cache)
    made = [*roots, *_untracked_tops(repo, sha, workdir, roots)]
    git_dir = workdir / ".git"
    if made and git_dir.is_dir() and not git_dir.is_symlink():
        _exclude(workdir, made)  # the clone is plan-runner's uid's (the room's): nothing to take back first
    if failed:
        return failed[0].error or "a set-up command failed"
    return None
