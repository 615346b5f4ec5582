"""The gates' read-only base: the tree `verify:` and the gates judge.

plan-runner writes, from its own git objects, a pristine checkout of the judged commit (tracked files only) in a
folder of the plan's agent area that no room shows writable (`.base`, covered by an empty tmpfs in every room that
shows the area: room.AREA_OWN), and restores the set-up cache there (built from the trusted base commit's
recipe). The same tree, brought to the session's base before the agent starts, is the lowest read-only layer of the
agent's own tree (runner.adapters.sandbox.agent_clone), held from then until the gates are done (`held`), so the
first session writes the repository's files once. Only the judge writes it, so between sessions it is brought to the next judged commit incrementally
(git's two-way `read-tree -m -u`: only what differs is written) and a restored cache stays restored: what the
judge wrote is what is there, with no proof to make.

Each gate and `verify:` run sees that tree at the area's `gates/` path through an overlay whose lower layer is the
base (read-only) and whose upper layer is a tmpfs of that process's room: whatever a gate writes, deletes,
replaces or chmods lands in the upper layer and vanishes with the process (its PID namespace, with
`--die-with-parent`, ends with it), so the next gate, the next session and the next cache restore see the base
as the judge wrote it. Where the kernel has no overlay in a user namespace, each process gets a fresh copy of
the base at that path instead (room.fresh_copy). Without isolation the gates run in the base itself (nothing is
kept from code that runs as plan-runner's own user anyway), and the next update checks it first (`expose`).

`setup:` runs on a writable checkout at the same path (what it makes, a virtualenv, names its path): from the
trusted commit when the cache is built (then archived, and restored into the base), from the judged commit when
nothing can be cached (no `cache:`, or key files the agent changed); the gates then run on that writable
checkout, which the next session never sees (it is made anew).
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from runner.adapters.git import work as gitwork
from runner.adapters.git.work import GitCommandError
from runner.adapters.judge import untar
from runner.adapters.judge.gates import ChecksRunner, run_gates
from runner.adapters.judge.setup import _base_problem, _run_commands, _save, archive_path, setup_key
from runner.adapters.sandbox import agent_clone, fsafe
from runner.adapters.sandbox.agent_clone import AgentArea
from runner.adapters.sandbox.identity import Identity
from runner.core.errors import PlanRunnerError
from runner.core.evidence import GateResult
from runner.adapters.sandbox.agentenv import build_agent_env, clean_path
from runner.core.plan import GateConfig, Plan, SetupConfig

BASE = agent_clone.BASE  # in an area's root: plan-runner's own (0700), covered in every room (room.AREA_OWN)


@dataclass(frozen=True)
class BaseTree:
    """plan-runner's pristine checkout of a judged commit for one plan, and the set-up cache restored in it."""

    area: AgentArea
    repo: Path  # the judge's repository (its objects)

    @property
    def root(self) -> Path:
        return self.area.root / BASE

    @property
    def tree(self) -> Path:
        return self.area.base_tree

    @property
    def _index(self) -> Path:
        return self.area.base_index

    @property
    def _state(self) -> Path:
        return self.root / "state.json"

    def _own(self) -> None:
        agent_clone.own_root(self.area, self.repo)  # (.base made with the area's own folders: 0700)
        st = os.lstat(self.root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise PlanRunnerError(what=f"{self.root} is not plan-runner's own folder", why="it was replaced",
                                  fix=f"remove {self.area.root} and run again")

    @contextmanager
    def held(self) -> Iterator[BaseTree]:
        """The base for this process alone while the block runs (two jobs of one plan: one waits)."""
        self._own()
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self
        finally:
            os.close(fd)

    def _read(self) -> dict:
        try:
            state = json.loads(self._state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def _write(self, state: dict) -> None:
        tmp = self._state.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state, fh)
        os.replace(tmp, self._state)

    def _forget(self) -> dict:
        """The state taken away while the tree is written: a write cut short leaves none (the next is fresh)."""
        state = self._read()
        self._state.unlink(missing_ok=True)
        return state

    @property
    def sha(self) -> str | None:
        return self._read().get("sha")

    def at(self, sha: str) -> Path:
        """The tree brought to exactly the tracked files of `sha` (and the cache restored in it, while nothing
        the new commit tracks is in its way): incrementally from the commit it holds, else checked out afresh."""
        self._own()
        state = self._forget()
        old = state.get("sha")
        if state.get("exposed"):  # (no isolation: the code run wrote where it liked; git's stat data tells what)
            old = old if self._untouched(tuple((state.get("cache") or [None, []])[1])) else None
            state["cache"] = None  # restored again: a cache it wrote in cannot be told from the restored one
        if old and self._incremental(old, sha):
            self._write({"sha": sha, "cache": state.get("cache")})
            return self.tree
        agent_clone.move_aside(self.area, self.tree)
        self._index.unlink(missing_ok=True)
        os.mkdir(self.tree, 0o755)
        env = {"GIT_INDEX_FILE": str(self._index)}
        try:
            # (an index with the files' stat data: the next update compares against it, rewriting only what differs)
            gitwork.run_git(self.repo, f"--work-tree={self.tree}", "read-tree", "--reset", "-u", sha, env=env)
        except GitCommandError as exc:
            raise PlanRunnerError(what=f"could not check out {sha[:12]} for the gates", why=gitwork.stderr_of(exc),
                                  fix=f"check `git -C {self.repo} fsck`") from None
        self._write({"sha": sha})
        return self.tree

    def expose(self) -> None:
        """The tree is handed to code run without isolation (it runs in the tree itself): the next `at` checks it."""
        state = self._read()
        if state:
            self._write({**state, "exposed": True})

    def _untouched(self, roots: tuple[str, ...]) -> bool:
        """Nothing but the cache's paths untracked, and every tracked file as the index has it: git's stat data
        (ctime included: a rewrite with its mtime put back, a chmod, a link, a replacement all move it), and where
        that moved, its content, mode and type (`update-index --refresh`: non-zero when one differs)."""
        env = {"GIT_INDEX_FILE": str(self._index)}
        tree = f"--work-tree={self.tree}"
        try:
            gitwork.run_git(self.repo, tree, "update-index", "-q", "--refresh", env=env)
            others = gitwork.run_git(self.repo, tree, "ls-files", "-z", "--others", "--directory", env=env)
        except GitCommandError:
            return False
        tops = {p.rstrip(b"/").decode("utf-8", "surrogateescape") for p in others.split(b"\0") if p}
        return all(any(t == r or t.startswith(r + "/") for r in roots) for t in tops)

    def _incremental(self, old: str, new: str) -> bool:
        try:
            st = os.lstat(self.tree)
            if not stat.S_ISDIR(st.st_mode) or not self._index.is_file():
                return False
            if old == new:
                return True
            changed = gitwork.run_git(self.repo, "diff-tree", "-r", "-z", "--name-only", "--no-renames", old, new)
            if any(p.rsplit(b"/", 1)[-1] == b".gitattributes" for p in changed.split(b"\0")):
                return False  # how every other file checks out may change with it
            gitwork.run_git(self.repo, f"--work-tree={self.tree}", "read-tree", "-m", "-u", old, new,
                            env={"GIT_INDEX_FILE": str(self._index)})
        except (OSError, GitCommandError):
            return False
        return True

    def restore(self, archive: Path, roots: tuple[str, ...]) -> str | None:
        """The set-up cache `archive` in the tree at `roots`: "restored", "in place" (this very archive file was
        restored last and only the judge wrote the tree since), or None (refused: the archive is dropped, and the
        tree is checked out afresh by the next `at`)."""
        state = self._read()
        made = _archive_id(archive)
        if state.get("sha") and state.get("cache") == [made, list(roots)]:
            return "in place"
        state = self._forget()
        try:
            with fsafe.opened_dir(self.tree, below=self.root) as fd:
                for old in (state.get("cache") or [None, []])[1]:
                    if old not in roots:
                        _remove_below(fd, old)
                untar.extract(archive, self.tree, roots, dest_fd=fd)
        except Exception:  # noqa: BLE001 - refused, truncated, unreadable: a broken cache is dropped, never trusted
            archive.unlink(missing_ok=True)
            return None
        if state.get("sha"):
            self._write({"sha": state["sha"], "cache": [made, list(roots)]})
        return "restored"


def _archive_id(archive: Path) -> list[int]:
    st = os.stat(archive, follow_symlinks=False)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _remove_below(fd: int, rel: str) -> None:
    parts = rel.split("/")
    try:
        parent = fsafe.open_below(fd, parts[:-1]) if len(parts) > 1 else os.dup(fd)
    except OSError:
        return
    try:
        fsafe.remove_at(parent, parts[-1])
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


def gate_env(env: Mapping[str, str], plan: Plan, home: Path, repo: Path) -> dict[str, str]:
    """The environment of the gates, `verify:` and `setup:` (the session's, the preflight's, the Actions cache's, the
    agent's clone's set-up): the basics and the plan's own names, no credentials of the backend, `home` as HOME,
    and a PATH without the user's working copy (`repo`: its venv is never the gates')."""
    out = build_agent_env(env, allow=plan.config.agent.env, api_key_vars=())
    out["HOME"] = str(home)
    out["PATH"] = clean_path(out.get("PATH", ""), also=(repo,))
    return out


@dataclass
class GatesTree:
    """The tree one session's (or the preflight's) gates and `verify:` run on, shown at `area.gates`: the plan's
    base (read-only, under a throwaway layer per process) set up from the cache, or, where `setup:` must run on
    the judged commit itself, a writable checkout made for this session only. The session's collect.Judge.

    `base`: the plan's BaseTree; `area`: where the tree is shown (the plan's agent area; the preflight's own)."""

    base: BaseTree
    area: AgentArea
    identity: Identity
    scratch: Path
    env: Mapping[str, str]
    setup: SetupConfig | None = None
    trusted: str | None = None
    on_event: Callable[[str, str], None] = lambda kind, detail: None
    network: Callable[[], AbstractContextManager] = nullcontext
    failures: list[GateResult] = field(default_factory=list)  # what `setup:` failed, as red gate results
    host: Path | None = None  # where the tree the gates see is, for the judge's own reads
    checks_runner: ChecksRunner | None = None  # remote `checks:` (collect.Judge)
    push: Callable[[str], None] | None = None  # the early push of the judged commit, before the gates

    def push_early(self, head: str) -> None:
        if self.push is not None:
            self.push(head)

    @property
    def repo(self) -> Path:
        return self.base.repo

    def _show_base(self) -> Path:
        agent_clone.move_aside(self.area, self.area.gates)
        room = self.identity.room
        if room is not None:
            os.mkdir(self.area.gates, 0o755)  # (the overlay's mount point)
            room.lay(self.area.gates, self.base.tree)
        else:  # no isolation: nothing is kept from the code run anyway (it runs as plan-runner's user); it runs in
            # the base itself, through a link at gates/, and the next `at` checks what it left (BaseTree.expose)
            self.base.expose()
            os.symlink(self.base.tree, self.area.gates)
        self.host = self.base.tree
        return self.area.gates

    def _writable(self, sha: str) -> Path:
        if self.identity.room is not None:
            self.identity.room.lay(self.area.gates, None)
        self.host = agent_clone.checkout(self.area, self.identity, self.repo, sha, self.scratch)
        return self.host

    def tree(self, sha: str) -> Path:
        """`sha` ready for the gates (set up per the plan), at the path they run in."""
        agent_clone.own_root(self.area, self.repo)
        if self.identity.room is not None:
            self.identity.room.grant(self.area.root)
        agent_clone.fresh_gate_home(self.area)
        self.base.at(sha)
        setup = self.setup
        if setup is None or not setup.run:
            return self._show_base()
        with self.network():
            return self._set_up(setup, sha)

    def _set_up(self, setup: SetupConfig, sha: str) -> Path:
        roots = untar.clean_roots(setup.cache)
        trusted, say = self.trusted, self.on_event
        if roots and trusted is not None:
            key = setup_key(setup, self.repo, sha)
            if key == setup_key(setup, self.repo, trusted):
                archive = archive_path(self.scratch / "setup-cache", self.area.gates, key)
                if not archive.is_file():
                    say("setup", f"building the cache {key[:12]} from the base commit {trusted[:12]}")
                    built = self._writable(trusted)
                    failed = _run_commands(setup, built, self.env, self.identity, say)
                    if failed is not None:
                        self.failures.append(_base_problem(trusted, failed))
                        return self._show_base()  # the gates judge the judged commit, set up or not
                    _save(archive, built, roots)
                if archive.is_file():
                    how = self.base.restore(archive, roots)
                    if how is not None:
                        say("setup", f"cache {key[:12]} {how}")
                        return self._show_base()
                    say("warning", f"the set-up cache {key[:12]} could not be restored: it was dropped")
                    self.base.at(sha)
            else:
                say("setup", "the key files differ from the base commit's: set-up runs fresh, nothing is cached")
        workdir = self._writable(sha)
        failed = _run_commands(setup, workdir, self.env, self.identity, say)
        if failed is None:
            return workdir
        if trusted is not None and trusted != sha:
            on_base = _run_commands(setup, self._writable(trusted), self.env, self.identity, say)
            workdir = self._writable(sha)  # the gates judge the judged commit, set up or not
            self.failures.append(failed if on_base is None else _base_problem(trusted, failed))
        else:
            self.failures.append(_base_problem(sha, failed) if trusted == sha else failed)
        return workdir

    def on_base(self, gates: Sequence[GateConfig]) -> tuple[tuple[GateResult, ...], str]:
        """`gates` on the trusted base commit, set up (its set-up's failures are not this session's)."""
        if self.trusted is None:
            return (), ""
        kept, self.failures = self.failures, []
        try:
            workdir = self.tree(self.trusted)
        finally:
            self.failures = kept
        return run_gates(gates, workdir=workdir, env=self.env, identity=self.identity), self.trusted

    def close(self) -> None:
        if self.identity.room is not None:
            self.identity.room.lay(self.area.gates, None)
