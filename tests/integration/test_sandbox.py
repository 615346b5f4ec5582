"""The identity untrusted code runs as (runner.adapters.sandbox.identity): a room of kernel namespaces, whoever
runs plan-runner; what it cannot reach, and that nothing of it survives.

The in-process tests run as the suite's user (an ordinary user: .ci/run); the tests that make ordinary users the way
a GitHub-hosted runner has one (`runner`, with passwordless sudo) and a laptop has one (no sudo) and run plan-runner
as them take privilege (tests/other_users.py): they carry the `sudo_user` marker and run where the suite's user has
passwordless sudo (.ci/run's second step).
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
from runner.adapters.sandbox import room as rooms
from runner.core.errors import PlanRunnerError
from runner.adapters.sandbox.supervise import supervise
from tests.other_users import as_user, make_user, privileged

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _run(identity, script: str, tmp_path: Path, env: dict | None = None) -> list[str]:
    lines: list[str] = []
    supervise(["sh", "-c", script], cwd=Path("/"), env=env or {"PATH": "/usr/bin:/bin"}, stall_s=20,
              time_limit_s=30, on_line=lambda line, ctl: lines.append(line), identity=identity)
    return lines


def test_every_isolation_but_none_is_a_room_whoever_runs_plan_runner():
    """Issue 49: `auto` and `user` (the old values) both mean kernel namespaces, as root and as an ordinary user;
    no other uid, no pool."""
    for isolation in ("auto", "user"):
        with sandbox.leased(isolation) as identity:
            assert identity.isolated and identity.room is not None and identity.uid == os.geteuid()
            assert "isolated in kernel namespaces" in identity.describe()
    with sandbox.leased("none") as identity:
        assert not identity.isolated


def test_the_agent_cannot_read_the_judges_environment_or_signal_it(tmp_path):
    """The judge is not in the room's PID namespace: its /proc/<pid>/environ is not there to read, and a signal
    to its pid reaches nothing (the same pid inside, if any, is one of the room's own)."""
    with sandbox.leased("auto") as identity:
        out = _run(identity, f"cat /proc/{os.getpid()}/environ >/dev/null 2>&1 && echo READ || echo DENIED; "
                             f"kill -0 {os.getpid()} 2>/dev/null && echo SIGNAL || echo NOSIGNAL", tmp_path)
    assert out[:2] == ["DENIED", "NOSIGNAL"]


def test_a_setsid_daemon_does_not_outlive_the_agent(tmp_path):
    """A daemon that left the process group with setsid is gone when the supervised process returns: the room's
    PID namespace ended with its first process. It could write its marker (the folder is the room's work)."""
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "alive"
    with sandbox.leased("auto") as identity:
        identity.room.grant(work)
        _run(identity, f"setsid sh -c 'sleep 2; touch {marker}' </dev/null >/dev/null 2>&1 & echo started; "
                       f"touch {work}/started", tmp_path)
        assert (work / "started").exists()
    threading.Event().wait(2.5)
    assert not marker.exists()


def test_outside_a_network_block_a_room_reaches_no_host_port(tmp_path):
    """The agent's git (its clone made, updated, exported) runs outside every proxy's block: its config could start
    a program (core.fsmonitor), which must reach nothing. Control: the same probe through `View(network=True)`."""
    srv, port = _listener()
    try:
        probe = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                 "    print('REACHED')\nexcept OSError:\n    print('no')\n")
        with sandbox.leased("auto") as identity:
            out = _run(identity, f"python3 -c \"{probe}\"", tmp_path)
            assert out == ["no"], out
            room = identity.room
            launch = room.command(["python3", "-c", probe], {"PATH": "/usr/bin:/bin"}, "/",
                                  rooms.View(network=True))
            done = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True, timeout=60)
            assert done.stdout.split() == ["REACHED"], done.stdout + done.stderr
    finally:
        srv.close()


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
    return make_user(name, sudo)


def _as_user(entry: pwd.struct_passwd, argv: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    return as_user(entry, argv, cwd)


def _session_as(entry: pwd.struct_passwd, tag: str) -> subprocess.CompletedProcess[str]:
    where = Path(entry.pw_dir) / tag
    privileged("rm", "-rf", str(where))
    made = _as_user(entry, [sys.executable, "-c", MAKE_REPO.format(root=str(ROOT), where=str(where))], entry.pw_dir)
    assert made.returncode == 0, made.stderr
    return _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], str(where / "repo"))


@pytest.mark.sudo_user
def test_a_judge_with_passwordless_sudo_isolates_like_a_hosted_runner():
    """An ordinary user with `sudo -n` (GitHub's `runner`) runs the agent in kernel namespaces, as its own uid (no
    pooled user is made), and advances."""
    entry = _user("pr-test-sudo", sudo=True)
    proc = _session_as(entry, "sudo-trial")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["outcome"] == "Advanced", (result["reasons"], proc.stderr)
    assert "isolated in kernel namespaces" in proc.stderr
    assert not [u for u in pwd.getpwall() if u.pw_name.startswith(f"plan-runner-agent-u{entry.pw_uid}")]


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
    privileged("rm", "-rf", str(where))
    agent = SNOOP.format(key=key, home=home, marker=f"pr-snoop-{tag}")
    code = MAKE_AGENT_REPO.format(root=str(ROOT), where=str(where), agent=agent)
    made = _as_user(entry, [sys.executable, "-c", code],
                    entry.pw_dir)
    assert made.returncode == 0, made.stderr
    repo = where / "repo"
    proc = _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json", *extra], str(repo))
    shown = _as_user(entry, ["git", "show", "plan-runner/calc:leak.txt"], str(repo))
    return proc, shown.stdout


@pytest.mark.sudo_user
@pytest.mark.parametrize("sudo", [False, True], ids=["plain-user", "sudo-user"])
def test_an_ordinary_user_runs_the_agent_isolated_in_namespaces(sudo):
    """Issue 49: no root, with or without sudo (a laptop, GitHub's `runner`): the session runs isolated in kernel
    namespaces and advances; the agent cannot read ~/.ssh/id_rsa nor list the home, and its setsid sleeper is
    gone. Control: `--isolation none` hands the same agent the key."""
    entry = _user("pr-test-sudo" if sudo else "pr-test-plain", sudo=sudo)
    tag = "sudo" if sudo else "plain"
    proc, leak = _snooping_session_as(entry, f"{tag}-ns")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    assert "isolated in kernel namespaces" in proc.stderr and "Traceback" not in proc.stderr
    assert "PRIVATE-KEY" not in leak and "home: .ssh" not in leak.splitlines(), leak
    left = subprocess.run(["pgrep", "-f", f"pr-snoop-{tag}-ns"], capture_output=True, text=True).stdout
    assert left == "", left
    proc, leak = _snooping_session_as(entry, f"{tag}-none", "--isolation", "none")
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    assert f"PRIVATE-KEY-{tag}-none" in leak and "home: .ssh" in leak.splitlines(), leak
    subprocess.run(["pkill", "-f", f"pr-snoop-{tag}-none"], check=False)  # the control's sleeper: unconfined


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


@pytest.mark.sudo_user
def test_in_namespaces_the_agent_reaches_only_what_the_plan_lists_through_the_proxy():
    """Issue 49, item 4, as an ordinary user without sudo: the agent's room has no network of its own (a host port
    not listed is out of reach directly); the address the plan's `network: agent:` lists it reaches through the
    allow-list proxy, and at its own address too (the relay shows a listed loopback port inside); one it does not
    list is refused both ways. `setup:` and a gate, with lists of their own (none), are refused that
    address too (each exits non-zero otherwise, and the session would not advance)."""
    listed_srv, listed = _listener()
    unlisted_srv, unlisted = _listener()
    try:
        entry = _user("pr-test-plain", sudo=False)
        where = Path(entry.pw_dir) / "net-ns"
        privileged("rm", "-rf", str(where))
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
    assert seen[0] == f"direct {listed}: hello", seen  # shown inside at its own address
    assert seen[1].startswith(f"proxied {listed}: HTTP/1.1 200") and seen[1].endswith("hello"), seen
    assert seen[2].startswith(f"direct {unlisted}: no"), seen
    assert seen[3].startswith(f"proxied {unlisted}: HTTP/1.1 403") or " 40" in seen[3], seen


KEY = "sk-ant-api03-plan-runner-test-key-0123456789abcdef"
SHOW_ENV = ("env | grep -i -e anthropic -e proxy > env.txt; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' "
            "| grep -c sk-ant-api03 >> env.txt; printf 'def mul(a, b):\\n    return a * b\\n' > calc/mul.py; "
            "sed -i 's/- \\[ \\] 1.1/- [x] 1.1/' plans/calc.md; git add -A && git commit -qm 'Add mul, tick 1.1'")


@pytest.mark.sudo_user
def test_in_namespaces_an_api_key_agent_never_holds_its_key():
    """Issue 49, item 4: the built-in agent (an API-key backend) of an ordinary user without sudo runs in the room
    behind the proxy: no process in it holds the key (its environment has a placeholder and the proxy's address),
    yet every request reaches the model with the real key, which the proxy added outside."""
    from tests.servers.messages import MessagesServer, reply, tool_use

    entry = _user("pr-test-plain", sudo=False)
    where = Path(entry.pw_dir) / "key-ns"
    privileged("rm", "-rf", str(where))
    made = _as_user(entry, [sys.executable, "-c", MAKE_AGENT_REPO.format(root=str(ROOT), where=str(where),
                                                                         agent="#!/bin/sh\n")], entry.pw_dir)
    assert made.returncode == 0, made.stderr
    repo = where / "repo"
    plan = repo / "plans" / "calc.md"
    code = (f"import re; from pathlib import Path; p = Path({str(plan)!r}); "
            "p.write_text(re.sub(r'backend: command\\n  executable: .*\\n', 'backend: anthropic\\n', p.read_text()))")
    edit = _as_user(entry, ["sh", "-c", '"$0" -c "$1" && git commit -qam anthropic', sys.executable, code], str(repo))
    assert edit.returncode == 0 and "backend: anthropic" in _as_user(entry, ["cat", str(plan)], "/").stdout, edit.stderr
    with MessagesServer() as srv:
        srv.enqueue(reply(tool_use("run_shell", {"command": SHOW_ENV})), reply("Done: mul added."))
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": entry.pw_dir, "LANG": "C.UTF-8",
               "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": srv.url}
        proc = as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], repo, env=env)
        keys = [r.headers.get("x-api-key") for r in srv.message_requests]
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    seen = _as_user(entry, ["git", "show", "plan-runner/calc:env.txt"], str(repo)).stdout
    assert KEY not in seen and "ANTHROPIC_BASE_URL=http://127.0.0.1:" in seen, seen
    assert seen.splitlines()[-1] == "0", seen  # no process of the room holds it in its environment
    assert keys and set(keys) == {KEY}, keys


SETUP = ("setup:\n  run: [\"mkdir -p .made && echo ok > .made/x && mkdir -p built && echo 1 > built/out\"]\n"
         "  cache: [.made]\n  key: [plans/calc.md]\nbudget:")


@pytest.mark.sudo_user
@pytest.mark.parametrize("sudo", [True, False], ids=["sudo-user", "plain-user"])
def test_a_plan_with_setup_runs_its_first_session_as_an_ordinary_user(sudo):
    """Issue 49: as an ordinary user with passwordless sudo (GitHub's `runner`) the first session of a plan with
    `setup:` crashed when the agent ran as a pooled user (PermissionError stat-ing its 0700 clone, recorded as
    Interrupted); now both users run it in kernel namespaces. Both advance, and what set-up made (its cache and an
    untracked folder) is excluded from the agent's commits."""
    entry = _user("pr-test-sudo" if sudo else "pr-test-plain", sudo=sudo)
    tag = "setup-sudo" if sudo else "setup-plain"
    where = Path(entry.pw_dir) / tag
    privileged("rm", "-rf", str(where))
    made = _as_user(entry, [sys.executable, "-c", MAKE_REPO.format(root=str(ROOT), where=str(where))], entry.pw_dir)
    assert made.returncode == 0, made.stderr
    repo = where / "repo"
    plan = repo / "plans" / "calc.md"
    code = f"from pathlib import Path; p = Path({str(plan)!r}); p.write_text(p.read_text().replace('budget:', {SETUP!r}, 1))"
    edit = _as_user(entry, ["sh", "-c", '"$0" -c "$1" && git commit -qam setup', sys.executable, code], str(repo))
    assert edit.returncode == 0 and "setup:" in _as_user(entry, ["cat", str(plan)], "/").stdout, edit.stderr
    proc = _as_user(entry, [sys.executable, "-m", "runner", "session", "plans/calc.md", "--json"], str(repo))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "Advanced", proc.stderr
    assert "Traceback" not in proc.stderr and "PermissionError" not in proc.stderr
    assert "isolated in kernel namespaces" in proc.stderr
    tracked = _as_user(entry, ["git", "ls-tree", "-r", "--name-only", "plan-runner/calc"], str(repo)).stdout.split()
    assert "calc/mul.py" in tracked and ".made/x" not in tracked and "built/out" not in tracked, tracked


@pytest.mark.sudo_user
@pytest.mark.parametrize("sudo", [True, False], ids=["sudo-user", "plain-user"])
def test_the_readme_first_command_finishes_for_an_ordinary_user_with_a_private_home(sudo):
    """Issue 20: an ordinary user with passwordless sudo and a 0750 home copies plan-runner into it and runs the
    README's first command there, as written (venv, `pip install -e .` from the machine's package index, `demo`).
    A pooled agent user could not run that venv's python (it once parked: AgentError twice,
    `.venv/bin/python3.11: Permission denied`, exit 3; then it ran unisolated). Issue 49: with or without sudo the
    demo runs isolated in kernel namespaces, as the user's own uid, and finishes."""
    entry = _user("pr-test-reach" if sudo else "pr-test-reach-plain", sudo=sudo)
    home = Path(entry.pw_dir)
    src, tmp = home / "plan-runner", home / "tmp"
    privileged("rm", "-rf", str(src), str(tmp))
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
    proc = as_user(entry, ["sh", "-c", first], src, env=env, timeout=900, stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "without isolation" not in text and "isolated in kernel namespaces" in text, text[:2000]
    assert "finished: every checkpoint is done" in text and "Traceback" not in text
    assert "Permission denied" not in text
