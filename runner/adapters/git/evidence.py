"""The git evidence of one session: its commits, the files it changed, secrets in what it adds.

Every function here is bounded by the session: it looks at `base..head` or two trees, never at the whole history,
so the cost does not grow with the age of the repository (the benchmark measures it at 100,000 commits)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from git import Git
from git.exc import GitCommandError

from runner.adapters.git.invoke import BOT_ENV, REVERT_TRAILER, WIP_TRAILER, _fail, run_git
from runner.adapters.git.objects import _FULL_SHA, at
from runner.core.errors import PlanRunnerError
from runner.core.evidence import CommitInfo


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """`**/` any folders (none included), `*` and `?` within one path component, a trailing `/` a folder."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    if pattern.endswith("/"):
        out.append(".*")
    return re.compile("".join(out), re.DOTALL)


def _matches(path: str, patterns: Iterable[str]) -> bool:
    for p in patterns:
        if any(c in p for c in "*?"):
            if _glob_regex(p).fullmatch(path):
                return True
        elif path == p or (p.endswith("/") and path.startswith(p)):
            return True
    return False


def _trailers(body: str) -> dict[str, str]:
    """Trailers of the message's last paragraph (`Key: value` lines), keys lower-cased."""
    paragraphs = [p for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]
    if len(paragraphs) < 2:  # a subject line alone has no trailers
        return {}
    found: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip().lower()] = value.strip().lower()
    return found


def collect_commits(repo: str | os.PathLike[str], base_sha: str, head: str, bookkeeping_paths: set[str]) -> tuple[CommitInfo, ...]:
    """The commits in `base_sha..head` along the first parent, oldest first.

    A merge counts with the files it changes relative to its first parent. A commit
    touching nothing but bookkeeping paths (plan, handoff; "dir/" is a prefix), an
    empty commit, or plan-runner's own revert does not count as work.
    """
    if base_sha == head:
        return ()
    try:
        raw = run_git(repo, "log", "--first-parent", "--diff-merges=first-parent", "--no-renames",
                      "--name-only", "-z", "--format=%x1e%H%x1f%an <%ae>%x1f%B%x1f", f"{base_sha}..{head}")
    except GitCommandError as exc:
        raise _fail(f"could not list the commits {base_sha[:12]}..{head}", exc,
                    "make sure both commits exist locally (fetch the work branch)") from None
    commits = []
    for chunk in raw.decode("utf-8", "replace").split("\x1e")[1:]:
        sha, author, body, rest = chunk.split("\x1f", 3)
        files = tuple(dict.fromkeys(p.strip("\n") for p in rest.split("\0") if p.strip("\n")))
        trailers = _trailers(body)
        wip = trailers.get(WIP_TRAILER.lower()) == "true"
        revert = trailers.get(REVERT_TRAILER.lower()) == "revert"
        counts = bool(files) and not revert and not all(_matches(f, bookkeeping_paths) for f in files)
        summary = body.strip().splitlines()[0] if body.strip() else ""
        commits.append(CommitInfo(sha=sha.strip(), summary=summary, author=author, files=files,
                                  counts_as_work=counts, wip=wip))
    return tuple(reversed(commits))


def paths_adding(repo: str | os.PathLike[str], old: str, new: str, needles: Iterable[str]) -> list[str]:
    """The files whose lines added from tree `old` to tree `new` contain any of `needles` (secret values).

    The diff is streamed and read in bounded pieces, so memory stays flat however large the
    change; the needles never appear on a command line (where `ps` would show them)."""
    wanted = sorted({n.encode() for n in needles if n}, key=len, reverse=True)
    if not wanted:
        return []
    keep = max(len(n) for n in wanted) - 1  # a needle may straddle two pieces of one long line
    proc = Git(str(repo)).execute(
        ["git", "-c", "core.quotePath=false", "diff", "--no-color", "--no-ext-diff", "--no-renames", "--text",
         "--unified=0", old, new, "--"], as_process=True, env={**BOT_ENV})
    found: list[str] = []
    current, in_header, adding, continuing, carry = "", False, False, False, b""
    popen = proc.proc
    assert popen is not None and popen.stdout is not None  # as_process: a running git with its output on a pipe
    stream = popen.stdout
    try:
        for piece in iter(lambda: stream.readline(1 << 20), b""):
            if not continuing:
                carry = b""
                if piece.startswith(b"diff --git "):
                    in_header, adding = True, False
                elif in_header and piece.startswith(b"+++ "):
                    current = piece[4:].rstrip(b"\n").rstrip(b"\t").decode("utf-8", "replace").removeprefix("b/")
                elif piece.startswith(b"@@"):
                    in_header, adding = False, False
                elif not in_header:
                    adding = piece.startswith(b"+")
            if in_header and current and current not in found and any(n in current.encode() for n in wanted):
                found.append(current)  # the secret is the file's name
            if adding and current not in found:
                text = carry + piece
                if any(n in text for n in wanted):
                    found.append(current)
                carry = text[-keep:] if keep else b""
            continuing = not piece.endswith(b"\n")
    finally:
        stream.close()
        code = popen.wait()
    if code != 0:
        raise PlanRunnerError(what=f"could not compare {old[:12]} with {new[:12]} to look for secrets",
                              why=f"git diff exited with code {code}",
                              fix=f"check the repository with `git -C {repo} fsck`, then run again")
    return found


def commits_carrying(repo: str | os.PathLike[str], old: str, new: str, needles: Iterable[str]) -> list[str]:
    """The commits between `old` and `new` whose object itself (message, author and committer names and
    emails, any extra header) holds one of `needles`, and "a file name" when a changed path holds one:
    they are pushed as they are, not only the files' lines.
    Read from `git log --format=raw` (the commit as stored); the needles never reach a command line."""
    wanted = sorted({n.encode() for n in needles if n}, key=len, reverse=True)
    if not wanted:
        return []
    raw = Git(str(repo)).execute(["git", "log", "--no-color", "--format=raw", "-z", f"{old}..{new}", "--"],
                                 env={**BOT_ENV}, stdout_as_string=False)
    found = []
    for chunk in raw.split(b"\0"):
        if chunk.startswith(b"commit ") and any(n in chunk for n in wanted):
            found.append(f"commit {chunk[7:47].decode('ascii', 'replace')[:12]} (its message or author/committer)")
    names = Git(str(repo)).execute(["git", "diff", "--no-renames", "--name-only", "-z", old, new, "--"],
                                   env={**BOT_ENV}, stdout_as_string=False)
    if any(n in name for name in names.split(b"\0") for n in wanted):
        found.append("a file name")
    return found


def protected_paths_changed(repo: str | os.PathLike[str], base_sha: str, head: str, paths: list[str]) -> list[str]:
    """Which of `paths` (a trailing "/" makes a prefix) differ between base and head.

    A tree-to-tree diff: a file changed and changed back within the session is untouched.
    """
    if not paths:
        return []
    try:
        raw = run_git(repo, "diff", "--name-only", "--no-renames", "-z", base_sha, head, "--")
    except GitCommandError as exc:
        raise _fail(f"could not diff {base_sha[:12]}..{head}", exc,
                    "make sure both commits exist locally (fetch the work branch)") from None
    changed = [p for p in raw.decode("utf-8", "replace").split("\0") if p]
    return [p for p in paths if any(_at_or_above(c, [p]) for c in changed)]


def _diff_status(repo: str | os.PathLike[str], base_sha: str, head: str) -> list[tuple[str, str]]:
    """(status letter, path) for every file that differs between two commits, renames as delete + add.
    Between two full shas it never changes: the `Repository` remembers the last one (a session asks twice)."""
    r = at(repo)
    key = (base_sha, head)
    if key in r.diffs:
        return list(r.diffs[key])
    found = _diff_status_of(r, base_sha, head)
    if _FULL_SHA.fullmatch(base_sha) and _FULL_SHA.fullmatch(head):
        r.diffs.clear()
        r.diffs[key] = list(found)
    return found


def _diff_status_of(repo: str | os.PathLike[str], base_sha: str, head: str) -> list[tuple[str, str]]:
    try:
        raw = run_git(repo, "diff", "--name-status", "--no-renames", "-z", base_sha, head, "--")
    except GitCommandError as exc:
        raise _fail(f"could not diff {base_sha[:12]}..{head}", exc,
                    "make sure both commits exist locally (fetch the work branch)") from None
    fields = raw.decode("utf-8", "surrogateescape").split("\0")
    return [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2) if fields[i]]


def display_path(path: str) -> str:
    """A path git gave as bytes that are not UTF-8 (read with surrogateescape, so it can be restored) in a
    form every record can hold: each such byte as `\\xNN`. Plain paths are unchanged."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _at_or_above(path: str, patterns: Iterable[str]) -> bool:
    """`path` (a file, a symlink or a submodule: what a diff lists) matches a pattern or sits at or above what
    it protects: `.github` or `.github/workflows` committed as a symlink changes `.github/workflows/` (protection
    by resolved path, not by the string)."""
    if _matches(path, patterns):
        return True
    for p in patterns:
        literal = re.split(r"[*?\[]", p)[0]  # a glob protects what lies under its literal folder
        if (literal if literal.endswith("/") or literal != p else literal + "/").startswith(path + "/"):
            return True
    return False


def files_changed(repo: str | os.PathLike[str], base_sha: str, head: str, patterns: list[str]) -> list[str]:
    """The files (not the patterns) matching `patterns` ("dir/" is a prefix) that differ between base and head,
    and any entry at or above a protected path (`_at_or_above`); shallower first, so a revert removes a symlinked
    folder before it writes the files that were under it."""
    if not patterns:
        return []
    found = [path for _status, path in _diff_status(repo, base_sha, head) if _at_or_above(path, patterns)]
    return sorted(dict.fromkeys(found), key=lambda p: (p.count("/"), p))


def deleted_files(repo: str | os.PathLike[str], base_sha: str, head: str) -> list[str]:
    return [path for status, path in _diff_status(repo, base_sha, head) if status == "D"]
