"""What the agent must not touch, checked and undone around its run.

The agent works in the same git repository as plan-runner. Besides the files
`runner.adapters.judge.collect` protects in the work tree, it could move its plan's state ref
(`git update-ref refs/plan-runner/state/<plan> ...`) to forge or erase the
ledger, or write `.git/config` / `.git/hooks` so that plan-runner's own later
git commands run code of its choosing with the job's environment (a hook, a
`core.fsmonitor` command). `snapshot` is taken before the agent starts;
`restore` runs first thing after it exits, puts everything back and says what
it found, which the verdict treats as tampering. The state ref itself is
guarded by `GitStateStore.restore_own` (the plan's own ref only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.adapters.git import work as gitwork

_CONTROL_FILES = ("config",)
_CONTROL_DIRS = ("hooks", "info")


@dataclass(frozen=True)
class Snapshot:
    git_dir: Path
    files: dict[str, tuple[bytes, int] | None]  # path relative to the git dir -> (content, mode); None: absent


def _git_dir(repo: Path) -> Path:
    return gitwork.git_dir(repo)


def _read(path: Path) -> tuple[bytes, int]:
    try:
        return path.read_bytes(), path.stat().st_mode & 0o777
    except OSError:  # a dangling or looping symlink the agent planted still counts as present
        return b"", -1


def _control_files(git_dir: Path) -> dict[str, tuple[bytes, int] | None]:
    files: dict[str, tuple[bytes, int] | None] = {}
    for name in _CONTROL_FILES:
        path = git_dir / name
        files[name] = _read(path) if path.is_file() else None
    for folder in _CONTROL_DIRS:
        root = git_dir / folder
        if root.is_dir():
            for path in sorted(root.rglob("*")):
                if path.is_file() or path.is_symlink():
                    files[path.relative_to(git_dir).as_posix()] = _read(path)
    return files


def snapshot(repo: Path) -> Snapshot:
    git_dir = _git_dir(repo)
    return Snapshot(git_dir=git_dir, files=_control_files(git_dir))


def restore(snap: Snapshot) -> list[str]:
    """Undo the agent's changes to git's control files; what was found."""
    found: list[str] = []
    now = _control_files(snap.git_dir)
    for name in sorted(set(now) | set(snap.files)):
        before, after = snap.files.get(name), now.get(name)
        if before == after:
            continue
        path = snap.git_dir / name
        if path.is_symlink() or path.exists():
            path.unlink()
        if before is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(before[0])
            path.chmod(max(before[1], 0o600))
        found.append(f".git/{name} was {'created' if before is None else 'changed'} by the agent "
                     "(git's control files are plan-runner's; restored)")
    return found
