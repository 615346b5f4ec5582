"""A cancelled or timed-out job, stopped the way GitHub's runner stops it: the composite action runs as the runner runs
it (tests/e2e_act/hosted.py: each `run:` step in its own `bash --noprofile --norc -e -o pipefail` from a script file,
in a world shaped like the hosted image), and the stop goes to the step's own process, SIGINT, 7.5 s later SIGTERM,
2.5 s later SIGKILL. plan-runner (`exec`ed by the step, so it is that process) pushes the agent's work first, then
writes the summary and outputs; the `if: cancelled()` step finishes a salvage the step could not; the next tick
reconciles the session."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from runner.adapters.init import write_init
from runner.adapters.source import Source
from runner.adapters.store.state import GitStateStore, ledger_text
from runner.core.ledger import Dispatched
from tests.e2e_act import world as w
from tests.e2e_act.hosted import SIGINT_WAIT_S, CompositeRunner, HostedImage, JobRun
from tests.servers.github import GitHubServer
from tests.integration.test_action_refusals import ONE_STEP_PLAN

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PLAN = "plans/greeter.md"
SLOW_SCRIPT = f"""
sessions:
  - id: s-slow
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_1}"}}
      - commit: "greet says hello"
      - write: {{path: notes.txt, content: "not committed yet"}}
      - sleep: 60
"""
# The stop comes while a gate runs, as the sandbox user, a test that ignores SIGTERM (the agent wrote it).
STUBBORN_TEST = ("import signal, time, unittest\\n\\n\\nclass T(unittest.TestCase):\\n"
                 "    def test_slow(self):\\n        signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                 "        print('gate up', flush=True)\\n        time.sleep(60)\\n")
GATE_SCRIPT = f"""
sessions:
  - id: s-gate
    steps:
      - write: {{path: greeter.py, content: "{w.GREET_1}"}}
      - write: {{path: test_slow.py, content: "{STUBBORN_TEST}"}}
      - commit: "greet says hello"
      - write: {{path: notes.txt, content: "not committed yet"}}
"""




@pytest.fixture(scope="module")
def install_root(tmp_path_factory) -> Path:
    """One install of plan-runner for the module's jobs, as one runner keeps it for its later jobs."""
    return tmp_path_factory.mktemp("usr-local-lib") / "plan-runner"


@pytest.fixture(scope="module")
def action_dir(tmp_path_factory) -> Path:
    from tests.e2e.test_act_e2e import copy_action_source

    return copy_action_source(tmp_path_factory.mktemp("action") / "plan-runner")


class StopWorld:
    """A bare remote with the plan and the workflow `init` writes, the test server, a job's checkout, and the
    composite action run as the hosted runner runs it."""

    def __init__(self, tmp: Path, srv: GitHubServer, script: str, install_root: Path, action_dir: Path,
                 dispatched: bool = False, http: bool = False, inputs: dict[str, str] | None = None) -> None:
        """`http`: the job's checkout pushes over smart HTTP to the test server (which takes only a live token it
        knows: tests/servers/github_apps.py); `inputs`: more of the action's inputs."""
        init = tmp / "init"
        init.mkdir()
        write_init(init, source=Source("octo-org/plan-runner", "0" * 40, "0.1.0", "read from the checkout"))
        files = {PLAN: ONE_STEP_PLAN, "plans/greeter.script.yaml": script, ".gitignore": "__pycache__/\n",
                 ".github/workflows/plan-runner.yml": (init / ".github/workflows/plan-runner.yml").read_text()}
        self.bare = w.make_remote(tmp, files)
        srv.branches = w.BareBranches(self.bare)
        if dispatched:
            seed = w.checkout(self.bare, tmp / "seed-state")
            GitStateStore(seed, remote="origin").append(
                "greeter", [Dispatched(at=datetime.now(timezone.utc), for_session=1, key="greeter#1")], None)
        ws = w.checkout(self.bare, tmp / "job")
        server = "https://github.example.invalid"
        if http:
            srv.git_bare = self.bare
            w.git(ws, "remote", "set-url", "origin", f"{srv.url}/octo-org/demo.git")
            server = srv.url
        self.image = HostedImage(tmp / "image", install_root=install_root)
        # The machine's environment (its CA bundle, its package mirrors), as a runner's job inherits it, less the
        # test machine's own pointers at plan-runner (a hosted runner has none), then what the runner sets.
        host = {k: v for k, v in os.environ.items() if not k.startswith(("PLAN_RUNNER_", "GITHUB_", "VIRTUAL_ENV"))}
        env = {**host, **w.job_env(srv, ws, tmp / "runner", "workflow_dispatch", w.dispatch_event(PLAN)),
               "GITHUB_JOB": "session", "GIT_CONFIG_GLOBAL": os.devnull, "GITHUB_SERVER_URL": server}
        for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN"):
            env.pop(name)
        self.lines: list[str] = []
        self.seen = threading.Condition()
        self.job = CompositeRunner(
            action_dir, self.image, env,
            inputs={"mode": "session", "plan": PLAN, "anthropic-api-key": "sk-ant-test-secret-value-123",
                    **(inputs or {})},
            github={"token": srv.token, "server_url": server}, on_line=self._line)

    def _line(self, line: str) -> None:
        with self.seen:
            self.lines.append(line)
            self.seen.notify_all()

    def wait_for(self, says: str, times: int, running: threading.Thread, timeout: float = 240) -> None:
        with self.seen:
            assert self.seen.wait_for(lambda: sum(says in s for s in self.lines) >= times or not running.is_alive(),
                                      timeout) and running.is_alive(), "".join(self.lines)

    def run_and_stop(self, says: str, times: int, settle_s: float) -> JobRun:
        result: list[JobRun] = []
        runner = threading.Thread(target=lambda: result.append(self.job.run()), daemon=True)
        runner.start()
        self.wait_for(says, times, runner)
        time.sleep(settle_s)
        self.job.cancel()
        runner.join(120)
        assert result, "the job did not end"
        (self.image.root / "job.log").write_text(result[0].text)  # for a failing test's reader
        return result[0]


@pytest.mark.parametrize("dispatched,during", [(False, "agent"), (True, "agent"), (True, "gates")])
def test_the_runners_stop_reaches_plan_runner_which_pushes_the_session_then_reports(
        tmp_path: Path, install_root: Path, action_dir: Path, dispatched: bool, during: str) -> None:
    """The runner's stop schedule mid-session, signals to the step's own pid: plan-runner (exec'ed by the step) gets
    the SIGINT, stops the agent (or the gate, run as the sandbox user and ignoring SIGTERM), pushes the agent's commits
    and leftovers to the session ref and its start to the state ref, and exits within the SIGINT's 7.5 s (no SIGTERM,
    no SIGKILL); the outputs say `cancelled` and `salvage: done`, the summary says where the work is, and the
    `if: cancelled()` step is skipped. `dispatched`: the start was written locally only (pushed after the work)."""
    script = SLOW_SCRIPT if during == "agent" else GATE_SCRIPT
    with GitHubServer() as srv:
        world = StopWorld(tmp_path, srv, script, install_root, action_dir, dispatched=dispatched)
        if during == "agent":
            job = world.run_and_stop("plan-runner tool: write", 2, 0.5)  # the agent wrote its leftover and sleeps
        else:
            job = world.run_and_stop("plan-runner gate: start tests", 1, 1.0)  # the test is up, ignoring SIGTERM
        out = job.text
        step = job.step("run")
        assert job.status == "cancelled", out
        assert [s for s, _ in step.signals] == ["SIGINT"], (step.signals, out)
        assert step.exited_after_stop_s is not None and step.exited_after_stop_s < SIGINT_WAIT_S, out
        assert step.exit_code == 128 + signal.SIGINT, out
        if during == "agent":  # the agent was still running when the stop came: it reached no end of its own
            assert "plan-runner agent:" not in out and "plan-runner gate:" not in out, out
        assert step.outputs["outcome"] == "cancelled" and step.outputs["salvage"] == "done", step.outputs
        assert not job.step("backstop").ran
        assert "refs/plan-runner/sessions/greeter/1" in job.summary, out
        assert_session_saved(world.bare, dispatched)


def test_a_step_killed_before_its_salvage_is_finished_by_the_cancelled_step(tmp_path: Path, install_root: Path,
                                                                            action_dir: Path) -> None:
    """The stop's salvage cannot finish before the runner's SIGKILL: the remote takes 20 s to accept the first push
    of the session's work (a pre-receive hook that sleeps once). The runner kills plan-runner 10 s after its SIGINT;
    the action's `if: cancelled()` step then pushes the work and the start and writes the outputs and summary."""
    with GitHubServer() as srv:
        world = StopWorld(tmp_path, srv, SLOW_SCRIPT, install_root, action_dir, dispatched=True)
        hook = world.bare / "hooks" / "pre-receive"
        hook.write_text(f"#!/bin/sh\nif grep -q refs/plan-runner/sessions/ && [ ! -e {tmp_path}/slow-once ]; then\n"
                        f"  touch {tmp_path}/slow-once; sleep 20\nfi\nexit 0\n")
        hook.chmod(0o755)
        job = world.run_and_stop("plan-runner tool: write", 2, 0.5)
        step = job.step("run")
        assert [s for s, _ in step.signals] == ["SIGINT", "SIGTERM", "SIGKILL"], (step.signals, job.text)
        assert 9.5 < step.signals[-1][1] < 12, step.signals
        assert step.outputs.get("outcome") == "cancelled" and "salvage" not in step.outputs, step.outputs
        backstop = job.step("backstop")
        assert backstop.ran and backstop.exit_code == 0, job.text
        assert backstop.outputs["outcome"] == "cancelled" and backstop.outputs["salvage"] == "done"
        assert "refs/plan-runner/sessions/greeter/1" in backstop.summary, backstop.summary
        assert_session_saved(world.bare, dispatched=True)


@pytest.mark.parametrize("app_mints", [True, False])
def test_the_cancelled_step_pushes_the_work_with_a_token_minted_from_the_app(tmp_path: Path, install_root: Path,
                                                                             action_dir: Path, app_mints: bool) -> None:
    """With `app-id` and `app-private-key`, the `if: cancelled()` step pushes the agent's work with a token it mints
    from the App, as the session's step does (the remote serves git over smart HTTP and takes only a live token:
    tests/servers/github_apps.py). When GitHub mints none (the App suspended after the session step's token), it
    pushes with the job's token instead and says so (what, why, fix), as the main path does; the work is kept
    either way."""
    from tests.integration.test_action_app_token import APP_ID, BOT, PRIVATE, PUBLIC
    from tests.servers.github_apps import add_app

    with GitHubServer() as srv:
        app = add_app(srv, APP_ID, PUBLIC)
        if not app_mints:
            app.max_mints = 1  # the session step's token, then no more
        world = StopWorld(tmp_path, srv, SLOW_SCRIPT, install_root, action_dir, dispatched=True, http=True,
                          inputs={"app-id": str(APP_ID), "app-private-key": PRIVATE})
        hook = world.bare / "hooks" / "pre-receive"
        hook.write_text(f"#!/bin/sh\nif grep -q refs/plan-runner/sessions/ && [ ! -e {tmp_path}/slow-once ]; then\n"
                        f"  touch {tmp_path}/slow-once; sleep 20\nfi\nexit 0\n")
        hook.chmod(0o755)
        job = world.run_and_stop("plan-runner tool: write", 2, 0.5)
        step = job.step("run")
        assert [s for s, _ in step.signals] == ["SIGINT", "SIGTERM", "SIGKILL"], (step.signals, job.text)
        backstop = job.step("backstop")
        assert backstop.ran and backstop.exit_code == 0, job.text
        assert backstop.outputs["outcome"] == "cancelled" and backstop.outputs["salvage"] == "done"
        assert "refs/plan-runner/sessions/greeter/1" in backstop.summary, backstop.summary
        assert_session_saved(world.bare, dispatched=True)
        pushes = [(login, ok) for method, path, login, ok in srv.git_requests
                  if method == "POST" and path.endswith("git-receive-pack")]
        if app_mints:
            assert len(app.minted) == 2, app.minted  # the session step's, then the backstop's own
            assert pushes and all(p == (BOT, True) for p in pushes), pushes
            assert "push token" not in backstop.summary
        else:
            assert len(app.minted) == 1
            assert pushes[-1] == (srv.login, True), pushes  # the backstop's: the job's token
            assert "could not be minted for the salvage" in backstop.summary, backstop.summary
            assert "::warning title=plan-runner push token::" in job.text
        shown = "\n".join(line for line in job.text.splitlines() if "::add-mask::" not in line)
        for minted in app.minted:
            assert minted["token"] not in shown
        assert PRIVATE.splitlines()[1] not in shown


def assert_session_saved(bare: Path, dispatched: bool) -> None:
    log = subprocess.run(["git", "log", "--format=%s", "refs/plan-runner/sessions/greeter/1"], cwd=bare,
                         capture_output=True, text=True, check=True).stdout
    assert "greet says hello" in log and "WIP" in log.splitlines()[0]
    shown = subprocess.run(["git", "show", "refs/plan-runner/sessions/greeter/1:notes.txt"], cwd=bare,
                           capture_output=True, text=True, check=True).stdout
    assert shown == "not committed yet"
    kinds = [json.loads(line)["type"] for line in ledger_text(bare, "refs/plan-runner/state/greeter").splitlines()]
    kinds = [k for k in kinds if k != "place"]  # the issue the session's progress shows in, recorded before it
    assert kinds == (["dispatch", "started"] if dispatched else ["started"]), kinds
