"""The plan's `setup:` results in the Actions cache (issue 23; runner/drivers/actions/setup_cache.py): a later session job on a
fresh hosted runner restores them instead of running the set-up again, and an entry the setup record does not vouch
for (saved by someone else under the key, or changed after the save) is refused and the set-up runs fresh.

Every job here runs the composite action as the hosted runner runs it (tests/e2e_act/hosted.py), a real session each
(the script backend, real git, real gates as the sandbox user), on a fresh runner: a fresh checkout at the same path
(a hosted runner's workspace path is the same in every job), a fresh agent area, a fresh scratch; only the cache
service (hosted.ActionsCache: exact key, never overwritten) and the remote carry anything from one job to the next."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from runner.adapters.judge import setup as setup_mod
from runner.adapters.sandbox import agent_clone
from runner.core.plan import SetupConfig
from runner.drivers.actions import setup_cache as action_setup
from tests.e2e_act import world as w
from tests.e2e_act.hosted import ActionsCache, CompositeRunner, HostedImage, JobRun
from tests.servers.github import GitHubServer

ROOT = Path(__file__).resolve().parents[2]
PLAN_PATH = "plans/greeter.md"
SETUP_CMD = "python3 -c \"import os; os.makedirs('made', exist_ok=True); open('made/ok', 'w').write('ok')\""
PLAN = w.PLAN.split("gates:")[0] + f"""setup:
  run:
    - {json.dumps(SETUP_CMD)}
  cache: [made]
  key: [deps.txt]
gates:
  - name: tests
    run: python3 -m unittest -q
    timeout_minutes: 1m
  - name: made-by-setup
    run: "python3 -c \\"import sys; sys.exit(open('made/ok').read() != 'ok')\\""
    timeout_minutes: 1m
budget:
  max_sessions: 12
---
# Greeter

## Stage 1: Greeting <!-- sessions: 4 -->
- [ ] 1.1 `greet()` says hello
- [ ] 1.2 `greet(name)` uses the name
- [ ] 1.3 `greet` is documented
- [ ] 1.4 the docs show an example
"""
SCRIPT = f"""
sessions:
  - id: s-hello
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_1}"}}
      - write: {{path: test_greeter.py, content: "{w.TEST_1}"}}
      - commit: "greet says hello"
      - check: "1.1"
      - commit: "Tick 1.1"
  - id: s-name
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_2}"}}
      - commit: "greet uses the name"
      - check: "1.2"
      - commit: "Tick 1.2"
  - id: s-docs
    steps:
      - write: {{path: README.md, content: "# greeter\\n\\n`greet(name)` says hello.\\n"}}
      - commit: "Document greet"
      - check: "1.3"
      - commit: "Tick 1.3"
  - id: s-example
    steps:
      - write: {{path: EXAMPLE.md, content: "greet(name) says hello name\\n"}}
      - commit: "An example"
      - check: "1.4"
      - commit: "Tick 1.4"
"""


def setup_ran(job: JobRun, command: str = "python3 -c") -> int:
    """How many times the set-up command starting with `command` ran in the job (the session's and the build
    step's events)."""
    return sum(f"setup: {command}" in line for line in job.log)


class Runners:
    """Session jobs of one plan, each on a fresh simulated hosted runner, sharing the remote and a cache service."""

    def __init__(self, tmp: Path, srv: GitHubServer, cache: ActionsCache, bare: Path | None = None,
                 action: Path | None = None, fresh_install: bool = False) -> None:
        """`bare`: the remote (default: the greeter plan with `setup:`); `action`: the action's files (default: this
        checkout's); `fresh_install`: each runner with an empty install directory too (else one is kept: what the
        test is about is the set-up)."""
        from tests.e2e.test_act_e2e import copy_action_source

        self.tmp, self.srv, self.cache = tmp, srv, cache
        self.bare = bare or w.make_remote(tmp, {PLAN_PATH: PLAN, "plans/greeter.script.yaml": SCRIPT,
                                                "deps.txt": "dep==1\n", ".gitignore": "__pycache__/\n"})
        srv.branches = w.BareBranches(self.bare)
        self.action = action or copy_action_source(tmp / "action")
        self.install_root = None if fresh_install else tmp / "usr-local-lib" / "plan-runner"
        self.ws = tmp / "work" / "demo"  # the workspace path, the same on every hosted runner
        self.runs = 0
        self.stamps: list[tuple[float, str]] = []  # (monotonic time, line) of the job's `run:` steps

    def area(self) -> agent_clone.AgentArea:
        return agent_clone.area_for(self.ws, "greeter")

    def setup_key(self) -> str:
        cfg = SetupConfig(run=(SETUP_CMD,), cache=("made",), key=("deps.txt",))
        return setup_mod.setup_key(cfg, self.bare, w.ref(self.bare, "main"))

    def job(self) -> JobRun:
        self.runs += 1
        shutil.rmtree(self.ws.parent, ignore_errors=True)
        shutil.rmtree(self.area().root, ignore_errors=True)  # a fresh runner has no agent area either
        self.ws.parent.mkdir(parents=True)
        w.checkout(self.bare, self.ws)
        w.git(self.ws, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
        image = HostedImage(self.tmp / f"image-{self.runs}", install_root=self.install_root)
        host = {k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "GITHUB_", "VIRTUAL_ENV"))}
        env = {**host, **w.job_env(self.srv, self.ws, self.tmp / f"runner-{self.runs}", "workflow_dispatch",
                                   w.dispatch_event(PLAN_PATH), run_id=self.runs),
               "GITHUB_JOB": "session", "GIT_CONFIG_GLOBAL": os.devnull}
        for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN"):
            env.pop(name)
        self.stamps = []
        runner = CompositeRunner(self.action, image, env, inputs={"mode": "session", "plan": PLAN_PATH},
                                 github={"token": self.srv.token, "server_url": "https://github.example.invalid"},
                                 on_line=lambda line: self.stamps.append((time.monotonic(), line)))
        runner.cache = self.cache
        began = time.monotonic()
        run = runner.run()
        self.wall = time.monotonic() - began  # the job's steps (a fresh runner's own start-up is GitHub's)
        (self.tmp / f"job-{self.runs}.log").write_text(run.text)
        return run

    def record(self) -> dict:
        shown = subprocess.run(["git", "show", f"{action_setup.record_ref('greeter')}:{action_setup.RECORD_FILE}"],
                               cwd=self.bare, capture_output=True, text=True, check=True).stdout
        return json.loads(shown)

    def entry(self, key: str) -> Path:
        return self.cache.root / hashlib.sha256(key.encode()).hexdigest()

    def poisoned_entry(self, key: str) -> None:
        """What someone else saves under `key`: archives named as plan-runner names them, whose `made/ok` says
        `poisoned` (the gate made-by-setup fails on it), under the cache service's folder for that key."""
        area, skey = self.area(), self.setup_key()
        entry = self.entry(key)
        if entry.exists():
            shutil.rmtree(entry)  # deleted and saved again (a job with `actions: write` and a cache token)
        for place in (area.gates, area.work):
            archive = entry / setup_mod.archive_path(Path("/"), place, skey).relative_to("/")
            archive.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive, "w") as tar:
                folder = tarfile.TarInfo("made")
                folder.type, folder.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(folder)
                data = b"poisoned"
                member = tarfile.TarInfo("made/ok")
                member.size, member.mode = len(data), 0o644
                tar.addfile(member, io.BytesIO(data))


def outcome(job: JobRun) -> str:
    return job.step("run").outputs.get("outcome", "")


@pytest.mark.integration
def test_a_later_session_job_restores_the_set_up_and_a_poisoned_entry_is_refused(tmp_path):
    with GitHubServer() as srv:
        jobs = Runners(tmp_path, srv, ActionsCache(tmp_path / "cache-service"))
        # Someone else saved an entry under the key job 1 will save under (its run id guessed). Job 1 has no record:
        # it restores nothing, builds from the base commit before the session's step, records its own digests; its
        # save finds the key taken (a key is never overwritten).
        first_key = action_setup.save_key("greeter", jobs.setup_key(), {"GITHUB_RUN_ID": "1"})
        jobs.poisoned_entry(first_key)
        first = jobs.job()
        assert first.status == "success" and outcome(first) == "Advanced", first.text
        assert not first.step("setup-restore").ran and first.step("setup").outputs["save"] == "true"
        assert setup_ran(first) >= 1, first.text  # positive control: a set-up that runs is counted
        assert jobs.record()["key"] == first_key and first_key not in jobs.cache.saved

        # Job 2 restores the entry under the recorded key: it is not what the record says (as an entry changed
        # after the save, deleted and saved again by another job on the default branch, would be): refused, the set-up
        # runs fresh, the gates never see the poisoned `made/ok`, and the record is dropped.
        second = jobs.job()
        assert second.status == "success" and outcome(second) == "Advanced", second.text
        assert second.step("setup-restore").outputs["cache-hit"] == "true" and not second.step("setup").ran
        assert "the restored set-up cache was refused" in second.text and "has sha256" in second.text, second.text
        assert setup_ran(second) >= 1, second.text
        gone = subprocess.run(["git", "rev-parse", "--verify", "--quiet", action_setup.record_ref("greeter")],
                              cwd=jobs.bare, capture_output=True, text=True)
        assert gone.returncode != 0, "the refused entry's record was not dropped"

        # Job 3 has no record again: it builds, records and saves under its own key.
        third = jobs.job()
        assert third.status == "success" and outcome(third) == "Advanced", third.text
        assert third.step("setup").outputs["save"] == "true" and setup_ran(third) >= 1, third.text
        record = jobs.record()
        assert record["key"] != first_key and record["key"] in jobs.cache.saved and len(record["files"]) == 2
        saved = sorted(p.relative_to(jobs.entry(record["key"])).as_posix()
                       for p in jobs.entry(record["key"]).rglob("*.tar"))
        assert saved == sorted(record["files"])

        # Job 4, a fresh runner again: the recorded entry, checked, is the set-up; no set-up command runs at all,
        # and the gates (made-by-setup reads what set-up made) pass on it.
        fourth = jobs.job()
        assert fourth.status == "success" and outcome(fourth) == "Advanced", fourth.text
        assert fourth.step("setup-restore").outputs["cache-hit"] == "true" and not fourth.step("setup").ran
        assert "sha256 checked against the record" in fourth.text, fourth.text
        assert setup_ran(fourth) == 0, fourth.text
        assert fourth.text.count("plan-runner setup: cache ") == 2  # the agent's clone and the gates' checkout


def test_the_record_is_checked_file_by_file(tmp_path):
    """take_verified: the exact files the record names, each with its sha256, never a link; else nothing is left."""
    staged, cache = tmp_path / "staged", tmp_path / "cache"
    name = "0123456789abcdef/" + "a" * 32 + ".tar"
    (staged / name).parent.mkdir(parents=True)
    (staged / name).write_bytes(b"archive")
    good = {"setup": "k", "key": "x", "files": {name: hashlib.sha256(b"archive").hexdigest()}}
    assert action_setup.parse_record(json.dumps(good).encode()) == good
    assert action_setup.take_verified(good, staged, cache) is None
    assert (cache / name).read_bytes() == b"archive"  # positive control: a matching entry is taken
    shutil.rmtree(cache)
    bad = {**good, "files": {name: hashlib.sha256(b"other").hexdigest()}}
    assert "has sha256" in action_setup.take_verified(bad, staged, cache)
    assert not (cache / name).exists()
    (staged / "extra").write_bytes(b"x")
    assert "holds" in action_setup.take_verified(good, staged, cache)  # a file the record does not name
    (staged / "extra").unlink()
    (staged / name).unlink()
    os.symlink("/etc/passwd", staged / name)
    assert action_setup.take_verified(good, staged, cache) is not None  # a link is never read through
    for broken in (b"", b"[]", json.dumps({**good, "files": {"../x.tar": "0" * 64}}).encode(),
                   json.dumps({**good, "files": {}}).encode()):
        assert action_setup.parse_record(broken) is None


def test_credentials_inside_the_sessions_own_are_not_added_twice(monkeypatch):
    """The session's step runs inside git_credentials; the record's drop (take_restored) asks for them again: git
    must get one Authorization header, not two (it sends every `http.<url>.extraheader` value)."""
    from runner.adapters.action_io import git_credentials

    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    with git_credentials("ghs_outer123", "https://github.com"):
        with git_credentials("ghs_inner456", "https://github.com"):
            assert os.environ["GIT_CONFIG_COUNT"] == "1"
        with git_credentials("ghs_other789", "https://ghe.example.com"):  # another server: its own header
            assert os.environ["GIT_CONFIG_COUNT"] == "2"
        assert os.environ["GIT_CONFIG_COUNT"] == "1"
    assert "GIT_CONFIG_COUNT" not in os.environ
