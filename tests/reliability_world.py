"""A small world for the reliability and security tests: a repository with a bare remote,
a plan driven by a scripted agent, the real CLI in a child process, and readers for what
plan-runner left behind (the ledger, reports, every git object).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from runner.drivers.actions.main import run_action
from runner.drivers.actions.tick import tick_plan
from runner.adapters.github.events import GitHubContext
from runner.adapters.github.client import GitHubDriver
from runner.adapters.github.api import RetryPolicy
from runner.core.ledger import parse_entry
from runner.core.policy import fold
from runner.drivers.session import Ports, Workspace
from runner.adapters.store.state import GitStateStore
from tests.e2e_act import world as w
from tests.servers.github import GitHubServer
from runner.adapters.store.state import ledger_text

PLAN = """\
---
agent:
  backend: script
  script: {script}
  stall_minutes: 5s
  time_limit_minutes: 30s
  session_tokens: 100000{agent_extra}
{front_extra}gates:
  - name: tests
    run: {gate}
budget:
  max_sessions: 12
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 2 -->
- [ ] 1.1 Multiplication
- [ ] 1.2 Division

## Stage 2: Docs <!-- sessions: 1 -->
- [ ] 2.1 README
"""

def script(*sessions: list[dict]) -> str:
    """A script-backend YAML from Python steps: no quoting by hand."""
    return yaml.safe_dump({"sessions": [list(s) for s in sessions]}, sort_keys=False, width=10_000)


MUL = '{path: calc/mul.py, content: "def mul(a, b):\\n    return a * b\\n"}'
MUL_STEP = {"write": {"path": "calc/mul.py", "content": "def mul(a, b):\n    return a * b\n"}}
DIV = '{path: calc/div.py, content: "def div(a, b):\\n    return a / b\\n"}'
TEST_MUL = ('{path: tests/test_mul.py, content: "import unittest\\nfrom calc.mul import mul\\n\\n\\n'
            'class T(unittest.TestCase):\\n    def test_mul(self):\\n        self.assertEqual(mul(2, 3), 6)\\n"}')


# The pytest plugins this test run's Python holds for the suite itself (pyproject's test extra): hypothesis, anyio,
# xdist, timeout. A gate that runs `python -m pytest` with this Python blocks them by name, as a project's own
# environment would not have them: they take ~1 s of each gate's start (hypothesis ~0.9 s) and test nothing there.
PYTEST_OWN_PLUGINS_OFF = "-p no:hypothesispytest -p no:anyio -p no:xdist -p no:xdist.looponfail -p no:timeout"


def git(repo: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    proc = subprocess.run(["git", *args], cwd=repo, check=check, capture_output=True, text=True, env=env)
    return proc.stdout.strip()


def write_calc_project(repo: Path, files: dict[str, str] | None = None) -> None:
    """The small project the plans work on: `calc.add` with its unittest, `plans/`, and any extra `files`."""
    for name, text in {
        "calc/__init__.py": "def add(a, b):\n    return a + b\n",
        "tests/__init__.py": "",
        "tests/test_add.py": "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
                             "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
        ".gitignore": "__pycache__/\n",
        **(files or {}),
    }.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / "plans").mkdir(exist_ok=True)


def make_repo(tmp: Path, script: str, *, remote: bool = True, gate: str | None = None, agent_extra: str = "",
              front_extra: str = "", files: dict[str, str] | None = None) -> Path:
    """A clone with `plans/calc.md` committed on main; with `remote`, `origin` is a bare repository."""
    repo = tmp / "repo"
    write_calc_project(repo, files)
    script_path = tmp / "script.yaml"
    script_path.write_text(textwrap.dedent(script))
    gate = gate or f"{sys.executable} -m unittest discover -s tests -q"
    (repo / "plans" / "calc.md").write_text(PLAN.format(script=script_path, gate=gate, agent_extra=agent_extra,
                                                                 front_extra=front_extra))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    if remote:
        bare = tmp / "origin.git"
        git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
        git(repo, "remote", "add", "origin", str(bare))
        git(repo, "push", "-q", "origin", "main")
    return repo


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAN_RUNNER_")}
    return {**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **extra}


def run_session(repo: Path, *, fault: str | None = None, env: dict[str, str] | None = None,
                plan: str = "plans/calc.md") -> subprocess.CompletedProcess:
    """`plan-runner session <plan> --json` as a child process; with `fault`, it is killed at that point."""
    e = cli_env(**(env or {}))
    if fault:
        e["PLAN_RUNNER_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "runner", "session", plan, "--json"], cwd=repo,
                          capture_output=True, text=True, env=e, timeout=120)


def result_json(proc: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


def ledger_lines(repo: Path, plan_id: str = "calc", ref: str = "refs/plan-runner/state") -> list[str]:
    text = ledger_text(repo, f"{ref}/{plan_id}")  # either format (one blob, or segments)
    return [line for line in text.splitlines() if line.strip()]


def ledger(repo: Path, plan_id: str = "calc", ref: str = "refs/plan-runner/state") -> list[dict]:
    return [json.loads(line) for line in ledger_lines(repo, plan_id, ref)]


def fold_ledger(repo: Path, plan_id: str = "calc", ref: str = "refs/plan-runner/state"):
    """Parse every line as a ledger entry and fold them: raises if the ledger is corrupt."""
    return fold([parse_entry(line) for line in ledger_lines(repo, plan_id, ref)])


def all_git_text(repo: Path) -> bytes:
    """Every object in the repository, decompressed (blobs, trees, commits, tags), plus the
    transcripts tarballs unpacked: the place to search for a secret."""
    out = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, capture_output=True,
                         check=True).stdout
    return out + b"\n" + _unpacked_tarballs(repo)


def _unpacked_tarballs(repo: Path) -> bytes:
    import io
    import tarfile

    found = b""
    listing = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)"],
                             cwd=repo, capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        sha, kind = line.split()
        if kind != "blob":
            continue
        data = subprocess.run(["git", "cat-file", "blob", sha], cwd=repo, capture_output=True, check=True).stdout
        if data[:2] == b"\x1f\x8b":
            try:
                with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                    for member in tar.getmembers():
                        fh = tar.extractfile(member)
                        if fh is not None:
                            found += fh.read() + b"\n"
            except (tarfile.TarError, OSError, EOFError):
                found += data
    return found


def files_text(root: Path) -> bytes:
    """Every regular file under `root` (reports, summaries, scratch), concatenated."""
    out = b""
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out += path.read_bytes() + b"\n"
    return out


# --- GitHub jobs: each one a fresh checkout of the bare remote, as on a runner ------------------------------


class GitHubJobs:
    def __init__(self, root: Path, srv: GitHubServer, script_text: str) -> None:
        self.root, self.srv, self.n = root, srv, 0
        self.bare = w.make_remote(root, {"plans/greeter.md": w.PLAN, "plans/greeter.script.yaml": script_text,
                                         ".gitignore": "__pycache__/\n"})
        srv.branches = w.BareBranches(self.bare)

    def env(self, event_name: str = "workflow_dispatch", event: dict | None = None) -> dict[str, str]:
        self.n += 1
        ws = w.checkout(self.bare, self.root / f"job{self.n}")
        mode = {"schedule": "tick"}.get(event_name, "session")
        return {**w.job_env(self.srv, ws, self.root / "runner", event_name,
                            event or w.dispatch_event("plans/greeter.md"), self.n), "PLAN_RUNNER_MODE": mode}

    def killed_session(self, point: str) -> None:
        env = {**self.env(), "PLAN_RUNNER_FAULT": point, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        proc = subprocess.run([sys.executable, "-m", "runner", "action"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == -signal.SIGKILL, f"{point} not reached: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"

    def session(self, expect: tuple[int, ...] = (0, 3), fast_retries: bool = False) -> dict[str, str]:
        """One session job in-process; `fast_retries`: the real driver with near-zero retry waits."""
        env = self.env()
        self.log = io.StringIO()
        factory = {"driver_factory": lambda ctx, e: GitHubDriver(ctx, e["GITHUB_TOKEN"], retry=RetryPolicy.fast())} \
            if fast_retries else {}
        rc = run_action(env, out=self.log, **factory)
        assert rc in expect, (rc, self.log.getvalue()[-3000:])
        outputs = w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
        outputs["summary"] = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
        return outputs

    def tick(self, shift: timedelta = timedelta()) -> str:
        """One tick over the plan, with the clock moved by `shift` (orphans and lost dispatches age)."""
        env = self.env("schedule", w.schedule_event())
        repo = Path(env["GITHUB_WORKSPACE"])
        ws = Workspace(repo=repo, plan_path="plans/greeter.md", env=env, remote="origin", job=env["GITHUB_RUN_ID"],
                       clock=lambda: datetime.now(UTC) + shift)
        with GitHubDriver(GitHubContext.from_env(env), self.srv.token, retry=RetryPolicy.fast()) as driver:
            return tick_plan(ws, Ports(store=GitStateStore(repo, remote="origin"), dispatcher=driver, parker=driver))

    def ledger(self) -> list[dict]:
        return w.ledger(self.bare, "greeter")


GH_SCRIPT = w.SCRIPT.replace("  - id: s-limited\n    steps:\n      - rate_limit: {reset_in: 2, message: \"429 "
                             "rate_limit_error: too many requests\"}\n", "")
PARK_SCRIPT = "sessions:\n  - - write: {path: a.py, content: x}\n    - commit: a\n    - handoff: 'HUMAN: which?'\n"
