"""The plan's `setup:` commands, run on the gates' fresh checkout before them (SPEC 4b, invariant 4).

They are the project's code (`pip install -e .` runs its setup.py), so they run as
the agent's identity, like the gates. What they produce under `cache:` is kept by
plan-runner, out of the agent's reach, keyed by the commands and the content of
the `key:` files at the judged commit: the next session with the same key gets a
copy instead of running them again. Known limit: a cache is built by code of the
commit that first had that key; name in `key:` every file the commands execute
(lock files, setup.py, pyproject.toml) so that a change of one builds a new cache.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path

from runner.adapters.git import work as gitwork
from runner.core.evidence import GateResult
from runner.adapters.judge.gates import run_command_gate
from runner.core.plan import GateConfig, SetupConfig
from runner.adapters.sandbox.identity import Identity

CACHE_KEEP = 3  # cache archives kept per plan (the newest)


def setup_key(setup: SetupConfig, repo: Path, sha: str) -> str:
    h = hashlib.sha256()
    for command in setup.run:
        h.update(b"run\0" + command.encode() + b"\0")
    for path in setup.cache:
        h.update(b"cache\0" + path.encode() + b"\0")
    for path in setup.key:
        text = gitwork.read_file_at(repo, sha, path)
        h.update(b"key\0" + path.encode() + b"\0" + (text or "\0absent").encode() + b"\0")
    return h.hexdigest()[:32]


def _restore(archive: Path, workdir: Path) -> bool:
    try:
        with tarfile.open(archive, "r") as tar:
            # 'tar', not 'data': a virtualenv links to its interpreter by absolute path. Still no member outside
            # `workdir`, none written through a link that leads out, no setuid bits.
            tar.extractall(workdir, filter="tar")
        return True
    except (OSError, tarfile.TarError):
        archive.unlink(missing_ok=True)  # a broken cache is rebuilt, never trusted
        return False


def _save(archive: Path, workdir: Path, paths: tuple[str, ...]) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        for rel in paths:
            if (workdir / rel).exists() or (workdir / rel).is_symlink():
                tar.add(workdir / rel, arcname=rel, recursive=True)  # links are stored as links, never followed
    tmp.replace(archive)
    kept = sorted(archive.parent.glob("*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[CACHE_KEEP:]:
        old.unlink(missing_ok=True)


def run_setup(setup: SetupConfig, *, sha: str, repo: Path, workdir: Path, env: Mapping[str, str],
              identity: Identity, cache_dir: Path,
              on_event: Callable[[str, str], None] = lambda e, d: None) -> tuple[GateResult, ...]:
    """Restore the cache or run the commands; the failed commands as red gate results (empty: all good)."""
    key = setup_key(setup, repo, sha)
    archive = cache_dir / f"{key}.tar"
    if setup.cache and archive.is_file():
        identity.reclaim(workdir)
        restored = _restore(archive, workdir)
        identity.give(workdir)
        if restored:
            on_event("setup", f"cache {key[:12]} restored")
            return ()
    for i, command in enumerate(setup.run, 1):
        on_event("setup", command)
        gate = GateConfig(name=f"setup {i}", run=command, timeout_minutes=setup.timeout_minutes)
        result = run_command_gate(gate, workdir=workdir, env=env, identity=identity)
        if not result.passed:
            return (result.model_copy(update={"error": (result.error or "") + f" (setup command: {command})"}),)
    if setup.cache:
        identity.kill_all()
        identity.reclaim(workdir)
        try:
            _save(archive, workdir, setup.cache)
        finally:
            identity.give(workdir)
    return ()
