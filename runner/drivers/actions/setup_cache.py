"""The plan's `setup:` results in the Actions cache, so that a later session job on a fresh hosted runner
restores them instead of running the plan's whole set-up again (a real project's `pip install -e .[test]`).

What is cached is what the set-up cache of runner/adapters/judge/setup.py keeps on the runner's disk: one archive
of the `cache:` paths per place (the agent's tree, the gates' checkout; a venv names its own path, so an archive
is built at the path it is used at), keyed by the commands, the cache paths and the base's `key:` files. On a
hosted runner those places are the same paths in every job (the workspace and the runner's user are).

The rule of the set-up cache holds across jobs: **an entry holds only what the maintainer's code produced.**

* The archives are built by `build`, a step of the composite action that runs *before* the session's step: from a
  fresh checkout of the trusted commit (the base the plan's configuration is read from), as the agent's user, with
  the gates' environment, and before any agent, gate or agent-written code has run in the job. Sessions only
  restore them.
* An entry in the Actions cache is not trusted for being there. Anyone whose code runs in a workflow on the default
  branch can take that job's cache token and save any key, and a job can read what its own branch and the default
  branch saved (GitHub: "Restrictions for accessing a cache"). So `build` records the sha256 of every archive it
  made in the **setup record**, a ref of the repository (`refs/plan-runner/setup-cache/<plan>`), pushed with the
  job's token, which the agent never holds. A restored entry is used only if its files are exactly the ones the
  record names, with those digests (read once, hashed while copied); otherwise it is refused with a warning and
  the set-up runs fresh (and the record is dropped, so the next job builds and saves anew). Without a record
  nothing is restored at all. The key of each new entry names the run that built it.

Steps (action.yml): `prepare` (runner/drivers/actions/install_cache.py, a `run:` step: the cache token goes to `uses:` steps
only) reads the record and prints the key of the entry it names (`setup-restore-key`) and of a new one
(`setup-save-key`); `actions/cache/restore`; on a miss `build` builds, records and says `save=true`, and
`actions/cache/save` saves; on a hit the session's step takes the entry (`take_restored`) before anything of the
session runs, if the record vouches for it, and otherwise refuses it and deletes the record, so that the next job
builds and saves a fresh entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from runner.adapters.action_io import append_outputs as _output

PREFIX = "plan-runner-setup-v1"
RECORD_REF = "refs/plan-runner/setup-cache"
RECORD_FILE = "record.json"
# what an entry may hold: <place>/<key>.tar, as judge/setup.py names them
_MEMBER = re.compile(r"^[0-9a-f]{16}/[0-9a-f]{32}\.tar$")
_CHUNK = 1 << 20


def record_ref(plan_id: str) -> str:
    return f"{RECORD_REF}/{plan_id}"


def save_key(plan_id: str, setup_key: str, env: Mapping[str, str]) -> str:
    """A key no earlier entry can hold: the run (and attempt) that builds it."""
    run = f"{env.get('GITHUB_RUN_ID') or 'local'}-{env.get('GITHUB_RUN_ATTEMPT') or '1'}"
    return f"{PREFIX}-{plan_id}-{setup_key}-{run}"


def parse_record(data: bytes | None) -> dict | None:
    """The setup record, or None when it is absent or not one (then nothing restored is trusted)."""
    try:
        record = json.loads(data or b"")
    except ValueError:
        return None
    if not (isinstance(record, dict) and isinstance(record.get("setup"), str) and isinstance(record.get("key"), str)
            and isinstance(record.get("files"), dict) and record["files"]
            and all(isinstance(k, str) and _MEMBER.match(k) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)
                    for k, v in record["files"].items())):
        return None
    return record


def _copy_hashed(src: Path, dest: Path) -> str:
    """Copy the regular file `src` (never through a link) to `dest`, returning the sha256 of what was copied."""
    h = hashlib.sha256()
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(f"{src} is not a regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as out:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                h.update(chunk)
                out.write(chunk)
    return h.hexdigest()


def take_verified(record: dict, staged: Path, cache_dir: Path) -> str | None:
    """Copy a restored entry (`staged`) into the set-up cache (`cache_dir`) if it is exactly what the record names:
    the same files (no more, no fewer, no link), each with the recorded sha256. None: taken; else why it was
    refused (then nothing of it is left in `cache_dir`)."""
    found = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if not p.is_dir() or p.is_symlink())
    if found != sorted(record["files"]):
        return f"it holds {found or 'nothing'}, the record names {sorted(record['files'])}"
    copied: list[Path] = []
    for name, digest in sorted(record["files"].items()):
        dest = cache_dir / name
        tmp = dest.with_name(dest.name + ".restoring")
        try:
            got = _copy_hashed(staged / name, tmp)
        except OSError as err:
            got = f"unreadable ({err})"
        if got != digest:
            tmp.unlink(missing_ok=True)
            for path in copied:
                path.unlink(missing_ok=True)
            return f"{name} has sha256 {got[:16]}..., the record says {digest[:16]}..."
        tmp.replace(dest)
        copied.append(dest)
    return None


def _say(text: str) -> None:
    print(f"plan-runner setup cache: {text}", flush=True)


class _Job:
    """The plan, its trusted commit and its set-up as the session will see them."""

    def __init__(self, env: Mapping[str, str]) -> None:
        from runner.adapters.judge import setup, untar
        from runner.adapters.sandbox import agent_clone
        from runner.drivers.actions.env import REMOTE, github_workspace
        from runner.drivers.session import load_trusted_plan

        self.env = env
        self.ws = github_workspace(env, env.get("PLAN_RUNNER_PLAN", ""))
        self.plan, _ = load_trusted_plan(self.ws)
        self.setup = self.plan.config.setup
        self.trusted = setup.trusted_commit(self.ws.repo, REMOTE, self.plan.config.base)
        self.cacheable = bool(self.setup is not None and self.setup.run and untar.clean_roots(self.setup.cache)
                              and self.trusted)
        self.key = (setup.setup_key(self.setup, self.ws.repo, self.trusted)
                    if self.cacheable and self.setup is not None and self.trusted else "")  # (cacheable says they are)
        self.scratch = self.ws.scratch_dir / self.plan.id
        self.cache_dir = self.scratch / "setup-cache"
        self.area = agent_clone.area_for(self.ws.repo, self.plan.id)
        self.ref = record_ref(self.plan.id)

    def credentials(self):
        from runner.adapters.action_io import git_credentials

        return git_credentials(self.env.get("GITHUB_TOKEN"), self.env.get("GITHUB_SERVER_URL", ""))

    def fetch_record(self) -> dict | None:
        from runner.adapters.git import work as gitwork
        from runner.drivers.actions.env import REMOTE

        try:
            gitwork.run_git(self.ws.repo, "update-ref", "-d", self.ref)
            with self.credentials():
                gitwork.run_git(self.ws.repo, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", REMOTE,
                                f"+{self.ref}:{self.ref}")
        except Exception:  # noqa: BLE001 - git's error: no record yet (or none readable): nothing is restored
            return None
        return self.record()

    def record(self) -> dict | None:
        from runner.adapters.git import work as gitwork

        if not gitwork.ref_sha(self.ws.repo, self.ref):
            return None
        text = gitwork.read_file_at(self.ws.repo, self.ref, RECORD_FILE)
        record = parse_record(text.encode() if text is not None else None)
        return record if record is not None and record["setup"] == self.key else None

    def drop_record(self) -> None:
        """Delete the record on the remote, leased on the one read (a newer record another job wrote stays)."""
        from runner.adapters.git import work as gitwork
        from runner.core.errors import PlanRunnerError
        from runner.drivers.actions.env import REMOTE

        seen = gitwork.ref_sha(self.ws.repo, self.ref)
        try:
            with self.credentials():
                gitwork.push_leased(self.ws.repo, REMOTE, [(None, self.ref, seen)], what=f"the set-up record {self.ref}")
        except PlanRunnerError as err:
            _say(f"the record was not deleted ({err.what})")

    def places(self) -> tuple[Path, Path]:
        """The gates' checkout first: its checkout makes the clean home both set-ups run with."""
        return self.area.gates, self.area.work


def key_outputs(env: Mapping[str, str]) -> dict[str, str]:
    """The set-up cache's step outputs, for `prepare` (a `run:` step before the restore, in plan-runner's venv):
    `setup-restore-key` (the entry the record names; empty without a record: nothing to restore), `setup-save-key`,
    `setup-dir`;
    none when the plan has no `setup:` with `cache:` paths (the steps are then skipped)."""
    try:
        job = _Job(env)
    except Exception as err:  # noqa: BLE001 - the session step reports a bad plan or checkout; no cache then
        _say(f"none for this job ({getattr(err, 'what', err)})")
        return {}
    if not job.cacheable:
        return {}
    record = job.fetch_record()
    new = save_key(job.plan.id, job.key, env)
    staging = Path(env.get("RUNNER_TEMP") or "/tmp") / "plan-runner-setup-cache"
    # no record: nothing restored could be trusted, so nothing is restored (a stranger's entry under the key this job
    # saves under is then never read, and the record built here names this job's own digests)
    return {"setup-restore-key": record["key"] if record else "", "setup-save-key": new, "setup-dir": str(staging)}


def _warn(text: str) -> None:
    print(f"::warning title=plan-runner setup cache::{text}", flush=True)


def take_restored(env: Mapping[str, str], log=_say, warn=_warn) -> bool | None:
    """In the session's step, before anything of the session: a restored entry (PLAN_RUNNER_SETUP_HIT) goes into
    plan-runner's scratch if the setup record vouches for every file of it. True: taken; False: refused (with a
    warning; the record is deleted, leased on what was read, so the next job builds and saves a fresh entry
    instead of restoring this one again; this session sets up as without the cache); None: nothing was restored."""
    if env.get("PLAN_RUNNER_SETUP_HIT") != "true" or not env.get("PLAN_RUNNER_SETUP_DIR"):
        return None
    staged = Path(env["PLAN_RUNNER_SETUP_DIR"])
    try:
        job = _Job(env)
        record = job.record()
        key = env.get("PLAN_RUNNER_SETUP_ENTRY", "")
        why = "no setup record vouches for it" if record is None else (
            f"it is not the entry the record names ({record['key']})" if record["key"] != key
            else take_verified(record, staged, job.cache_dir))
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    if why is None:
        log(f"restored {key} (sha256 checked against the record)")
        return True
    warn(f"the restored set-up cache was refused: {why}; the set-up runs fresh")
    if record is not None:
        job.drop_record()
    return False


def _session_due(job: _Job) -> bool:
    from runner.adapters.store.state import GitStateStore
    from runner.core.actions import RunSession
    from runner.core.policy import decide_start
    from runner.drivers.actions.env import REMOTE
    from runner.drivers.session import Ports, load_session

    reading = Ports(store=GitStateStore(job.ws.repo, remote=REMOTE),
                    dispatcher=None, parker=None)  # type: ignore[arg-type]  # never dispatches or parks
    s = load_session(job.ws, reading)
    return isinstance(decide_start(s.state, s.plan), RunSession)


def build(job: _Job) -> dict[str, str] | None:
    """The set-up run at each place from a fresh checkout of the trusted commit (judge/setup.run_setup builds the
    archive there, as the session would): the archives made, by name, with their sha256; None when set-up failed
    (the session then reports it, as it does without the Actions cache)."""
    from runner.adapters.judge import setup
    from runner.adapters.sandbox import agent_clone
    from runner.adapters.sandbox import identity as sandbox
    from runner.adapters.judge.base import gate_env
    from runner.drivers.session import isolation_of
    from runner.drivers.session.phases import gates_tree_for

    assert job.setup is not None and job.trusted is not None
    job.scratch.mkdir(parents=True, exist_ok=True)
    env = gate_env(job.ws.env, job.plan, job.area.gate_home, Path(job.ws.repo))  # no credentials
    with sandbox.leased(isolation_of(job.ws, job.plan), actions=True, repo=job.ws.repo) as identity, \
            identity.network("setup", job.plan.config.network):  # the registries (or the plan's list) only
        for place in job.places():
            # built here and now, never taken from the runner's disk: an archive a session left there (a runner
            # that keeps its workspace) may have been built after an agent ran
            setup.archive_path(job.cache_dir, place, job.key).unlink(missing_ok=True)

            if place == job.area.gates:  # the gates' own: built as the session's gates build it, into the base
                gates = gates_tree_for(job.ws, job.plan, identity, job.area)
                with gates.base.held():
                    gates.tree(job.trusted)
                    gates.close()
                if gates.failures:
                    _say(f"set-up failed on the base commit: {gates.failures[0].error}; nothing is cached")
                    return None
                continue

            def fresh(sha: str, place: Path = place) -> Path:
                return agent_clone.checkout(job.area, identity, job.ws.repo, sha, job.scratch, into=place)
            failed = setup.run_setup(job.setup, sha=job.trusted, repo=job.ws.repo, workdir=fresh(job.trusted),
                                     env=env, identity=identity, cache_dir=job.cache_dir, trusted_sha=job.trusted,
                                     checkout=fresh, on_event=lambda kind, detail: _say(f"{kind}: {detail}"))
            if failed:
                _say(f"set-up failed on the base commit: {failed[0].error}; nothing is cached")
                return None
    files = {}
    for place in job.places():
        archive = setup.archive_path(job.cache_dir, place, job.key)
        if not archive.is_file():
            return None
        files[archive.relative_to(job.cache_dir).as_posix()] = hashlib.sha256(archive.read_bytes()).hexdigest()
    return files


def push_record(job: _Job, record: dict) -> bool:
    """The record, a commit of one file on `refs/plan-runner/setup-cache/<plan>`, pushed with the job's token (the
    agent never holds it), leased on what `key` fetched."""
    from runner.adapters.git import work as gitwork
    from runner.adapters.store.objects import BLOB_MODE, GitObjects
    from runner.core.errors import PlanRunnerError
    from runner.drivers.actions.env import REMOTE

    objects = GitObjects(job.ws.repo)
    try:
        blob = objects.store(b"blob", json.dumps(record, indent=1, sort_keys=True).encode() + b"\n")
        tree = objects.write_tree({RECORD_FILE: (BLOB_MODE, blob)})
        commit = objects.commit_tree(tree, None, f"plan-runner: the set-up cache of {job.plan.id}")
    finally:
        objects.close()
    seen = gitwork.ref_sha(job.ws.repo, job.ref)
    try:
        with job.credentials():
            gitwork.push_leased(job.ws.repo, REMOTE, [(commit, job.ref, seen)], what=f"the set-up record {job.ref}")
    except PlanRunnerError as err:  # another job recorded its own entry, or no `contents: write`: nothing saved
        _say(f"the record was not pushed ({err.what}): the entry is not saved")
        return False
    gitwork.run_git(job.ws.repo, "update-ref", job.ref, commit)
    return True


def cmd_build(env: Mapping[str, str]) -> int:
    """On a miss: build the entry from the trusted commit and record it. Prints `save=true|false` to
    GITHUB_OUTPUT (a hit is taken by the session's step: `take_restored`)."""
    job = _Job(env)
    staged = Path(env["PLAN_RUNNER_SETUP_DIR"])
    shutil.rmtree(staged, ignore_errors=True)
    if not _session_due(job):
        _say("no session is due: nothing is built")
        _output(env, save="false")
        return 0
    files = build(job)
    save = False
    if files is not None:
        record = {"setup": job.key, "key": env["PLAN_RUNNER_SETUP_SAVE_AS"], "files": files}
        if push_record(job, record):
            staged.mkdir(parents=True)
            for name in files:
                (staged / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(job.cache_dir / name, staged / name)
            save = True
            _say(f"built and recorded {record['key']}: {', '.join(sorted(files))}")
    _output(env, save="true" if save else "false")
    return 0


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    if argv[1:] == ["build"]:
        try:
            return cmd_build(env)
        except Exception as err:  # noqa: BLE001 - the session step meets the same problem and reports it in full
            print(f"::warning title=plan-runner setup cache::nothing cached: {getattr(err, 'what', err)}", flush=True)
            _output(env, save="false")
            return 0
    print("usage: python -m runner.drivers.actions.setup_cache build", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
