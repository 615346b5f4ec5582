"""Real repositories with long histories, built in seconds with `git fast-import`."""

from __future__ import annotations

import subprocess
from pathlib import Path

_EPOCH = 1_700_000_000


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def _history(commits: int, files: int):
    """A fast-import stream in chunks: `commits` commits on main, each changing one of `files` files.
    Streamed, so the benchmark process stays small (its size would show in every child it forks)."""
    out: list[bytes] = []
    for i in range(commits):
        if len(out) >= 5000:
            yield b"".join(out)
            out = []
        body = f"line {i}\n".encode()
        msg = f"History commit {i}\n".encode()
        stamp = f"{_EPOCH + i} +0000"
        out.append(b"commit refs/heads/main\nmark :%d\n" % (i + 1))
        out.append(f"author Hist <hist@example.invalid> {stamp}\ncommitter Hist <hist@example.invalid> {stamp}\n".encode())
        out.append(b"data %d\n%s" % (len(msg), msg))
        if i:
            out.append(b"from :%d\n" % i)
        out.append(b"M 100644 inline history/f%03d.txt\ndata %d\n%s\n" % (i % files, len(body), body))
    yield b"".join(out)


def build_repo(path: Path, commits: int, project: dict[str, str], *, env: dict[str, str]) -> None:
    """A repository with `commits` commits on main: the history, then one commit with `project`."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main", env=env)
    if commits > 1:
        with subprocess.Popen(["git", "fast-import", "--quiet"], cwd=path, env=env, stdin=subprocess.PIPE) as proc:
            assert proc.stdin is not None
            for chunk in _history(commits - 1, files=min(200, commits)):
                proc.stdin.write(chunk)
            proc.stdin.close()
            if proc.wait() != 0:
                raise RuntimeError(f"git fast-import failed with exit code {proc.returncode}")
        git(path, "reset", "-q", "--hard", "main", env=env)
    for rel, text in project.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    git(path, "-c", "gc.auto=0", "add", "-A", env=env)
    git(path, "-c", "gc.auto=0", "commit", "-q", "-m", "Add the project and its plans", env=env)
    # Packed now, as a real repository is, and no detached `gc --auto` left running into the first session
    # (it rewrites .git while the agent runs: the guard reads that as tampering).
    git(path, "gc", "--quiet", env=env)
