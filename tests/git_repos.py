"""Real git repositories for the tests that drive GitPython directly: identity, a first commit, a long history."""

from __future__ import annotations

from pathlib import Path

import git


def configure(repo: git.Repo, name: str = "Test User", email: str = "test@example.com") -> git.Repo:
    """An identity, no signing, no automatic gc (a test's objects stay where it put them)."""
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", name)
        cfg.set_value("user", "email", email)
        cfg.set_value("commit", "gpgsign", "false")
        cfg.set_value("gc", "auto", "0")
    return repo


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def init_repo(path: Path, files: dict[str, str], message: str = "initial", **identity: str) -> git.Repo:
    """A repository on `main` whose first commit holds `files`."""
    path.mkdir(parents=True, exist_ok=True)
    repo = configure(git.Repo.init(path, initial_branch="main"), **identity)
    write(path, files)
    repo.git.add("--all")
    repo.git.commit("-m", message)
    return repo


def fast_import_history(repo: git.Repo, commits: int) -> None:
    """`commits` commits on main, written by git fast-import into a single pack."""
    parts = []
    for i in range(1, commits + 1):
        msg = f"commit {i}\n".encode()
        content = f"line {i}\n".encode()
        parts.append(f"commit refs/heads/main\nmark :{i}\ncommitter T <t@e.com> {1_700_000_000 + i} +0000\n".encode())
        parts.append(b"data %d\n%s" % (len(msg), msg))
        if i > 1:
            parts.append(f"from :{i - 1}\n".encode())
        parts.append(b"M 100644 inline counter.txt\ndata %d\n%s\n" % (len(content), content))
    stream = Path(repo.git_dir) / "import.stream"
    stream.write_bytes(b"".join(parts))
    with open(stream, "rb") as fh:
        repo.git.fast_import("--quiet", istream=fh)
    stream.unlink()
