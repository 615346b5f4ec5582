"""The run state in git: one state ref per plan, each with its own append-only ledger.

Every plan's state lives on a ref of its own, `refs/plan-runner/state/<plan_id>`,
outside `refs/heads/`, so no work branch can collide with it (plan ids have no
slash, so `a/b` against `a/b/c` cannot happen inside the namespace either). The
tree of a state commit is described in `layout`; its objects are written by
`objects` (plumbing only: the user's work tree and index are never touched), its
directories by `dirs`. This module is the store itself: reads, compare-and-swap
writes and the remote.

Every write is a compare-and-swap on the plan's ref alone: locally `update-ref <ref> <new>
<expected>`, on the remote a push with `--force-with-lease=<ref>:<expected>`
(atomic with any other ref the caller pushes with it). A conflict therefore
always means another job advanced *this* plan; plans never conflict with each
other. Reads go ref -> tree -> blob through one long-lived `git cat-file --batch`
and never walk history.

`plans()` (status, tick) fetches every plan's ref with one glob refspec; the
reads that follow in the same process need no fetch of their own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from git.exc import GitCommandError

from runner.adapters.git.branches import push_leased
from runner.adapters.git.invoke import run_git, stderr_of
from runner.adapters.git.objects import Repository, ref_sha, remotes
from runner.adapters.store.dirs import DIR_LIMIT, bound_dir, checkout_tree, redact_file, scan, store_dir
from runner.adapters.store.layout import (
    FILES, NAMESPACE, SNAPSHOT, TRACKING, ZERO, append_segments, check_name,
    compact, compacted_from, ledger_extends, ledger_text, read_ledger, snapshot_blob, state_ref,
)
from runner.adapters.store.objects import BLOB_MODE, TREE_MODE, GitObjects, Tree, missing_commit
from runner.core.compaction import written_at
from runner.core.errors import PlanRunnerError, StateConflict
from runner.core.ledger import Entry, Ledger, dump_entry
from runner.core.ports import AppendOptions, RefUpdate

__all__ = ["DIR_LIMIT", "GitStateStore", "bound_dir", "ledger_text", "push_atomic", "redact_file", "state_ref"]


class GitStateStore:
    """`runner.core.ports.StateStore` on one git ref per plan, with or without a remote."""

    def __init__(self, repo_path: Path, remote: str | None = "origin") -> None:
        self.repo = Path(repo_path)
        self.git = Repository(self.repo)  # what this store read of the repository, and its one object reader
        try:
            configured = remotes(self.git)
        except GitCommandError as exc:
            raise PlanRunnerError(
                what=f"{self.repo} is not a git repository plan-runner can keep state in",
                why=stderr_of(exc),
                fix="run plan-runner inside a git clone (`git init` for a new project)",
            ) from None
        # "origin" is the default; a repository without it works locally (section 7).
        self.remote = remote if remote in configured else None
        self.objects = GitObjects(self.git)
        self._deferred: dict[str, str | None] | None = None  # plan -> remote lease, while pushes are deferred
        self._known: dict[str, str | None] = {}  # plan -> its remote state as this process last fetched or pushed it
        self._fresh: set[str] = set()  # plans whose tracking ref was fetched by this process and not lost since
        self._extra: dict[str, tuple[list[str], list[str]]] = {}  # plan -> (refspecs, negotiation tips) fetched with it
        self._fetched_with: set[str] = set()  # plans whose last fetch carried their extra refspecs
        # restored files: size, mtime, sha (blob, or tree of blocks), the block shas (None for a blob)
        self._dirs: dict[tuple[str, str], dict[str, tuple]] = {}
        self._stored_shas: dict[tuple[str, str], dict[str, tuple[str, frozenset[str] | None]]] = {}
        self.network_ops = 0  # fetches and pushes this store made (benchmarks count them)

    # --- names ------------------------------------------------------------------------------

    def ref(self, plan_id: str) -> str:
        return state_ref(plan_id)

    def tracking(self, plan_id: str) -> str | None:
        return f"{TRACKING}/{self.remote}/{plan_id}" if self.remote else None

    # --- reading ------------------------------------------------------------------------

    def read(self, plan_id: str) -> tuple[Ledger, str | None]:
        check_name("plan id", plan_id)
        version = self._sync(plan_id)
        return read_ledger(self.objects, plan_id, self._tree_of(version, plan_id)), version

    def local_version(self, plan_id: str) -> str | None:
        check_name("plan id", plan_id)
        return ref_sha(self.git, self.ref(plan_id))

    def read_file(self, plan_id: str, name: str) -> bytes | None:
        check_name("plan id", plan_id)
        check_name("file name", name)
        version = ref_sha(self.git, self.ref(plan_id))
        if version is None:
            return None
        files = self._tree_of(version, plan_id).get(FILES)
        if files is None:
            return None
        entry = self.objects.tree(files[1]).get(name)
        return self.objects.get(entry[1], b"blob") if entry else None

    def read_dir(self, plan_id: str, name: str, dest: Path) -> None:
        """Write the directory `name` kept with the plan's state into `dest` (created; existing files stay)."""
        check_name("plan id", plan_id)
        check_name("directory name", name)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        manifest: dict[str, tuple] = {}
        version = ref_sha(self.git, self.ref(plan_id))
        top = self._tree_of(version, plan_id).get(name) if version else None
        if top is not None and top[0] == TREE_MODE:
            checkout_tree(self.objects, top[1], dest, "", manifest)
        self._dirs[(plan_id, name)] = manifest

    def plans(self) -> list[str]:
        """Every plan with state, after one fetch of all of them (a glob refspec)."""
        if self.remote is not None:
            self._fetch_all()
        names = set(self._refs_under(f"{NAMESPACE}/"))  # with a remote: also local state not pushed yet
        if self.remote is not None:
            names |= set(self._refs_under(f"{TRACKING}/{self.remote}/"))
        return sorted(names)

    def version(self, plan_id: str) -> str | None:
        """The plan's state ref as last synced, without fetching."""
        return ref_sha(self.git, self.ref(plan_id))

    def fetch_also(self, plan_id: str, refspecs: Sequence[str], negotiate: Sequence[str] = ()) -> None:
        """Carry `refspecs` (the work and base branches) in the same fetch as the plan's state, with
        `negotiate` as extra negotiation tips; `fetched_with(plan_id)` then says so."""
        self._extra[plan_id] = (list(refspecs), list(negotiate))

    def fetched_with(self, plan_id: str) -> bool:
        return plan_id in self._fetched_with

    def remote_seen(self, plan_id: str) -> str | None:
        """The plan's state on the remote as last fetched or pushed by this process (None: absent or no remote)."""
        tracking = self.tracking(plan_id)
        return ref_sha(self.git, tracking) if tracking else None

    # --- writing ------------------------------------------------------------------------

    def append(self, plan_id: str, entries: Sequence[Entry], expected_version: str | None,
               files: Mapping[str, bytes] | None = None, options: AppendOptions = AppendOptions()) -> str:
        """Append `entries` if the plan's ref is still at `expected_version`; returns the new version.
        `options` (`runner.core.ports.AppendOptions`): the snapshot stored with them, directories kept as trees
        (only files changed since `read_dir` are read, cleared of the `redact` byte strings and stored;
        `DIR_LIMIT` bounds each in total), ref updates pushed atomically with the state, and `push=False`
        (a session's `started` entry when the remote already holds the intent that dispatched it: the next
        pushed append carries it to the remote with its own entries, the lease still on the remote's version as
        last seen)."""
        check_name("plan id", plan_id)
        for name in list(files or {}) + list(options.dirs):
            check_name("file name", name)
        ref, tracking = self.ref(plan_id), self.tracking(plan_id)
        current = ref_sha(self.git, ref)
        if current != expected_version:
            raise self._conflict(plan_id, expected_version, current)
        seen = ref_sha(self.git, tracking) if tracking is not None else None
        if seen is not None and seen != expected_version and not (
                expected_version and self._extends(expected_version, seen)):
            # The remote was last seen elsewhere: writing on `expected_version` would fork it.
            raise self._conflict(plan_id, expected_version, seen)
        new = self._commit(plan_id, entries, expected_version, files or {}, options)
        try:
            run_git(self.repo, "update-ref", "-m", f"plan-runner: {plan_id}", ref, new, expected_version or ZERO)
        except GitCommandError as exc:
            raise self._conflict(plan_id, expected_version, ref_sha(self.git, ref), stderr_of(exc)) from None
        if self.remote is not None and options.push:
            if self._deferred is not None and not options.also_push:
                self._deferred.setdefault(plan_id, seen)  # pushed by `flush`, with every other plan's
            else:
                self._push(plan_id, new, seen, options.also_push)
        for name, path in options.dirs.items():  # what is on disk now is what the state holds
            self._dirs[(plan_id, name)] = scan(Path(path), self._stored_shas.get((plan_id, name), {}))
        return new

    def _push(self, plan_id: str, new: str, seen: str | None,
              also_push: Sequence[RefUpdate] = ()) -> None:
        """One atomic push of the plan's local state `new` (with any entries written locally only before it),
        leased on the remote's version as last seen."""
        assert self.remote is not None
        ref, tracking = self.ref(plan_id), self.tracking(plan_id)
        updates = [(new, ref, seen), *also_push]
        try:
            push_atomic(self.repo, self.remote, updates, what=f"the state of plan {plan_id!r}")
            self.network_ops += 1
        except PlanRunnerError:
            self.network_ops += 1
            self._undo(plan_id, new, seen)
            raise
        run_git(self.repo, "update-ref", tracking, new)  # type: ignore[arg-type]
        self._known[plan_id] = new

    def defer_pushes(self) -> None:
        """From now on appends are written locally and pushed by `flush`, all plans in one atomic push (a tick)."""
        self._deferred = {}

    def flush(self) -> dict[str, StateConflict]:
        """Push every plan appended to since `defer_pushes` in one `git push --atomic`, each ref with its own
        lease. git rejects the whole push when one lease is lost: then one glob fetch tells which plans moved on
        the remote, their local refs take the remote's state, and the rest is pushed again without them.
        Returns the plans left out, each with its conflict (another job advanced that plan first)."""
        pending, self._deferred = dict(self._deferred or {}), None
        failed: dict[str, StateConflict] = {}
        while pending and self.remote is not None:
            news = {plan_id: ref_sha(self.git, self.ref(plan_id)) for plan_id in pending}
            updates = [(news[p], self.ref(p), lease) for p, lease in pending.items() if news[p] != lease]
            try:
                if updates:
                    push_atomic(self.repo, self.remote, updates,
                                what=f"the state of {len(updates)} plan(s)" if len(updates) > 1 else
                                f"the state of plan {updates[0][1].rsplit('/', 1)[1]!r}")
                    self.network_ops += 1
            except StateConflict as exc:
                self.network_ops += 1
                self._fetch_all()
                lost = [p for p, lease in pending.items() if ref_sha(self.git, self.tracking(p)) != lease]  # type: ignore[arg-type]
                if not lost:
                    raise
                for plan_id in lost:
                    failed[plan_id] = self._conflict(plan_id, pending.pop(plan_id),
                                                     ref_sha(self.git, self.tracking(plan_id)), str(exc.why))  # type: ignore[arg-type]
                    remote_sha = ref_sha(self.git, self.tracking(plan_id))  # type: ignore[arg-type]
                    if remote_sha is None:
                        run_git(self.repo, "update-ref", "-d", self.ref(plan_id))
                    else:
                        run_git(self.repo, "update-ref", self.ref(plan_id), remote_sha)
                continue
            for plan_id, new in news.items():
                run_git(self.repo, "update-ref", self.tracking(plan_id), new)  # type: ignore[arg-type]
                self._known[plan_id] = new
            break
        return failed

    def reuse_fetched(self, plan_ids) -> None:
        """The next read of each plan uses its tracking ref as this process last set it (the glob fetch of `plans()`,
        or a `flush` that pushed it, or the fetch of a lost lease) instead of fetching again: for a tick that reads
        its plans once more after its own push (to record the runs GitHub started, to tell whether any plan waits on
        the clock). A write on a version another job moved meanwhile still fails on its lease."""
        if self.remote is not None:
            self._fresh |= {p for p in plan_ids if (t := self.tracking(p)) is not None and ref_sha(self.git, t) is not None}

    def push_pending(self, plan_id: str) -> bool:
        """Push what was written locally only (a `started` entry) if the local state is ahead of the remote's
        as last seen; True when something was pushed. For a cancelled job, after the agent's work is safe."""
        check_name("plan id", plan_id)
        if self.remote is None:
            return False
        local, seen = ref_sha(self.git, self.ref(plan_id)), self.remote_seen(plan_id)
        if local is None or local == seen or (seen is not None and not self._extends(local, seen)):
            return False
        self._push(plan_id, local, seen)
        return True

    def _extends(self, new: str, old: str, depth: int = 8) -> bool:
        """`new` is `old` with plan-runner's appends on top (at most `depth` of them): a local write not pushed yet."""
        for _ in range(depth):
            if new == old:
                return True
            parent = self._parent_of(new)
            if parent is None or not self._appends(new, parent):
                return False
            new = parent
        return new == old

    def restore_own(self, plan_id: str, expected: str | None, *, remote: bool = True) -> list[str]:
        """Put this plan's state ref back at `expected` wherever the agent (it shares the repository and
        its remote) may have moved it: the local ref, the tracking ref, the remote; returns what was moved.
        Only this plan's ref is read and written: other plans' jobs write theirs meanwhile. On the remote,
        a commit that appends to `expected` (a tick or reply job wrote to this plan) is not the agent's:
        it is left alone, and this session's own write then yields to it. `remote=False` (an isolated agent,
        which has no credentials for the remote) skips the fetch the remote check costs."""
        found: list[str] = []
        # What the remote held when this process last fetched or pushed it (remembered here, where the agent
        # cannot reach): `expected` may carry entries written locally only (`append(push=False)`).
        on_remote = self._known.get(plan_id, expected)
        if self.remote is not None and remote:
            remote_sha = self._fetch(plan_id)
            if remote_sha != on_remote and not (remote_sha and on_remote and self._appends(remote_sha, on_remote)):
                found.append(f"{self.ref(plan_id)} on {self.remote!r} was moved to {(remote_sha or 'deleted')[:12]}; "
                             "restored")
                push_atomic(self.repo, self.remote, [(on_remote, self.ref(plan_id), remote_sha)],
                            what=f"the state of plan {plan_id!r}")
                self.network_ops += 1
                if on_remote is None:
                    run_git(self.repo, "update-ref", "-d", self.tracking(plan_id))  # type: ignore[arg-type]
                else:
                    run_git(self.repo, "update-ref", self.tracking(plan_id), on_remote)  # type: ignore[arg-type]
                self._known[plan_id] = on_remote
            elif remote_sha != on_remote:
                return found  # another job's write: this session's write will conflict and yield
        for ref, want in [(self.ref(plan_id), expected)] + ([(self.tracking(plan_id), on_remote)] if self.remote else []):
            current = ref_sha(self.git, ref)  # type: ignore[arg-type]
            if current == want:
                continue
            found.append(f"{ref} was moved ({(expected or 'absent')[:12]} -> {(current or 'deleted')[:12]}); "
                         "the plan's state ref is plan-runner's record, not the agent's: restored")
            if want is None:
                run_git(self.repo, "update-ref", "-d", ref)  # type: ignore[arg-type]
            else:
                run_git(self.repo, "update-ref", "-m", "plan-runner: undo a move of the state ref", ref, want)  # type: ignore[arg-type]
        return found

    def _appends(self, new: str, old: str | None) -> bool:
        """`new` is a plan-runner write on top of `old` (None: its only parent): its parent, with the old
        ledger as its prefix."""
        parent = self._parent_of(new)
        if parent is None or (old is not None and parent != old):
            return False
        return ledger_extends(self.objects, self._tree_of(new, "?"), self._tree_of(parent, "?"))

    def _parent_of(self, commit: str) -> str | None:
        """The state commit `commit` was written on: its one parent, or for a compaction (a commit without one)
        the commit its summary names. None: neither (not a state commit plan-runner wrote)."""
        data = self._object(commit, b"commit")
        if data is None:
            return None
        header = data.split(b"\n\n", 1)[0]
        parents = [line[7:].decode() for line in header.split(b"\n") if line.startswith(b"parent ")]
        if parents:
            return parents[0] if len(parents) == 1 else None
        return compacted_from(self.objects, self.objects.tree(header[5:45].decode()))

    def _conflict(self, plan_id: str, expected: str | None, actual: str | None, detail: str = "") -> StateConflict:
        self._fresh.discard(plan_id)
        why = f"expected {expected or 'no state'}, found {actual or 'no state'}"
        return StateConflict(
            what=f"the state of plan {plan_id!r} moved since it was read",
            why=why + (f" ({detail})" if detail else ""),
            fix="nothing to do: another job advanced this plan first; re-read the state and yield",
        )

    def _undo(self, plan_id: str, new: str, expected: str | None) -> None:
        """After a lost push, move the local ref to the remote's (only if it is still ours)."""
        self._fresh.discard(plan_id)
        remote_sha = self._fetch(plan_id)
        target = remote_sha or expected
        try:
            if target is None:
                run_git(self.repo, "update-ref", "-d", self.ref(plan_id), new)
            else:
                run_git(self.repo, "update-ref", self.ref(plan_id), target, new)
        except GitCommandError:
            pass  # another local writer moved it already; nothing of ours is left

    def _commit(self, plan_id: str, entries: Sequence[Entry], parent: str | None, files: Mapping[str, bytes],
                options: AppendOptions) -> str:
        if parent:
            commit = self.objects.get(parent, b"commit")
            if commit is None:
                raise missing_commit(plan_id, parent, self.ref(plan_id))
            plan = self.objects.tree(commit[5:45].decode())
        else:
            plan = {}
        lines = [(dump_entry(e) + "\n").encode() for e in entries]
        ledger_sha, count = append_segments(self.objects, plan_id, plan, lines)
        compacted = compact(self.objects, plan_id, plan, count, previous=parent, at=written_at(entries, datetime.now(timezone.utc)))
        if compacted is not None:
            ledger_sha, count = compacted
        if options.snapshot is not None:
            blob = snapshot_blob(options.snapshot, ledger_sha, count)
            plan[SNAPSHOT] = (BLOB_MODE, self.objects.store(b"blob", blob))
        else:
            plan.pop(SNAPSHOT, None)  # a snapshot of an older ledger would only be rejected on read
        if files:
            kept = self.objects.tree(plan[FILES][1]) if FILES in plan else {}
            for name, data in files.items():
                kept[name] = (BLOB_MODE, self.objects.store(b"blob", data))
            plan[FILES] = (TREE_MODE, self.objects.write_tree(kept))
        for name, path in options.dirs.items():
            tree_sha, shas = store_dir(self.objects, Path(path), options.redact, self._dirs.get((plan_id, name), {}))
            self._stored_shas[(plan_id, name)] = shas
            plan[name] = (TREE_MODE, tree_sha)
        kinds = ", ".join(dict.fromkeys(getattr(e, "type", "?") for e in entries)) or "files"
        if compacted is not None:  # a new root: the ref's history is no longer than what the tree holds
            return self.objects.commit_tree(self.objects.write_tree(plan), None,
                                            f"plan-runner: {plan_id}: {kinds}; compacted (written on {parent})")
        return self.objects.commit_tree(self.objects.write_tree(plan), parent, f"plan-runner: {plan_id}: {kinds}")

    # --- plumbing -----------------------------------------------------------------------

    def _sync(self, plan_id: str) -> str | None:
        """Fetch the plan's ref from the remote (unless this process fetched it already) and make
        the local ref match it."""
        ref = self.ref(plan_id)
        if self.remote is None:
            return ref_sha(self.git, ref)
        if plan_id in self._fresh:  # the glob fetch of `plans()` brought it: one read uses it
            self._fresh.discard(plan_id)
            remote_sha = ref_sha(self.git, self.tracking(plan_id))  # type: ignore[arg-type]
        else:
            remote_sha = self._fetch(plan_id)
        self._known[plan_id] = remote_sha
        if remote_sha is not None:
            local = ref_sha(self.git, ref)
            if local != remote_sha:
                if local is not None and self._extends(local, remote_sha):
                    return local  # plan-runner's own entries written here and not pushed yet (a `started`): kept
                run_git(self.repo, "update-ref", ref, remote_sha)
            return remote_sha
        # Absent on the remote: local-only state (if any) stays and is pushed by the next append.
        return ref_sha(self.git, ref)

    def _git_fetch(self, *refspecs: str, negotiate: list[str], prune: bool = False) -> str:
        """One fetch; returns '' or the error text when a named ref is missing on the remote."""
        assert self.remote is not None
        tips = [f"--negotiation-tip={t}" for t in negotiate if ref_sha(self.git, t)]
        config = [] if tips else ["-c", "fetch.negotiationAlgorithm=noop"]
        last: GitCommandError | None = None
        for attempt in range(5):
            if attempt:
                time.sleep(0.1 * attempt)
            self.network_ops += 1
            try:
                run_git(self.repo, *config, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                        "--no-auto-maintenance", *(["--prune"] if prune else []), *tips, self.remote, *refspecs)
                return ""
            except GitCommandError as exc:
                err = stderr_of(exc)
                if "couldn't find remote ref" in err:
                    return err
                # worth a retry: a concurrent fetch holding a ref lock, or a concurrent session's work tree being
                # added (its HEAD names a commit the fetch's connectivity check meets half written)
                if "lock" not in err and "bad object worktrees/" not in err:
                    raise PlanRunnerError(
                        what=f"could not fetch plan-runner's state from {self.remote!r}",
                        why=err or str(exc),
                        fix="check that the remote is reachable and the token may read the repository",
                    ) from None
                last = exc
        raise PlanRunnerError(what="could not fetch plan-runner's state", why=stderr_of(last) if last else "",
                              fix="run again")

    def _fetch(self, plan_id: str) -> str | None:
        """One fetch for the plan's ref. A glob refspec with --prune: a ref absent on the remote is no error,
        and its tracking ref goes."""
        tracking = self.tracking(plan_id)
        assert tracking is not None
        extra, tips = self._extra.get(plan_id, ([], []))
        # Negotiate only with the plan's state (and the branches fetched with it): the rest may be huge.
        self._git_fetch(f"+{self.ref(plan_id)}*:{tracking}*", *extra,
                        negotiate=[tracking, self.ref(plan_id), *tips], prune=True)
        if extra:
            self._fetched_with.add(plan_id)
        return ref_sha(self.git, tracking)

    def _fetch_all(self) -> None:
        prefix = f"{TRACKING}/{self.remote}"
        tips = [f"{prefix}/{name}" for name in self._refs_under(prefix + "/")]
        self._git_fetch(f"+{NAMESPACE}/*:{prefix}/*", negotiate=tips, prune=True)
        self._fresh = set(self._refs_under(prefix + "/"))

    def _refs_under(self, prefix: str) -> list[str]:
        out = run_git(self.repo, "for-each-ref", "--format=%(refname)", prefix).decode().split()
        return [name[len(prefix):] for name in out if "/" not in name[len(prefix):]]

    def close(self) -> None:
        self.objects.close()

    def _object(self, spec: str | None, kind: bytes) -> bytes | None:
        return self.objects.get(spec, kind)

    def _tree_of(self, commit: str | None, plan_id: str) -> Tree:
        return self.objects.tree_of(commit, plan_id, self.ref(plan_id))


def push_atomic(repo: Path | str, remote: str, updates: Sequence[RefUpdate], *, what: str) -> None:
    """One `git push --atomic`: every `(sha or None to delete, ref, expected remote sha or None for
    absent)` lands, each compare-and-swapped with its own lease, or none does."""
    push_leased(repo, remote, updates, what=what, atomic=True)
