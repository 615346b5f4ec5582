"""Which repository an agent area or a seed store belongs to: a record the judge writes beside it (their names
are digests of the repository's path), read by runner.adapters.sandbox.sweep to remove those of repositories
that are gone."""
from __future__ import annotations

import os
from pathlib import Path

ORIGIN = ".origin"  # in an area's root


def write_private(path: Path, text: str) -> None:
    """`text` into `path` (a file of plan-runner's own folder), atomically, 0600; never through a link."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_private(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "r", encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read(65536)


def record(path: Path, repo: Path) -> None:
    """Record `repo` as the repository of `path` (an area's root: its ORIGIN file; a seed store's `<key>`
    prefix in seeds/: `<key>.origin`), written only when it is missing or says something else."""
    text = os.fsdecode(os.path.realpath(repo)) + "\n"
    if read_private(path) != text:
        write_private(path, text)


def area_origin(root: Path) -> Path:
    return root / ORIGIN


def store_origin(seeds: Path, key: str) -> Path:
    return seeds / f"{key}.origin"
