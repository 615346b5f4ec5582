"""The identity untrusted code runs as (runner.adapters.sandbox.identity): what it cannot reach, and that nothing of it survives.

These tests need what CI has: root (the suite runs as root; scripts/test installs sudo). The
judge-with-sudo tests create ordinary users the way a GitHub-hosted runner has one (`runner`
with passwordless sudo) and run plan-runner as them.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from runner.adapters.sandbox import identity as sandbox
from runner.core.errors import PlanRunnerError
from runner.adapters.sandbox.supervise import supervise

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _run(identity, script: str, tmp_path: Path, env: dict | None = None) -> list[str]:
    lines: list[str] = []
    supervise(["sh", "-c", script], cwd=Path("/"), env=env or {"PATH": "/usr/bin:/bin"}, stall_s=20,
              time_limit_s=30, on_line=lambda line, ctl: lines.append(line), identity=identity)
    return lines


def test_suite_runs_where_isolation_is_possible():
    """CI runs as root, so every session of the suite runs isolated; without it these tests mean nothing."""
    assert sandbox.available() == "root", "run the suite as root (as CI does): sessions are isolated there"


def test_the_agent_cannot_read_the_judges_environment_or_signal_it(tmp_path):
    """/proc/<judge>/environ is the owner's: the agent's user reads nothing of it and cannot signal the judge."""
    with sandbox.leased("auto") as identity:
        out = _run(identity, f"cat /proc/{os.getpid()}/environ >/dev/null 2>&1 && echo READ || echo DENIED; "
                             f"kill -0 {os.getpid()} 2>/dev/null && echo SIGNAL || echo NOSIGNAL; id -u", tmp_path)
    assert out[:2] == ["DENIED", "NOSIGNAL"]
    assert int(out[2]) == identity.uid != os.geteuid()


def test_a_setsid_daemon_does_not_outlive_the_agent(tmp_path):
    """A daemon that left the process group with setsid is gone when the supervised process returns."""
    marker = tmp_path / "alive"
    tmp_path.chmod(0o777)
    with sandbox.leased("auto") as identity:
        _run(identity, f"setsid sh -c 'sleep 2; touch {marker}' </dev/null >/dev/null 2>&1 & echo started", tmp_path)
        assert identity.pids() == []
    threading.Event().wait(2.5)
    assert not marker.exists()


def test_overlapping_sessions_get_different_users():
    """Two sessions at once never share a uid: one's uid-wide kill cannot touch the other's agent."""
    with sandbox.leased("auto") as first, sandbox.leased("auto") as second:
        assert first.uid != second.uid and first.isolated and second.isolated


def test_isolation_none_is_refused_on_github_actions():
    """Actions mode refuses to run the agent as the job's own user."""
    with pytest.raises(PlanRunnerError, match="refused on GitHub Actions"):
        sandbox.acquire("none", actions=True)


# --- plan-runner as an ordinary user, with and without sudo ----------------------------------------

MAKE_REPO = textwrap.dedent("""\
    import sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    import tests.integration.test_session_local as t
    t.make_repo(Path({where!r}), f'''
    sessions:
      - - write: {{t.MUL}}
        - commit: "Add mul"
        - check: "1.1"
        - commit: "Tick 1.1"
    ''')
    """)


def _user(name: str, sudo: bool) -> pwd.struct_passwd:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
    sudoers = Path(f"/etc/sudoers.d/{name}")
    if sudo:
        sudoers.write_text(f"{name} ALL=(ALL) NOPASSWD:ALL\n")
        sudoers.chmod(0o440)
    else:
        sudoers.unlink(missing_ok=True)
    entry = pwd.getpwnam(name)
    Path(entry.pw_dir).chmod(0o750)  # like /home/runner: other users cannot enter it
    return entry


def _as_user(entry: pwd.struct_passwd, argv: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": entry.pw_dir, "LANG": "C.UTF-8"}
    return subprocess.run(argv, cwd=cwd, env=env, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                          capture_output=True, text=True, timeout=180)


def _session_as(entry: pwd.struct_passwd, tag: str) -> subprocess.CompletedProcess[str]:
    where = Path(entry.pw_dir) / tag
    subprocess.run(["rm", "-rf", str(where)], check=True)
    made = _as_user(entry, [sys.executable, "-c", MAKE_REPO.format(root=str(ROOT), where=str(where))], entry.pw_dir)
    assert made.returncode == 0, made.stderr
    return _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], str(where / "repo"))


def test_a_judge_with_passwordless_sudo_isolates_like_a_hosted_runner():
    """An ordinary user with `sudo -n` (GitHub's `runner`) runs the agent as its own pooled user and advances."""
    entry = _user("pr-test-sudo", sudo=True)
    proc = _session_as(entry, "sudo-trial")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["outcome"] == "Advanced", (result["reasons"], proc.stderr)
    assert f"isolated as user {sandbox.agent_user_name(0, entry.pw_uid)}" in proc.stderr


def test_without_root_or_sudo_a_session_refuses_to_run_unisolated():
    """No isolation available: the session stops with what/why/fix and records nothing, unless isolation: none."""
    entry = _user("pr-test-plain", sudo=False)
    proc = _session_as(entry, "plain-trial")
    assert proc.returncode == 2 and "cannot isolate the agent" in proc.stderr and "isolation: none" in proc.stderr
    assert "Traceback" not in proc.stderr
    repo = Path(entry.pw_dir) / "plain-trial" / "repo"
    ran = _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json", "--isolation", "none"],
                   str(repo))
    assert ran.returncode == 0 and json.loads(ran.stdout)["outcome"] == "Advanced", ran.stderr
    assert "no isolation" in ran.stderr


def test_unreachable_names_the_private_folder_that_hides_a_program(tmp_path):
    """A program under a folder others cannot search is unreachable for the agent's user, and the preflight's
    fix names that folder; searchable folders and an o+rx file make it reachable."""
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    program = private / "bin" / "agent"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    private.chmod(0o700)
    assert sandbox.unreachable(program) == private
    private.chmod(0o711)
    assert sandbox.unreachable(program) is None
    program.chmod(0o700)
    assert sandbox.unreachable(program) == program



def test_unreachable_walks_the_path_as_executed_not_its_symlink_target(tmp_path):
    """A venv's bin/python under a private folder is unreachable though its target is reachable; a symlink through
    a private folder (absolute or relative, with ..) is unreachable too; searchable folders make both reachable."""
    tmp_path.chmod(0o755)
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    python = home / "venv" / "bin" / "python"
    python.symlink_to("/usr/bin/python3")
    home.chmod(0o750)
    assert sandbox.unreachable("/usr/bin/python3") is None
    assert sandbox.unreachable(python) == home  # the resolved path alone said None here
    (tmp_path / "public").mkdir()
    (home / "lib").mkdir()
    (home / "lib" / "tool").write_text("#!/bin/sh\n")
    (home / "lib" / "tool").chmod(0o755)
    (tmp_path / "public" / "abs").symlink_to(home / "lib" / "tool")
    (tmp_path / "public" / "rel").symlink_to("../home/lib/tool")
    (tmp_path / "public" / "dots").symlink_to("../home/../home/lib/tool")
    for name in ("abs", "rel", "dots"):
        assert sandbox.unreachable(tmp_path / "public" / name) == home, name
    home.chmod(0o751)
    assert sandbox.unreachable(python) is None
    for name in ("abs", "rel", "dots"):
        assert sandbox.unreachable(tmp_path / "public" / name) is None, name
    (tmp_path / "public" / "loop").symlink_to("loop")
    assert sandbox.unreachable(tmp_path / "public" / "loop") is not None


def _reach_user() -> tuple[pwd.struct_passwd, Path]:
    """An ordinary user with passwordless sudo, a 0750 home, and a venv in it made the README's way (a symlink to
    a Python every user can run)."""
    entry = _user("pr-test-reach", sudo=True)
    venv = Path(entry.pw_dir) / "venv"
    if not (venv / "bin" / "pip").exists():
        subprocess.run(["rm", "-rf", str(venv)], check=True)
        made = _as_user(entry, [os.path.join(sys.base_prefix, "bin", "python3"), "-m", "venv", str(venv)],
                        entry.pw_dir)
        assert made.returncode == 0, made.stderr
    return entry, venv


def test_a_venv_python_in_a_private_home_is_unreachable_for_the_agents_user():
    """Judged by effect: the agent's own user really cannot run the venv's python in a 0750 home, though it runs
    its target; `unreachable` says the same. Positive control: o+x on the home and both run."""
    entry, venv = _reach_user()
    python = venv / "bin" / "python"
    target = os.path.realpath(python)
    assert sandbox.unreachable(target) is None and sandbox.unreachable(python) == Path(entry.pw_dir)
    probe = (f"{python} -c 'print(1)' >/dev/null 2>&1 && echo VENV || echo NOVENV; "
             f"{target} -c 'print(1)' >/dev/null 2>&1 && echo TARGET || echo NOTARGET")
    with sandbox.leased("auto") as identity:
        assert _run(identity, probe, Path("/")) == ["NOVENV", "TARGET"]
        Path(entry.pw_dir).chmod(0o751)
        try:
            assert sandbox.unreachable(python) is None
            assert _run(identity, probe, Path("/")) == ["VENV", "TARGET"]
        finally:
            Path(entry.pw_dir).chmod(0o750)

SUDO_PROBE = textwrap.dedent("""\
    import os, sys, threading, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from runner.adapters.sandbox import identity as sandbox, proc
    key = "sk-ant-api03-" + os.urandom(12).hex()
    hits, seen, groups = [], [], []
    def scan(ctl):
        def loop():
            end = time.monotonic() + 2
            while time.monotonic() < end:
                for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                    try:
                        if key.encode() in Path(f"/proc/{{pid}}/cmdline").read_bytes():
                            hits.append(pid)
                    except OSError:
                        pass
                time.sleep(0.01)
        threading.Thread(target=loop, daemon=True).start()
    with sandbox.leased("user") as identity:
        out = bytearray()
        proc.run(["sh", "-c", "echo $ANTHROPIC_API_KEY; cat /proc/self/cgroup; sleep 1.5"], cwd="/",
                 env={{"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": key}}, time_limit_s=20, identity=identity,
                 on_output=out.extend, on_start=scan)
        cgroup = identity.cgroup
    print("sudo", identity.sudo, "cgroup", cgroup)
    print("key-reached", key in out.decode())
    print("in-cgroup", cgroup is not None and cgroup.name in out.decode())
    print("hits", len(hits))
    """)


def test_a_judge_with_sudo_passes_no_secret_on_sudos_command_line_and_uses_the_cgroup():
    """Through `sudo -n` (GitHub's `runner`): the key reaches the agent, no command line holds it (it used to be
    on sudo's `env -i ... KEY=value`), and the agent's process is in the lease's cgroup."""
    entry = _user("pr-test-sudo", sudo=True)
    where = Path(entry.pw_dir) / "probe"
    where.mkdir(exist_ok=True)
    os.chown(where, entry.pw_uid, entry.pw_gid)
    done = _as_user(entry, [sys.executable, "-c", SUDO_PROBE.format(root=str(ROOT))], str(where))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["sudo"].startswith("True"), done.stdout
    assert lines["key-reached"] == "True", done.stdout + done.stderr[-2000:]
    assert lines["hits"] == "0", done.stdout
    if sandbox.cgroup2_root() is not None:
        assert lines["in-cgroup"] == "True", done.stdout


def test_the_readme_first_command_finishes_for_a_sudo_user_with_a_private_home():
    """Issue 20: an ordinary user with passwordless sudo and a 0750 home copies plan-runner into it and runs the
    README's first command there, as written (venv, `pip install -e .` from the machine's package index, `demo`).
    The agent's user cannot run that venv's python, so the demo falls back with its note and finishes its plan
    (it once parked: AgentError twice, `.venv/bin/python3.11: Permission denied`, exit 3)."""
    entry = _user("pr-test-reach", sudo=True)
    home = Path(entry.pw_dir)
    src, tmp = home / "plan-runner", home / "tmp"
    subprocess.run(["rm", "-rf", str(src), str(tmp)], check=True)
    for made in (_as_user(entry, ["mkdir", "-p", str(src), str(tmp)], str(home)),
                 _as_user(entry, ["cp", "-r", str(ROOT / "runner"), str(ROOT / "pyproject.toml"),
                                  str(ROOT / "README.md"), str(src)], str(home)),
                 _as_user(entry, ["find", str(src), "-name", "__pycache__", "-prune", "-exec", "rm", "-rf", "{}", "+"],
                          str(home))):
        assert made.returncode == 0, made.stderr
    readme = (ROOT / "README.md").read_text()
    first = readme.split("```sh\n", 1)[1].splitlines()[0]
    assert first.endswith("plan-runner demo"), first
    env = {"PATH": f"{Path(sys.base_prefix) / 'bin'}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "TMPDIR": str(tmp)}
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})  # the machine's package index
    proc = subprocess.run(["sh", "-c", first], cwd=src, env=env, user=entry.pw_uid, group=entry.pw_gid,
                          extra_groups=[], capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert sandbox.unreachable(src / ".venv" / "bin" / "python") == home
    assert "the demo runs without isolation" in text and f"{home} is private" in text, text[:2000]
    assert "finished: every checkpoint is done" in text and "Traceback" not in text
    assert "Permission denied" not in text
