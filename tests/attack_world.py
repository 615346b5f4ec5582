"""The arena for hostile-agent tests (tests/test_attacks*.py): a real repository with a bare remote, a plan
whose `command` agent is one of the attack scripts in tests/attacks/, a real pytest gate, the real CLI in a
child process holding marker secrets, and the checks that an attack got nothing:

* no secret in anything the agent could read or write (its loot directory, the work tree it left, its
  HOME, everything that reached the remote),
* no code the agent planted ran as the judge's uid (the canary file),
* nothing the agent started outlives the session,
* no false Advanced/Progress: a credited verdict is re-checked by running the gate on a clean clone,
* no command file (`$GITHUB_ENV`, ...) written, no raw text on the judge's stdout, no traceback.

The attack scripts and the loot directory live in the plan's agent area (judge_dir("agents")/<key>, the folder
of the agent's clone and HOME), in a folder of the arena's own: the one place every isolation shows the agent at
the same path as the judge sees it (another user's pool: modes; a namespace room: the area bound in, writable;
`isolation: none`: the machine). So the script reaches the agent, the loot it and its gates write lands where the
test reads it, and a canary planted to run in the judge writes the same file. The area outlives the session (the
next session reuses it); it is removed, and any process of the attack still alive is killed, when the test ends.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.reliability_world import PYTEST_OWN_PLUGINS_OFF, all_git_text, cli_env, git, ledger, write_calc_project

ATTACKS = Path(__file__).resolve().parent / "attacks"
PY = sys.executable
CREDITED = ("Advanced", "Progress")

PLAN = """\
---
agent:
  backend: command
  executable: {python}
  args: ["-P", "{script}", "{loot}", "{scope}"]
  stall_minutes: 30s
  time_limit_minutes: 90s
{front_extra}gates:
  - name: tests
    run: {gate}
budget:
  max_sessions: 12
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 3 -->
- [ ] 1.1 Multiplication{verify}
- [ ] 1.2 Division

## Stage 2: Docs <!-- sessions: 1 -->
- [ ] 2.1 README
"""

# The gate is a real pytest run of the project's tests. This test run's Python also holds the suite's own pytest
# plugins (hypothesis alone takes ~0.9 s to import, four times the rest of pytest's start): a project's gate would not
# load them, and the arena runs its gate a hundred times, so they are blocked by name (`-p no:`; any other plugin,
# one an attack might plant included, still loads as it would).
GATE = f"{PY} -m pytest -q -p no:cacheprovider {PYTEST_OWN_PLUGINS_OFF} tests"


def _secret(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    out: dict = field(default_factory=dict)

    @property
    def outcome(self) -> str | None:
        return self.out.get("outcome")

    @property
    def isolation(self) -> str:
        """How plan-runner said it isolated the agent (its `isolation:` line): a room, another user, or none."""
        lines = [ln.strip() for ln in self.proc.stderr.splitlines() if ln.strip().startswith("isolation: ")]
        return lines[-1].removeprefix("isolation: ") if lines else ""


def agent_area(repo: Path, env: dict[str, str], plan_id: str = "calc") -> Path:
    """The agent area plan-runner will give `plan_id` of `repo` when run with `env` (its temp folder decides
    where: judge_dir), its folders above made as plan-runner makes them: asked of plan-runner's own code in a
    child with that environment, so the answer is the CLI's."""
    code = ("import sys; from pathlib import Path; from runner.adapters.sandbox.agent_clone import area_for; "
            "print(area_for(Path(sys.argv[1]), sys.argv[2]).root)")
    done = subprocess.run([PY, "-c", code, str(repo), plan_id], env=env, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


class Arena:
    """One hostile agent against one real plan-runner, and the evidence of what it got."""

    def __init__(self, tmp: Path, attack: str, *, files: dict[str, str] | None = None, front_extra: str = "",
                 verify: str = "", gate: str = GATE, extraheader: bool = True,
                 env: dict[str, str] | None = None, controls: dict[str, str] | None = None) -> None:
        scope, tmp = tmp, tmp / attack  # one folder per arena: a test may run several
        tmp.mkdir()
        self.tmp = tmp
        self.extra_env: dict[str, str] = dict(env or {})  # the CLI's: set before the area is found (TMPDIR)
        self.area: Path | None = None
        try:
            self._build(tmp, scope, attack, files, front_extra, verify, gate, extraheader, controls or {})
        except BaseException:
            self._remove_area()
            raise

    def _build(self, tmp: Path, scope: Path, attack: str, files: dict[str, str] | None, front_extra: str,
               verify: str, gate: str, extraheader: bool, controls: dict[str, str]) -> None:
        self.home = tmp / "home"
        self.home.mkdir()
        self.runner_temp = tmp / "runner-temp"
        self.runner_temp.mkdir()
        self.command_files = {name: self.runner_temp / name.lower() for name in
                              ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
        for path in self.command_files.values():
            path.write_text("")
        self.secrets = {"GITHUB_TOKEN": _secret("ghs_"), "ANTHROPIC_API_KEY": _secret("sk-ant-api03-"),
                        "OPENAI_API_KEY": _secret("sk-proj-"), "DEPLOY_PASSWORD": _secret("pw-"),
                        "ACTIONS_RUNTIME_TOKEN": _secret("art-")}
        self.repo = tmp / "repo"
        write_calc_project(self.repo, {".gitignore": "__pycache__/\n.pytest_cache/\n", **(files or {})})
        # The arena's folder in the agent's area (made now, as plan-runner makes an area's root: 0711, the judge's;
        # plan-runner takes it as its own). Scripts readable by every user, the loot writable by every user (the
        # pool's agent is another uid; in a room the whole area is the agent's).
        self.area = agent_area(self.repo, self.env())
        os.makedirs(self.area, 0o711, exist_ok=True)
        self.drop = self.area / f"pr-attack-{secrets.token_hex(6)}"
        self.drop.mkdir(0o755)
        os.chmod(self.drop, 0o755)
        self.tag = self.drop.name
        shutil.copytree(ATTACKS, self.drop / "attacks", ignore=shutil.ignore_patterns("__pycache__"))
        for p in [self.drop / "attacks", *(self.drop / "attacks").iterdir()]:
            os.chmod(p, 0o755)
        for name, value in controls.items():  # settings the attack reads (hostile.control)
            (self.drop / name).write_text(value)
            os.chmod(self.drop / name, 0o644)
        self.loot = self.drop / "loot"
        self.loot.mkdir()
        os.chmod(self.loot, 0o1777)
        plan = PLAN.format(python=PY, script=self.drop / "attacks" / f"{attack}.py", loot=self.loot, gate=gate,
                           scope=scope,
                           front_extra=front_extra, verify=f" <!-- verify: {verify} -->" if verify else "")
        (self.repo / "plans" / "calc.md").write_text(plan)
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", "init")
        self.bare = tmp / "origin.git"
        git(tmp, "init", "-q", "--bare", "-b", "main", str(self.bare))
        git(self.repo, "remote", "add", "origin", str(self.bare))
        git(self.repo, "push", "-q", "origin", "main")
        if extraheader:  # what actions/checkout leaves behind (persist-credentials): the token in .git/config
            git(self.repo, "config", "http.https://github.com/.extraheader",
                f"AUTHORIZATION: basic {self.secrets['GITHUB_TOKEN']}")
        self.runs: list[Run] = []

    # --- running ------------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return cli_env(HOME=str(self.home), GIT_AUTHOR_NAME="T", GIT_AUTHOR_EMAIL="t@example.invalid",
                       GIT_COMMITTER_NAME="T", GIT_COMMITTER_EMAIL="t@example.invalid",
                       **self.secrets, **{k: str(v) for k, v in self.command_files.items()}, **self.extra_env)

    def session(self, timeout: float = 150, python: str = PY) -> Run:
        """`plan-runner session plans/calc.md --json`, as a child process holding the secrets."""
        try:
            proc = subprocess.run([python, "-m", "runner", "session", "plans/calc.md", "--json"], cwd=self.repo,
                                  capture_output=True, text=True, env=self.env(), timeout=timeout,
                                  errors="replace")
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"plan-runner did not finish within {timeout}s (held by the agent's children?): "
                                 f"{exc.stderr!r}"[-3000:]) from None
        assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
        assert proc.returncode in (0, 3), (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"stdout is not plan-runner's JSON alone: {proc.stdout[-3000:]!r}") from None
        run = Run(proc, out)
        self.runs.append(run)
        return run

    # --- what the attack got ------------------------------------------------------------------------------

    def loot_text(self) -> bytes:
        return _files(self.loot)

    def canaries(self) -> list[str]:
        path = self.loot / "canary"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def survivors(self) -> list[int]:
        """Processes still alive whose command line or environment carries this arena's tag."""
        found = []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if pid == os.getpid():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if self.tag.encode() in cmd and stat.rsplit(")", 1)[1].split()[0] != "Z":
                found.append(pid)
        return found

    def kill_survivors(self) -> None:
        for pid in self.survivors():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def clean_gate(self, rev: str) -> bool:
        """Run the gate on a clean clone of `rev` from the remote, with git's and Python's caches off."""
        clone = self.tmp / f"clean-{secrets.token_hex(4)}"
        env = {**cli_env(), "HOME": str(self.tmp), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
               "PYTHONDONTWRITEBYTECODE": "1"}
        subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "clone", "-q", "--no-local", str(self.bare),
                        str(clone)], check=True, env=env, capture_output=True)
        subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "checkout", "-q", rev], cwd=clone, check=True,
                       env=env, capture_output=True)
        return subprocess.run(GATE.split(), cwd=clone, env=env, capture_output=True).returncode == 0

    def remote_work_head(self) -> str | None:
        return git(self.bare, "rev-parse", "--verify", "-q", "refs/heads/plan-runner/calc", check=False) or None

    # --- the effects an attack must not have --------------------------------------------------------------

    def assert_no_secret_leaked(self) -> None:
        """No secret value in the loot, anything else in the agent's area (its clone, HOME and saved state, what
        it left there), the judge's work tree (its .git excluded: the token actions/checkout leaves is there by
        design), the judge's HOME, or anything that reached the remote."""
        places = {"the agent's loot": self.loot_text(), "the agent's area": _files(self.area, skip=self.drop.name),
                  "the judge's HOME": _files(self.home), "the work tree": _files(self.repo, skip=".git"),
                  "the remote": all_git_text(self.bare)}
        for name, value in self.secrets.items():
            for where, blob in places.items():
                assert value.encode() not in blob, f"{name} reached {where}"

    def assert_no_canary_as_judge(self) -> None:
        """No code the agent planted ran as plan-runner itself (its uid in its own mount namespace: a room runs
        the agent as the same uid in namespaces of its own, the pool as another uid), nor with a secret in its
        environment. A canary that could not tell its namespace counts as the judge's."""
        bad = [c for c in self.canaries() if _ran_as_judge(c) or any(v in c for v in self.secrets.values())]
        assert not bad, "agent code ran inside the judge: " + "\n".join(bad[:10])

    def assert_no_command_file_written(self) -> None:
        for name, path in self.command_files.items():
            assert "HOSTILE" not in path.read_text(errors="replace"), f"the agent wrote ${name}: {path.read_text()!r}"

    def assert_no_survivors(self) -> None:
        alive = self.survivors()
        assert not alive, f"processes of the agent outlived the session: {alive}"

    def assert_honest_verdict(self, run: Run | None = None) -> None:
        """A credited verdict (Advanced/Progress) stands only if the gate is green on a clean clone of what
        was pushed; and the remote's work branch holds every commit credited so far."""
        run = run or self.runs[-1]
        if run.outcome in CREDITED:
            head = self.remote_work_head()
            assert head, f"{run.outcome} but nothing on the remote's work branch"
            assert self.clean_gate(head), f"{run.outcome}, but the gate is red on a clean clone of {head}"
        head = self.remote_work_head()
        for record in self.session_records():
            if record.get("outcome") in CREDITED and record.get("head_sha") and head:
                assert _is_ancestor(self.bare, record["head_sha"], head), (
                    f"credited commit {record['head_sha']} (session {record['n']}) is gone from the remote")

    def session_records(self) -> list[dict]:
        try:
            return [e for e in ledger(self.bare) if e.get("type") == "session"]
        except (subprocess.CalledProcessError, ValueError):
            return []

    def assert_all_well(self, run: Run | None = None) -> None:
        """Every effect the attacks in this module aim at, checked at once."""
        self.assert_no_secret_leaked()
        self.assert_no_canary_as_judge()
        self.assert_no_command_file_written()
        self.assert_no_survivors()
        self.assert_honest_verdict(run)

    def close(self) -> None:
        self.kill_survivors()
        time.sleep(0.05)
        self._remove_area()

    def _remove_area(self) -> None:
        """The agent's area, the arena's folder in it included (GNU rm: no link followed, one file system)."""
        if self.area is not None and self.area.is_dir() and not self.area.is_symlink():
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(self.area)], capture_output=True,
                           check=False)


def _ran_as_judge(line: str) -> bool:
    """A canary line's `uid=` and `mnt=` (tests/attacks/hostile.py) are the judge's: this process's (the test
    runs plan-runner as its own uid, in its own namespaces)."""
    fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
    return fields.get("uid") == str(os.getuid()) and fields.get("mnt", "") in ("", _JUDGE_MNT)


_JUDGE_MNT = os.readlink("/proc/self/ns/mnt")


def _is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=repo,
                          capture_output=True).returncode == 0


def _files(root: Path, skip: str | None = None) -> bytes:
    out = b""
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        if skip and skip in dirnames:
            dirnames.remove(skip)
        for name in filenames:
            path = Path(dirpath) / name
            try:
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 50 * 2**20:
                    out += path.read_bytes() + b"\n"
            except OSError:
                continue
    return out


@pytest.fixture
def arena(tmp_path):
    """A factory of arenas for one test; every arena is closed (its processes killed, its folder removed)."""
    made: list[Arena] = []

    def make(attack: str, **kw) -> Arena:
        a = Arena(tmp_path, attack, **kw)
        made.append(a)
        return a
    yield make
    for a in made:
        a.close()
