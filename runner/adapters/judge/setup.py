"""The plan's `setup:` commands, run on a fresh checkout before the gates, as the agent's identity (docs/security.md;
docs/usage.md, "The preflight and `setup:`").

They are the project's code (`pip install -e .` runs its setup.py), so they run as the agent's
identity, like the gates. What they produce under `cache:` is kept by plan-runner, out of the
agent's reach, and a cache holds only what the maintainer's code produced:

* it is built from a fresh checkout of the *trusted* commit (the base branch the plan's configuration
  is read from), never from a commit of the agent's, and sessions only restore it, never refresh it;
* it is keyed by the commands, the cache paths and the content of the `key:` files; a judged commit
  whose key files differ from the trusted commit's runs its set-up fresh and caches nothing;
* it is built and restored at one path per use (the gates' tree, the agent's tree), since what
  set-up makes (a virtualenv) names its own path; the gates' copy is restored into plan-runner's read-only
  base (runner.adapters.judge.base), the agent's into its set-up layer (`agent_layer`: a read-only layer of the
  agent's tree), which no untrusted process can write;
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

from runner.adapters.git import work as gitwork
from runner.adapters.judge import untar
from runner.adapters.judge.gates import run_command_gate
from runner.adapters.sandbox import agent_clone, fsafe
from runner.adapters.sandbox.agent_clone import AgentArea
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


def run_setup(setup: SetupConfig, *, sha: str, repo: str | os.PathLike[str], workdir: Path, env: Mapping[str, str],
              identity: Identity, cache_dir: Path, trusted_sha: str | None = None,
              checkout: Callable[[str], Path] | None = None,
              on_event: Callable[[str, str], None] = lambda e, d: None) -> tuple[GateResult, ...]:
    """Set `workdir` (a fresh checkout of `sha`) up; the failed command as a red gate result (empty: all good).

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
                    return ()  # built right here: this checkout is set up
                if failed is not None:
                    return (_base_problem(trusted_sha, failed),)
            if archive.is_file():
                restored = _restore(archive, workdir, roots)
                if restored:
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


def agent_layer(setup: SetupConfig | None, *, sha: str, repo: str | os.PathLike[str], area: AgentArea,
                identity: Identity, env: Mapping[str, str], cache_dir: Path, trusted_sha: str | None,
                on_event: Callable[[str, str], None] = lambda e, d: None) -> tuple[bool, str | None]:
    """The agent's set-up layer (AgentArea.setup_layer, plan-runner's own folder: a read-only layer of the agent's
    tree above the base, never written by the agent), before agent_clone.prepare: the set-up cache of `sha` restored
    there at the path the agent's tree is shown at (what set-up makes, a virtualenv, names its path, so the gates'
    copy in the base, made at `gates/`, would not run there). It is built, when missing, from a checkout of the
    trusted commit at that path, and restored only when it is another archive than the one the layer holds.
    (whether the layer holds the set-up, a failure in words). False: nothing can be cached (no `cache:`, key files
    the agent changed): the layer is emptied and the commands run in the agent's tree (run_in_tree)."""
    layer = area.setup_layer
    roots = untar.clean_roots(setup.cache) if setup is not None and setup.run else ()
    _hide(area, roots)
    key = setup_key(setup, repo, sha) if setup is not None and roots else None
    if setup is None or not setup.run or key is None or trusted_sha is None or key != setup_key(setup, repo,
                                                                                                trusted_sha):
        if setup is not None and setup.run and roots and trusted_sha is not None:
            on_event("setup", "the key files differ from the base commit's: set-up runs fresh, nothing is cached")
        _empty_layer(area)
        return setup is None or not setup.run, None
    archive = archive_path(cache_dir, area.work, key)
    if not archive.is_file():
        on_event("setup", f"building the cache {key[:12]} from the base commit {trusted_sha[:12]}")
        built = agent_clone.checkout(area, identity, Path(repo), trusted_sha, cache_dir.parent, into=area.work)
        failed = _run_commands(setup, built, env, identity, on_event)
        if failed is None:
            _save(archive, built, roots)
        agent_clone.move_aside(area, area.work)
        if failed is not None:
            _empty_layer(area)
            return True, _base_problem(trusted_sha, failed).setup_problem
        if not archive.is_file():  # (not saved: the commands run in the agent's tree)
            _empty_layer(area)
            return False, None
    said = _archive_said(archive, roots)
    if _layer_holds(area, said):
        on_event("setup", f"cache {key[:12]} in place")
        return True, None
    _empty_layer(area)
    try:
        with fsafe.opened_dir(layer, below=layer.parent) as fd:
            untar.extract(archive, layer, roots, dest_fd=fd)
    except Exception:  # noqa: BLE001 - refused, truncated, unreadable: a broken cache is dropped, never trusted
        archive.unlink(missing_ok=True)
        _empty_layer(area)
        on_event("warning", f"the set-up cache {key[:12]} could not be restored: it was dropped")
        return False, None
    _layer_record(area).write_text(said, encoding="utf-8")
    on_event("setup", f"cache {key[:12]} restored")
    return True, None


def _hide(area: AgentArea, roots: tuple[str, ...]) -> None:
    """The hide layer made anew with a whiteout at each cache path (and folders above them): the base's own cache,
    restored there for the gates at another path, never shows in the agent's tree, whatever the set-up layer holds.
    (An unprivileged user may make a whiteout: Linux 5.8+.)"""
    hide = area.hide_layer
    if os.path.isdir(hide) and sorted(agent_clone.whiteouts(hide)) == sorted(roots):
        return
    agent_clone.move_aside(area, hide)
    os.mkdir(hide, 0o700)
    for root in roots:
        parent = hide / root
        parent.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(hide / root, stat.S_IFCHR | 0o600, 0)


def _layer_record(area: AgentArea) -> Path:
    return area.setup_layer.parent / "setup.record"  # (plan-runner's own folder: AgentArea.setup_layer's)


def _archive_said(archive: Path, roots: tuple[str, ...]) -> str:
    st = os.stat(archive, follow_symlinks=False)
    return " ".join(map(str, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, *roots)))


def _layer_holds(area: AgentArea, said: str) -> bool:
    try:
        return _layer_record(area).read_text(encoding="utf-8") == said
    except OSError:
        return False


def _empty_layer(area: AgentArea) -> None:
    """The set-up layer made empty (the old one moved aside, removed later with no link followed), its record
    gone first: a restore cut short leaves no record, so the next session restores again."""
    _layer_record(area).unlink(missing_ok=True)
    try:
        if not os.listdir(area.setup_layer):
            return
    except FileNotFoundError:
        pass
    agent_clone.move_aside(area, area.setup_layer)
    os.mkdir(area.setup_layer, 0o700)


def run_in_tree(setup: SetupConfig | None, *, sha: str, repo: str | os.PathLike[str], area: AgentArea,
                identity: Identity, env: Mapping[str, str], layered: bool,
                on_event: Callable[[str, str], None] = lambda e, d: None) -> str | None:
    """After agent_clone.prepare: the set-up commands run in the agent's tree when the set-up layer does not hold
    their result (`layered` False), and what set-up made (the cache paths, the untracked paths the commands left)
    excluded from the agent's git (never committed as its leftovers). A failure, in words (the agent is told,
    nobody is blamed)."""
    if setup is None or not setup.run:
        return None
    failed = None if layered else _run_commands(setup, area.work, env, identity, on_event)
    files = agent_clone.files_of(area, identity)  # (what the commands wrote: the agent's upper, or its tree)
    roots = untar.clean_roots(setup.cache)
    made = [*roots, *_untracked_tops(repo, sha, files, roots)]
    _exclude(files, made)
    if failed is not None:
        return failed.error or "a set-up command failed"
    return None
