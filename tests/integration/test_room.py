"""The room untrusted code runs in (runner.adapters.sandbox.room): what it sees, and that nothing of it survives.

Each guarantee is checked as each user plan-runner really has runs it: root (CI's installer), an ordinary user
without sudo (a laptop) and an ordinary user with passwordless sudo (GitHub's `runner`), both with a 0750 home.
The ordinary users are made here as root; as an ordinary user (`.ci/run`) the suite checks its own user only.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner.adapters.sandbox import room as rooms
from runner.core.errors import PlanRunnerError
from tests.other_users import again_as_root, as_user, make_user

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

# Run as the user under test: plants ~/.ssh/id_rsa, a judge's repository and state beside a work folder, opens a
# room, runs `probe` in it with the work folder writable, prints what it saw as JSON, closes the room.
PROBE = textwrap.dedent("""\
    import json, os, subprocess, sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from runner.adapters.sandbox.room import View, open_room, toolchain
    base = Path({base!r})
    home = Path.home()
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\\n")
    for made in ("work", "repo/.git/plan-runner", "state"):
        (base / made).mkdir(parents=True, exist_ok=True)
    (base / "repo" / ".git" / "config").write_text("[core]\\n")
    (base / "state" / "ledger.json").write_text("{{}}")
    shown = toolchain(os.environ["PATH"], [Path(sys.executable), Path(sys.base_prefix)], homes=[home],
                      private=[base / "repo", base / "state"])
    room = open_room(toolchain_roots=shown)
    launch = room.command(["sh", "-c", {probe!r}], {{"PATH": os.environ["PATH"], "HOME": "/nowhere"}},
                          base / "work", View(writable=(base / "work",)))
    done = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True, timeout=60)
    folder = room.folder
    room.close()
    print(json.dumps({{"rc": done.returncode, "out": done.stdout, "err": done.stderr, "folder": str(folder),
                       "folder_left": folder.exists(), "uid": os.getuid()}}))
    """)

SEES = r"""
for p in "$REAL_HOME/.ssh/id_rsa" "$BASE/repo/.git/config" "$BASE/state/ledger.json"; do
  if cat "$p" >/dev/null 2>&1; then echo "read $p"; else echo "unreadable $p"; fi
done
echo "home: $(ls -A "$REAL_HOME" 2>/dev/null | grep -v '^\.pyenv$' | tr '\n' ' ')"
echo ok > "$BASE/work/written" && echo "wrote work"
echo x > /usr/plan-runner-test 2>/dev/null && echo "wrote usr" || echo "usr read-only"
echo "tmp $TMPDIR $HOME $(ls -A /tmp | tr '\n' ' ')"
python3 -c 'print("python ok")'
"""


def _who(kind: str) -> pwd.struct_passwd:
    """The user a case runs as: root itself, or an ordinary user (made when the suite is root; else the suite's own
    user is the ordinary one, and the other kinds have been run again as root: tests/other_users.again_as_root)."""
    me = pwd.getpwuid(os.getuid())
    if os.getuid() != 0:
        assert kind == "plain", "the other kinds run as root (again_as_root)"
        return me
    if kind == "root":
        return me
    return make_user("pr-room-plain" if kind == "plain" else "pr-room-sudo", sudo=kind == "sudo")


def _as(entry: pwd.struct_passwd, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return as_user(entry, argv, entry.pw_dir, env=env, timeout=120)


def _probe(entry: pwd.struct_passwd, script: str, base: Path) -> dict:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": entry.pw_dir, "LANG": "C.UTF-8",
           "REAL_HOME": entry.pw_dir, "BASE": str(base)}
    code = PROBE.format(root=str(ROOT), base=str(base), probe=f"REAL_HOME={entry.pw_dir}; BASE={base}; {script}")
    done = _as(entry, [sys.executable, "-c", code], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _base(entry: pwd.struct_passwd, tag: str) -> Path:
    base = Path(entry.pw_dir) / f"room-{tag}"
    subprocess.run(["rm", "-rf", str(base)], check=True)
    done = _as(entry, ["mkdir", "-p", str(base)], {"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return base


@pytest.mark.parametrize("kind", [pytest.param("root", marks=pytest.mark.sudo_user), "plain", pytest.param("sudo", marks=pytest.mark.sudo_user)])
def test_a_room_sees_its_work_and_the_toolchain_and_nothing_of_the_home_or_the_judge(kind, request):
    """~/.ssh/id_rsa, the rest of the home, the judge's repository and state are not there; the work folder is
    writable, the system read-only, python runs; the room's own TMP and HOME are gone after close."""
    if kind != "plain" and again_as_root(request):
        return
    entry = _who(kind)
    base = _base(entry, f"sees-{kind}")
    seen = _probe(entry, SEES, base)
    out = seen["out"].splitlines()
    assert seen["rc"] == 0, seen
    assert f"unreadable {entry.pw_dir}/.ssh/id_rsa" in out, out
    assert f"unreadable {base}/repo/.git/config" in out and f"unreadable {base}/state/ledger.json" in out, out
    # only the way to the work folder, and to the interpreter's install when it lives in the home (the suite's own
    # venv, run as an ordinary user)
    ways = {base.name} | {Path(p).relative_to(entry.pw_dir).parts[0] for p in (sys.prefix, sys.base_prefix)
                          if Path(p).is_relative_to(entry.pw_dir) and Path(p) != Path(entry.pw_dir)}
    home = next(line for line in out if line.startswith("home: "))
    assert set(home.split()[1:]) == ways - {".pyenv"}, out
    assert "wrote work" in out and "usr read-only" in out and "python ok" in out, out
    assert "tmp /tmp /tmp/home home " in out, out
    assert (base / "work" / "written").read_text() == "ok\n"
    assert not seen["folder_left"]


@pytest.mark.sudo_user
def test_without_the_room_the_same_probe_reads_the_key(request):
    """Positive control: the Unconfined adapter (isolation: none) reads the planted key and lists the home."""
    if again_as_root(request):
        return
    entry = _who("root")
    base = _base(entry, "control")
    key = Path(entry.pw_dir) / ".ssh" / "id_rsa"
    key.parent.mkdir(mode=0o700, exist_ok=True)
    key.write_text("PRIVATE KEY\n")
    launch = rooms.Unconfined().command(["sh", "-c", f"REAL_HOME={entry.pw_dir}; BASE={base}; {SEES}"],
                                        {"PATH": "/usr/bin:/bin"}, base, rooms.View())
    (base / "work").mkdir()
    out = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True).stdout.splitlines()
    assert f"read {key}" in out and any(line.startswith("home: ") and ".ssh" in line for line in out), out


DAEMON = r"""
setsid sh -c 'sleep 3; echo late > "$BASE/work/daemon"' </dev/null >/dev/null 2>&1 &
nohup sh -c 'exec -a plan-runner-room-orphan sleep 300' </dev/null >/dev/null 2>&1 &
echo started
"""


@pytest.mark.parametrize("kind", [pytest.param("root", marks=pytest.mark.sudo_user), "plain", pytest.param("sudo", marks=pytest.mark.sudo_user)])
def test_a_forked_daemon_dies_with_the_room_and_no_process_is_left(kind, request):
    """A setsid daemon and a nohup'd sleeper started in the room are gone when its first process returns."""
    if kind != "plain" and again_as_root(request):
        return
    entry = _who(kind)
    base = _base(entry, f"daemon-{kind}")
    seen = _probe(entry, DAEMON, base)
    assert seen["out"].strip() == "started", seen
    time.sleep(3.5)
    assert not (base / "work" / "daemon").exists()
    left = subprocess.run(["pgrep", "-f", "plan-runner-room-orphan"], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout


@pytest.mark.parametrize("kind", [pytest.param("root", marks=pytest.mark.sudo_user), "plain"])
def test_a_layered_folder_takes_writes_in_a_throwaway_layer(kind, tmp_path, request):
    """The overlay: the process writes, deletes and replaces in a read-only base; the base is unchanged after."""
    if kind != "plain" and again_as_root(request):
        return
    entry = _who(kind)
    base = _base(entry, f"layer-{kind}")
    script = textwrap.dedent(f"""\
        import subprocess, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from runner.adapters.sandbox.room import View, open_room
        tree = Path({str(base)!r}) / "tree"
        tree.mkdir()
        (tree / "kept.py").write_text("ok = True\\n")
        room = open_room()
        assert room.overlay
        launch = room.command(["sh", "-c", "echo bad > kept.py && touch new && rm -f kept.py; ls -A | wc -l"],
                              {{"PATH": "/usr/bin:/bin"}}, tree, View(layered=((tree, tree),)))
        done = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True)
        room.close()
        print(done.returncode, done.stdout.strip(), done.stderr.strip())
        """)
    done = _as(entry, [sys.executable, "-c", script], {"PATH": "/usr/bin:/bin", "HOME": entry.pw_dir})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["0", "1"], done.stdout
    assert sorted(os.listdir(base / "tree")) == ["kept.py"]
    assert (base / "tree" / "kept.py").read_text() == "ok = True\n"


def test_a_room_has_no_network_unless_its_view_grants_it():
    """--unshare-all: only a loopback of its own; the host's network only through `View(network=True)`."""
    room = rooms.open_room()
    try:
        outs = []
        for network in (False, True):
            launch = room.command(["sh", "-c", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort"],
                                  {"PATH": "/usr/bin:/bin"}, "/", rooms.View(network=network))
            outs.append(subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True).stdout.split())
    finally:
        room.close()
    assert outs[0] == ["lo"]
    assert outs[1] != ["lo"] and "lo" in outs[1]


def test_a_program_named_through_a_linked_folder_starts_in_the_room(tmp_path):
    """A venv reached through linked folders (a home under `/home -> var/home`, a project through a link): the room
    shows the resolved install and makes each link on the way again, so the program starts as it is named; the
    folders only linked to are not shown beyond the link."""
    real = tmp_path / "data" / "project"
    (real / "venv" / "bin").mkdir(parents=True)
    (real / "secret.txt").write_text("not for the room\n")
    (real / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    # like a venv's python, it finds its install beside the path it was named by
    (real / "venv" / "bin" / "hello").write_text('#!/bin/sh\necho hello from $0; cat "${0%/bin/*}/pyvenv.cfg"\n')
    (real / "venv" / "bin" / "hello").chmod(0o755)
    (tmp_path / "home").symlink_to(tmp_path / "data")  # an absolute link,
    (tmp_path / "data" / "again").symlink_to("project")  # then a relative one, in a folder the room does not show
    named = tmp_path / "home" / "again" / "venv" / "bin" / "hello"
    shown = rooms.toolchain("/usr/bin:/bin", [named])
    room = rooms.open_room(toolchain_roots=shown, links=rooms.links_on_the_way([named]))
    try:
        launch = room.command([str(named)], {"PATH": "/usr/bin:/bin"}, "/", rooms.View())
        ran = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True)
        peek = room.command(["cat", str(tmp_path / "home" / "again" / "secret.txt")], {"PATH": "/usr/bin:/bin"}, "/",
                            rooms.View())
        peeked = subprocess.run(peek.argv, **peek.popen, capture_output=True, text=True)
    finally:
        room.close()
    assert ran.returncode == 0 and ran.stdout == f"hello from {named}\nhome = /usr/bin\n", ran.stderr
    assert peeked.returncode != 0 and "not for the room" not in peeked.stdout
    assert rooms.links_on_the_way([named]) == ((str(tmp_path / "home"), str(tmp_path / "data")),
                                              (str(tmp_path / "data" / "again"), "project"))


def test_a_kernel_that_refuses_user_namespaces_is_named_with_its_fix(monkeypatch, tmp_path):
    """Ubuntu 24.04's AppArmor restriction: what, why, and the sysctl that lifts it; no sudo is tried without it."""
    knob = tmp_path / "apparmor_restrict_unprivileged_userns"
    knob.write_text("1\n")
    monkeypatch.setattr(rooms, "APPARMOR_KNOB", knob)
    error = rooms._refused("setting up uid map: Permission denied")
    assert isinstance(error, PlanRunnerError)
    assert "apparmor_restrict_unprivileged_userns=0" in error.fix and "AppArmor" in error.why
    assert rooms._lift("sudo", can_sudo=lambda: False) is None


def test_the_toolchain_never_shows_the_home_or_the_judges_folders(tmp_path):
    """In the home only the PATH folder itself (`~/.local/bin`, never `~/.local/share`) or a venv's prefix; outside
    it an install's prefix (`<prefix>/bin`); the home itself never; the judge's repository never, its venv
    included."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    for d in (home / "bin", home / ".local" / "bin", home / "venv" / "bin", repo / ".venv" / "bin",
              tmp_path / "opt" / "node" / "bin"):
        d.mkdir(parents=True)
    (home / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    path = os.pathsep.join(map(str, (home, home / "bin", home / ".local" / "bin", home / "venv" / "bin",
                                     repo / ".venv" / "bin", tmp_path / "opt" / "node" / "bin", "/usr/bin")))
    shown = rooms.toolchain(path, homes=[home], private=[repo])
    assert shown == (home / "bin", home / "venv", tmp_path / "opt" / "node", home / ".local" / "bin")


def test_the_toolchain_shows_a_pyenv_or_nvm_install_in_the_home_whole_but_never_dot_local(tmp_path):
    """A Python pyenv installed in the home (`~/.pyenv/versions/X/bin` on PATH) runs nothing without its lib/, and
    pyenv's shims run `pyenv exec` from its root: both bring their prefix. A Node of nvm's too. `~/.local/bin` stays
    alone even where ~/.local holds an npm prefix (~/.local/share is the user's data)."""
    home = tmp_path / "home"
    version = home / ".pyenv" / "versions" / "3.11.7"
    node = home / ".nvm" / "versions" / "node" / "v20"
    for d in (version / "bin", version / "lib" / "python3.11", home / ".pyenv" / "shims", home / ".pyenv" / "libexec",
              node / "bin", node / "lib" / "node_modules", home / ".local" / "bin", home / ".local" / "lib" / "node_modules"):
        d.mkdir(parents=True)
    (version / "lib" / "python3.11" / "os.py").write_text("")
    (home / ".pyenv" / "libexec" / "pyenv").write_text("#!/bin/sh\n")
    path = os.pathsep.join(map(str, (version / "bin", node / "bin", home / ".local" / "bin")))
    assert set(rooms.toolchain(path, homes=[home])) == {version, node, home / ".local" / "bin"}
    shims = rooms.toolchain(str(home / ".pyenv" / "shims"), homes=[home])
    assert shims == (home / ".pyenv",)
    # an npm-installed CLI (the action's install of Codex: .bin/codex is a launcher that loads the platform's binary
    # from an optional dependency beside it): its whole package tree, in the home or not
    for prefix in (home / "tools" / "codex-1", tmp_path / "lib" / "codex-1"):
        (prefix / "node_modules" / ".bin").mkdir(parents=True)
        (prefix / "node_modules" / "@openai" / "codex-linux-x64").mkdir(parents=True)
        assert rooms.toolchain(str(prefix / "node_modules" / ".bin"), homes=[home]) == (prefix,)
    (home / ".pyenv" / "libexec" / "pyenv").unlink()  # a folder named shims that is not pyenv's: itself only
    assert rooms.toolchain(str(home / ".pyenv" / "shims"), homes=[home]) == (home / ".pyenv" / "shims",)


@pytest.mark.sudo_user  # run again as root (tests/other_users.py): only a root plan-runner's rooms hide it
def test_as_root_a_room_cannot_read_what_only_root_may_read(tmp_path, request):
    """Issue 49: as root, a room's uid is root's outside (kuid 0), so a file only root may read that the room shows by
    mount (/etc/shadow, an ssh host key) would be readable in it as its owner. Every root room covers them.
    Control: the same room with nothing covered reads /etc/shadow."""
    if again_as_root(request):
        return
    secret, dropped = Path("/etc/plan-runner-test-secret"), Path("/etc/plan-runner-test-dropped")
    for path in (secret, dropped):
        path.write_text("ROOT-ONLY\n")
        path.chmod(0o600)
    try:
        found = dict(rooms.root_only())
        assert found.get("/etc/shadow") is False and found.get(str(secret)) is False, found
        room = rooms.open_room()
        dropped.unlink()  # a root-only file gone while the room is open (a sudoers file removed): nothing to cover
        try:
            probe = ["sh", "-c", f"cat /etc/shadow {secret} 2>/dev/null; echo rc=$?"]
            launch = room.command(probe, {"PATH": "/usr/bin:/bin"}, "/", rooms.View())
            done = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True, timeout=60)
            assert "rc=" in done.stdout, done.stderr  # the room started
            assert "ROOT-ONLY" not in done.stdout and "root:" not in done.stdout, done.stdout
            bare = rooms.Namespaces(bwrap=room.bwrap, folder=room.folder)  # the control: nothing covered
            launch = bare.command(probe, {"PATH": "/usr/bin:/bin"}, "/", rooms.View())
            done = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True, timeout=60)
            assert "ROOT-ONLY" in done.stdout and "root:" in done.stdout, done.stdout + done.stderr
        finally:
            room.close()
    finally:
        secret.unlink()
        dropped.unlink(missing_ok=True)


@pytest.mark.sudo_user  # run again as root: a sysctl is writable on file modes alone only to kuid 0
def test_as_root_a_room_cannot_write_the_hosts_sysctls(request):
    """Issue 49: as root, the room's processes are kuid 0 outside, and the kernel checks a write to /proc/sys by file
    mode and euid alone (no capability): vm.swappiness, kernel.core_pattern would be the host's to change. A root
    plan-runner's rooms see /proc/sys read-only. The probe writes back the value it read (a no-op if it got in)."""
    if again_as_root(request):
        return
    room = rooms.open_room()
    try:
        probe = ("v=$(cat /proc/sys/vm/swappiness); echo \"$v\" > /proc/sys/vm/swappiness 2>/dev/null && echo WROTE; "
                 "echo writable=$(find /proc/sys -writable -type f 2>/dev/null | wc -l)")
        launch = room.command(["sh", "-c", probe], {"PATH": "/usr/bin:/bin"}, "/", rooms.View())
        done = subprocess.run(launch.argv, **launch.popen, capture_output=True, text=True, timeout=60)
        assert "WROTE" not in done.stdout and "writable=0" in done.stdout, done.stdout + done.stderr
    finally:
        room.close()
