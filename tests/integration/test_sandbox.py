"""The identity untrusted code runs as (runner.adapters.sandbox.identity): what it cannot reach, and that nothing of it survives.

These tests need what CI has: root (the suite runs as root; scripts/test installs sudo). The
judge-with-sudo tests create ordinary users the way a GitHub-hosted runner has one (`runner`
with passwordless sudo) and run plan-runner as them.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
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


MAKE_AGENT_REPO = textwrap.dedent("""\
    import sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    import tests.integration.test_session_local as t
    t.make_repo(Path({where!r}), agent={agent!r})
    """)
SNOOP = """#!/bin/sh
cat {key} > leak.txt 2>&1 || true
ls -A {home} 2>/dev/null | sed 's/^/home: /' >> leak.txt
setsid sh -c 'exec -a {marker} sleep 300' </dev/null >/dev/null 2>&1 &
printf 'def mul(a, b):\\n    return a * b\\n' > calc/mul.py
sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/calc.md
git add -A && git commit -q -m 'Add mul, tick 1.1'
"""


def _snooping_session_as(entry: pwd.struct_passwd, tag: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """A command agent that reads ~/.ssh/id_rsa and lists the home into a committed file, leaves a setsid
    sleeper, and does the work; the session as `entry`: its result and what the agent committed."""
    home = Path(entry.pw_dir)
    key = home / ".ssh" / "id_rsa"
    for made in (_as_user(entry, ["mkdir", "-p", "-m", "0700", str(key.parent)], str(home)),
                 _as_user(entry, ["sh", "-c", f"echo PRIVATE-KEY-{tag} > {key} && chmod 600 {key}"], str(home))):
        assert made.returncode == 0, made.stderr
    where = home / tag
    subprocess.run(["rm", "-rf", str(where)], check=True)
    agent = SNOOP.format(key=key, home=home, marker=f"pr-snoop-{tag}")
    code = MAKE_AGENT_REPO.format(root=str(ROOT), where=str(where), agent=agent)
    made = _as_user(entry, [sys.executable, "-c", code],
                    entry.pw_dir)
    assert made.returncode == 0, made.stderr
    repo = where / "repo"
    proc = _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json", *extra], str(repo))
    shown = _as_user(entry, ["git", "show", "plan-runner/calc:leak.txt"], str(repo))
    return proc, shown.stdout


def test_an_ordinary_user_without_sudo_runs_the_agent_isolated_in_namespaces():
    """Issue 49: no root, no sudo (a laptop): the session runs isolated in kernel namespaces and advances; the agent
    cannot read ~/.ssh/id_rsa nor list the home, and its setsid sleeper is gone. Control: `--isolation none`
    hands the same agent the key."""
    entry = _user("pr-test-plain", sudo=False)
    proc, leak = _snooping_session_as(entry, "plain-ns")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    assert "isolated in kernel namespaces" in proc.stderr and "Traceback" not in proc.stderr
    assert "PRIVATE-KEY" not in leak and "home: .ssh" not in leak.splitlines(), leak
    left = subprocess.run(["pgrep", "-f", "pr-snoop-plain-ns"], capture_output=True, text=True).stdout
    assert left == "", left
    proc, leak = _snooping_session_as(entry, "plain-none", "--isolation", "none")
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    assert "PRIVATE-KEY-plain-none" in leak and "home: .ssh" in leak.splitlines(), leak
    subprocess.run(["pkill", "-f", "pr-snoop-plain-none"], check=False)  # the control's sleeper: unconfined


NET_PROBE = """#!/bin/sh
python3 - > net.txt 2>&1 <<'PY'
import os, socket
def direct(port):
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=3).recv(16).decode() or "connected"
    except OSError as exc:
        return f"no ({exc.__class__.__name__})"
def proxied(port):
    proxy = os.environ.get("HTTPS_PROXY", "")
    if not proxy:
        return "no proxy"
    host, _, pport = proxy.rsplit("/", 1)[-1].partition(":")
    s = socket.create_connection((host, int(pport)), timeout=5)
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n".encode())
    data = b""
    while b"\\r\\n\\r\\n" not in data:
        chunk = s.recv(256)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\\r\\n\\r\\n")
    if b" 200" in head and not body:
        body = s.recv(16)
    return f"{head.split(chr(13).encode())[0].decode()} {body.decode()}".strip()
for port in (LISTED, UNLISTED):
    print(f"direct {port}: {direct(port)}")
    print(f"proxied {port}: {proxied(port)}")
print("key:", os.environ.get("ANTHROPIC_API_KEY", "-"))
PY
printf 'def mul(a, b):\\n    return a * b\\n' > calc/mul.py
sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/calc.md
git add -A && git commit -q -m 'Add mul, tick 1.1'
"""


# setup: and the gates, in their own rooms, must not reach the port the agent's list names: directly or through
# their proxy (the plan lists nothing for them); exit 0 only when their proxy is there and refuses it.
NET_CHECK = """import os, socket, sys
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=3)
    sys.exit("reached the port directly")
except OSError:
    pass
host, _, pport = os.environ["HTTPS_PROXY"].rsplit("/", 1)[-1].partition(":")
s = socket.create_connection((host, int(pport)), timeout=5)
s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
head = s.recv(64)
sys.exit(0 if b" 403" in head else f"the proxy answered {head!r}")
"""


def _listener() -> tuple[socket.socket, int]:
    srv = socket.create_server(("127.0.0.1", 0))
    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.sendall(b"hello")
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_in_namespaces_the_agent_reaches_only_what_the_plan_lists_through_the_proxy():
    """Issue 49, item 4, as an ordinary user without sudo: the agent's room has no network of its own (a host port
    is out of reach directly); through the allow-list proxy it reaches the address the plan's `network: agent:`
    lists and is refused one it does not. `setup:` and a gate, with lists of their own (none), are refused that
    address too (each exits non-zero otherwise, and the session would not advance)."""
    listed_srv, listed = _listener()
    unlisted_srv, unlisted = _listener()
    try:
        entry = _user("pr-test-plain", sudo=False)
        where = Path(entry.pw_dir) / "net-ns"
        subprocess.run(["rm", "-rf", str(where)], check=True)
        agent = NET_PROBE.replace("UNLISTED", str(unlisted)).replace("LISTED", str(listed))
        made = _as_user(entry, [sys.executable, "-c", MAKE_AGENT_REPO.format(root=str(ROOT), where=str(where),
                                                                             agent=agent)], entry.pw_dir)
        assert made.returncode == 0, made.stderr
        repo = where / "repo"
        plan = repo / "plans" / "calc.md"
        network = (f'network:\n  agent: ["127.0.0.1:{listed}"]\nsetup:\n  run: ["python3 netcheck.py {listed}"]\n'
                   'budget:')
        gate = f"gates:\n  - name: net\n    run: python3 netcheck.py {listed}\n"
        code = (f"from pathlib import Path; p = Path({str(plan)!r}); "
                f"p.write_text(p.read_text().replace('budget:', {network!r}, 1).replace('gates:\\n', {gate!r}, 1)); "
                f"Path({str(repo / 'netcheck.py')!r}).write_text({NET_CHECK!r})")
        edit = _as_user(entry, ["sh", "-c", '"$0" -c "$1" && git add -A && git commit -qm network', sys.executable,
                                code], str(repo))
        assert edit.returncode == 0, edit.stderr
        proc = _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], str(repo))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
        seen = _as_user(entry, ["git", "show", "plan-runner/calc:net.txt"], str(repo)).stdout.splitlines()
    finally:
        listed_srv.close()
        unlisted_srv.close()
    # what was refused: one line for the whole session, each phase's destinations counted, not one line a request
    (line,) = [x for x in proc.stderr.splitlines() if "network refused" in x]
    assert f"agent: 127.0.0.1:{unlisted} (1x, not allowed)" in line, line
    assert f"setup: 127.0.0.1:{listed} (" in line and f"gates: 127.0.0.1:{listed} (" in line, line
    assert seen[0].startswith(f"direct {listed}: no"), seen
    assert seen[1].startswith(f"proxied {listed}: HTTP/1.1 200") and seen[1].endswith("hello"), seen
    assert seen[2].startswith(f"direct {unlisted}: no"), seen
    assert seen[3].startswith(f"proxied {unlisted}: HTTP/1.1 403") or " 40" in seen[3], seen


KEY = "sk-ant-api03-plan-runner-test-key-0123456789abcdef"
SHOW_ENV = ("env | grep -i -e anthropic -e proxy > env.txt; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' "
            "| grep -c sk-ant-api03 >> env.txt; printf 'def mul(a, b):\\n    return a * b\\n' > calc/mul.py; "
            "sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/calc.md; git add -A && git commit -qm 'Add mul, tick 1.1'")


def test_in_namespaces_an_api_key_agent_never_holds_its_key():
    """Issue 49, item 4: the built-in agent (an API-key backend) of an ordinary user without sudo runs in the room
    behind the proxy: no process in it holds the key (its environment has a placeholder and the proxy's address),
    yet every request reaches the model with the real key, which the proxy added outside."""
    from tests.servers.messages import MessagesServer, reply, tool_use

    entry = _user("pr-test-plain", sudo=False)
    where = Path(entry.pw_dir) / "key-ns"
    subprocess.run(["rm", "-rf", str(where)], check=True)
    made = _as_user(entry, [sys.executable, "-c", MAKE_AGENT_REPO.format(root=str(ROOT), where=str(where),
                                                                         agent="#!/bin/sh\n")], entry.pw_dir)
    assert made.returncode == 0, made.stderr
    repo = where / "repo"
    plan = repo / "plans" / "calc.md"
    code = (f"import re; from pathlib import Path; p = Path({str(plan)!r}); "
            "p.write_text(re.sub(r'backend: command\\n  executable: .*\\n', 'backend: anthropic\\n', p.read_text()))")
    edit = _as_user(entry, ["sh", "-c", '"$0" -c "$1" && git commit -qam anthropic', sys.executable, code], str(repo))
    assert edit.returncode == 0 and "backend: anthropic" in plan.read_text(), edit.stderr
    with MessagesServer() as srv:
        srv.enqueue(reply(tool_use("run_shell", {"command": SHOW_ENV})), reply("Done: mul added."))
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": entry.pw_dir, "LANG": "C.UTF-8",
               "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": srv.url}
        proc = subprocess.run([sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], cwd=repo,
                              env=env, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], capture_output=True,
                              text=True, timeout=180)
        keys = [r.headers.get("x-api-key") for r in srv.message_requests]
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    seen = _as_user(entry, ["git", "show", "plan-runner/calc:env.txt"], str(repo)).stdout
    assert KEY not in seen and "ANTHROPIC_BASE_URL=http://127.0.0.1:" in seen, seen
    assert seen.splitlines()[-1] == "0", seen  # no process of the room holds it in its environment
    assert keys and set(keys) == {KEY}, keys


SETUP = ("setup:\n  run: [\"mkdir -p .made && echo ok > .made/x && mkdir -p built && echo 1 > built/out\"]\n"
         "  cache: [.made]\n  key: [plans/calc.md]\nbudget:")


@pytest.mark.parametrize("sudo", [True, False], ids=["sudo-user", "plain-user"])
def test_a_plan_with_setup_runs_its_first_session_as_an_ordinary_user(sudo):
    """Issue 49: as an ordinary user with passwordless sudo (GitHub's `runner`: pooled agent user) the first
    session of a plan with `setup:` crashed (PermissionError stat-ing the agent's 0700 clone, recorded as
    Interrupted); without sudo it runs in kernel namespaces. Both advance, and what set-up made (its cache and an
    untracked folder) is excluded from the agent's commits."""
    entry = _user("pr-test-sudo" if sudo else "pr-test-plain", sudo=sudo)
    tag = "setup-sudo" if sudo else "setup-plain"
    where = Path(entry.pw_dir) / tag
    subprocess.run(["rm", "-rf", str(where)], check=True)
    made = _as_user(entry, [sys.executable, "-c", MAKE_REPO.format(root=str(ROOT), where=str(where))], entry.pw_dir)
    assert made.returncode == 0, made.stderr
    repo = where / "repo"
    plan = repo / "plans" / "calc.md"
    code = f"from pathlib import Path; p = Path({str(plan)!r}); p.write_text(p.read_text().replace('budget:', {SETUP!r}, 1))"
    edit = _as_user(entry, ["sh", "-c", '"$0" -c "$1" && git commit -qam setup', sys.executable, code], str(repo))
    assert edit.returncode == 0 and "setup:" in plan.read_text(), edit.stderr
    proc = _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], str(repo))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    assert "Traceback" not in proc.stderr and "PermissionError" not in proc.stderr
    tracked = _as_user(entry, ["git", "ls-tree", "-r", "--name-only", "plan-runner/calc"], str(repo)).stdout.split()
    assert "calc/mul.py" in tracked and ".made/x" not in tracked and "built/out" not in tracked, tracked


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


@pytest.mark.parametrize("sudo", [True, False], ids=["sudo-user", "plain-user"])
def test_the_readme_first_command_finishes_for_an_ordinary_user_with_a_private_home(sudo):
    """Issue 20: an ordinary user with passwordless sudo and a 0750 home copies plan-runner into it and runs the
    README's first command there, as written (venv, `pip install -e .` from the machine's package index, `demo`).
    The agent's user cannot run that venv's python, so the demo falls back with its note and finishes its plan
    (it once parked: AgentError twice, `.venv/bin/python3.11: Permission denied`, exit 3). Issue 49: without
    sudo the demo runs isolated in kernel namespaces (it used to run unisolated), and finishes."""
    entry = _user("pr-test-reach" if sudo else "pr-test-reach-plain", sudo=sudo)
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
    if sudo:
        assert "the demo runs without isolation" in text and f"{home} is private" in text, text[:2000]
    else:
        assert "without isolation" not in text and "isolated in kernel namespaces" in text, text[:2000]
    assert "finished: every checkpoint is done" in text and "Traceback" not in text
    assert "Permission denied" not in text
