"""The boundary, third round (issue 22; issue 21 build items 1 and 4; issue 20 item 3): a process the kill
could not see, races on the judge's copies, leftovers across plans, two plan-runners sharing a uid,
programs planted on PATH, and secrets on a command line. Each attack is judged by its effect, next to a
positive control that shows the attack is real (it works where the mechanism is absent).

Untrusted code runs in the room (runner.adapters.sandbox.room) whoever runs the suite; the tests of the pooled
users' own mechanisms (the uid scan, the cgroup, the slot locks, the launcher, the code-replacement check at the
lease) went with the pool (issue 49), and the survivor and the leftovers are checked against the room instead.
A few tests hand files to another uid to play the other user: those need root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from runner.adapters.sandbox import fsafe, proc, tools
from runner.adapters.sandbox import identity as sandbox
from tests.other_users import again_as_root
from tests.attack_world import arena  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration
# hands a file to another uid (chown), or checks what root resolves: run again as root through sudo (tests/other_users.py)
needs_root = pytest.mark.sudo_user
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}

# A process whose main thread leaves with the bare `exit` syscall: its leader is a zombie, its other thread
# appends to a heartbeat file for `seconds`.
SURVIVOR = textwrap.dedent("""\
    import ctypes, os, sys, threading, time
    beat, seconds = sys.argv[1], float(sys.argv[2])
    def run():
        end = time.time() + seconds
        while time.time() < end:
            with open(beat, "a") as fh:
                fh.write("x")
            time.sleep(0.02)
        os._exit(0)
    threading.Thread(target=run).start()
    time.sleep(0.2)
    ctypes.CDLL(None).syscall({"aarch64": 93}.get(os.uname().machine, 60), 0)
    """)


def _beating(beat: Path, wait: float = 0.4) -> bool:
    before = beat.stat().st_size if beat.exists() else -1
    time.sleep(wait)
    return beat.exists() and beat.stat().st_size != before


@pytest.fixture
def shared(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    tmp_path.chmod(0o711)
    return folder


# --- the kill by construction ---------------------------------------------------------------------------------

# A process of the room starts the survivor in a session of its own (as a daemon would), writes its pid, and exits.
LAUNCH = textwrap.dedent("""\
    import subprocess, sys, time
    survivor, beat = sys.argv[1], sys.argv[2]
    p = subprocess.Popen([sys.executable, "-c", survivor, beat, "20"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open(beat + ".pid", "w").write(str(p.pid))
    time.sleep(1)
    """)


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_bare_exit_survivor_ends_with_the_rooms_first_process(shared, isolation):
    """The survivor of issue 22 (its leader a zombie with a thread running on, its own session: what a uid scan
    that skipped zombies missed), started by a process of the room that then exits: the room's PID namespace
    ends with that process, and the survivor with it. Positive control (`none`): started the same way without a
    room, it runs on after its parent is gone."""
    beat = shared / "heartbeat"
    with sandbox.leased(isolation) as identity:
        if identity.room is not None:
            identity.room.grant(shared)  # where it beats: the test reads it
        try:
            proc.run([sys.executable, "-c", LAUNCH, SURVIVOR, str(beat)], cwd=str(shared), env=dict(ENV),
                     time_limit_s=30, identity=identity)
            assert beat.exists(), "the survivor never ran"
            if isolation == "none":
                assert _beating(beat), "positive control: without a room the survivor outlives its parent"
            else:
                assert not _beating(beat, 0.8), "the survivor outlived the room's first process"
        finally:
            if isolation == "none" and (shared / "heartbeat.pid").exists():
                try:
                    os.kill(int((shared / "heartbeat.pid").read_text()), signal.SIGKILL)
                except OSError:
                    pass


# --- leftovers across plans -------------------------------------------------------------------------------------


def _as(identity, script: str, home: Path) -> str:
    out = bytearray()
    proc.run(["sh", "-c", script], cwd="/", env={**ENV, "HOME": str(home)}, time_limit_s=20, identity=identity,
             on_output=out.extend)
    return out.decode()


def test_a_password_one_sessions_agent_kept_is_not_readable_by_the_next_session():
    """~/.pgpass, a file in its TMPDIR, one in /tmp and one in Claude Code's own /tmp/claude-<uid> folder, written
    by one session's agent: readable while its room lasts (the positive control), gone with it: the next
    session's room (another plan's, the same uid) reads none of them, and the first room's folder is removed."""
    write = ('echo "db:5432:*:u:hunter2-pw" > ~/.pgpass; echo hunter2-tmp > "$TMPDIR/kept"; '
             'echo hunter2-shared > /tmp/pr-leftover-$(id -u); '
             'mkdir -p /tmp/claude-$(id -u)/project && echo hunter2-claude > /tmp/claude-$(id -u)/project/out')
    read = ('cat ~/.pgpass "$TMPDIR/kept" /tmp/pr-leftover-$(id -u) /tmp/claude-$(id -u)/project/out 2>/dev/null; '
            'true')
    home = Path("/nonexistent-home")  # not in the room's view: the room gives it a HOME of its own
    with sandbox.leased("auto") as first:
        assert first.room is not None
        folder = first.room.folder
        _as(first, write, home)
        seen = _as(first, read, home)
        assert all(f"hunter2-{w}" in seen for w in ("pw", "tmp", "shared", "claude")), seen  # positive control
    assert not folder.exists(), "the first room's folder (its TMP and HOME) outlived its session"
    with sandbox.leased("auto") as second:
        got = _as(second, read, home)
    assert "hunter2" not in got, got


# --- no secret on a command line ---------------------------------------------------------------------------------


def test_the_agents_environment_is_never_on_a_command_line():
    """While an isolated process runs with a key in its environment, no process's /proc/<pid>/cmdline holds the
    key; its own environment does (the positive control: the key reached it)."""
    key = "sk-ant-api03-" + os.urandom(12).hex()
    seen: list[str] = []
    hits: list[int] = []

    def scan(ctl) -> None:
        def loop() -> None:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                    try:
                        if key.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                            hits.append(int(pid))
                        if key.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                            seen.append(pid)
                    except OSError:
                        continue
                time.sleep(0.01)
        threading.Thread(target=loop, daemon=True).start()

    with sandbox.leased("user") as identity:
        proc.run(["sleep", "1.5"], cwd="/", env={**ENV, "ANTHROPIC_API_KEY": key}, time_limit_s=10,
                 identity=identity, on_start=scan)
        time.sleep(0.2)
    assert seen, "the key never reached the agent's environment"
    assert not hits, f"the key was on the command line of {hits}"


# --- symlink races on the judge's copies --------------------------------------------------------------------------


RACER = textwrap.dedent("""\
    import os, sys
    state, judge_git = sys.argv[1], sys.argv[2]
    real, link, spare = (os.path.join(state, n) for n in ("projects", "projects.lnk", "projects.dir"))
    os.symlink(judge_git, link)
    while not os.path.exists(os.path.join(state, "stop")):
        try:
            os.rename(real, spare)
            os.rename(link, real)
            os.rename(real, link)
            os.rename(spare, real)
        except OSError:
            pass
    """)


class _Race:
    """The agent's move, in a process of its own: `state/projects` flips between a real folder and a link to
    the judge's .git."""

    def __init__(self, area: Path, judge_git: Path) -> None:
        self.state = area / "state"
        self.proc = subprocess.Popen([sys.executable, "-c", RACER, str(self.state), str(judge_git)])
        while not (self.state / "projects.lnk").exists() and not (self.state / "projects").is_symlink():
            time.sleep(0.01)

    def stop(self) -> None:
        (self.state / "stop").touch()
        self.proc.wait(timeout=10)
        (self.state / "stop").unlink()
        for name in ("projects", "projects.lnk", "projects.dir"):
            p = self.state / name
            if p.is_symlink():
                p.unlink()
        if not (self.state / "projects").exists():
            (self.state / "projects.dir").rename(self.state / "projects")


def _old_copy(src: Path, dest: Path) -> None:
    """The copy plan-runner made before: os.walk by path, O_NOFOLLOW on the last component only."""
    for folder, _dirs, files in os.walk(src, followlinks=False):
        rel = Path(folder).relative_to(src)
        for name in files:
            try:  # the racer may have put a folder under the name: the old copy skipped what it could not read
                fd = os.open(Path(folder) / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                data = b""
                while chunk := os.read(fd, 1 << 16):  # a folder's descriptor: EISDIR, skipped
                    data += chunk
            except OSError:
                continue
            finally:
                os.close(fd)
            (dest / rel).mkdir(parents=True, exist_ok=True)
            (dest / rel / name).write_bytes(data)


def _arena_for_race(tmp_path: Path) -> tuple[Path, Path, bytes]:
    area = tmp_path / "area"
    (area / "state" / "projects").mkdir(parents=True)
    area.chmod(0o711)
    (area / "state" / "projects" / "config").write_text("harmless\n")
    judge_git = tmp_path / "judge.git"
    judge_git.mkdir()
    secret = b"AUTHORIZATION: basic ghs_" + os.urandom(8).hex().encode()
    (judge_git / "config").write_bytes(secret)
    return area, judge_git, secret


@pytest.mark.parametrize("copier", ["old", "fsafe"])
def test_a_directory_swapped_for_a_link_during_the_copy_hands_on_nothing_of_the_judges(tmp_path, copier):
    """The agent flips a folder of its saved state with a link to the judge's .git while plan-runner copies it:
    the fd-relative walk never copies the judge's config; the old path walk does (the positive control)."""
    area, judge_git, secret = _arena_for_race(tmp_path)
    race = _Race(area, judge_git)
    leaked = 0
    deadline = time.monotonic() + 120  # the positive control runs until the race wins (see the chown test)
    i = 0
    try:
        while i < 3000 or (copier == "old" and not leaked and time.monotonic() < deadline):
            i += 1
            dest = tmp_path / "copies" / str(i)
            if copier == "old":
                _old_copy(area / "state", dest)
            else:
                fsafe.copy_tree(area / "state", dest, below=area, limit=2**20)
            leaked += any(secret in p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
            if copier == "old" and leaked:
                break
    finally:
        race.stop()
    if copier == "old":
        assert leaked, "the race never won against the old copy: the test shows nothing"
    else:
        assert leaked == 0, f"the judge's config was copied {leaked} times"


@needs_root
def test_a_directory_swapped_for_a_link_during_the_chown_gives_away_nothing_of_the_judges(tmp_path, request):
    """The same flip while plan-runner hands a tree to the agent's uid: the judge's file keeps its owner; a
    path-based lchown walk (positive control) gives it away."""
    if again_as_root(request):
        return
    area, judge_git, _ = _arena_for_race(tmp_path)
    target = judge_git / "config"

    def old_chown(path: Path, uid: int) -> None:
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                try:
                    os.lchown(os.path.join(folder, name), uid, uid)
                except OSError:
                    pass

    # The positive control runs until the race wins (on a loaded machine the racer may need more than a few
    # thousand tries: 3,000 once were not enough beside two other test workers); the fd-relative walk then gets
    # at least as many tries as the old one needed, and never fewer than 3,000.
    results, tries = {}, {}
    for how in ("old", "fsafe"):
        os.chown(target, 0, 0)
        race = _Race(area, judge_git)
        budget = 3000 if how == "old" else max(3000, 2 * tries["old"])
        deadline = time.monotonic() + 120
        n = 0
        try:
            while n < budget or (how == "old" and time.monotonic() < deadline):
                n += 1
                if how == "old":
                    old_chown(area / "state", 12345)
                else:
                    try:
                        fsafe.chown_tree(area / "state", 12345, 12345, below=area)
                    except OSError:
                        pass
                if os.stat(target).st_uid == 12345:
                    break
        finally:
            race.stop()
        results[how], tries[how] = os.stat(target).st_uid, n
    assert results["old"] == 12345, f"the race never won against the old chown in {tries['old']} tries: the test shows nothing"
    assert results["fsafe"] == 0, f"the judge's config was handed to the agent's uid (within {tries['fsafe']} tries)"


# --- the judge runs nothing the agent's user could have written ---------------------------------------------------


def _planted_path(tmp_path: Path, log: Path) -> Path:
    """A world-writable folder (no sticky bit, like the hosted image's /opt/pipx_bin) holding a `git` and a
    `sudo` written by another user, each logging that it ran, then doing the real thing."""
    folder = tmp_path / "opt" / "pipx_bin"
    folder.mkdir(parents=True)
    for p in (tmp_path / "opt", folder):
        p.chmod(0o777)
    for name in ("git", "sudo"):
        real = f"/usr/bin/{name}"
        script = folder / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexec {real} "$@"\n')
        script.chmod(0o777)
        os.chown(script, 65534, 65534)
    log.touch()
    log.chmod(0o666)
    return folder


@needs_root
def test_a_git_or_sudo_planted_first_on_path_never_runs_as_the_judge(arena, tmp_path, request):
    """A whole session with a planted `git` and `sudo` first on PATH: plan-runner never runs them (it drops the
    folder from its own PATH and resolves tools in root-owned folders), and the honest work advances.
    Positive control: a by-name lookup with that PATH runs the planted git."""
    if again_as_root(request):
        return
    log = tmp_path / "planted-ran"
    folder = _planted_path(tmp_path, log)
    path = f"{folder}:{os.environ['PATH']}"
    subprocess.run(["git", "--version"], env={"PATH": path}, capture_output=True, check=True)
    assert "git --version" in log.read_text()  # the control: it runs when looked up by name
    log.write_text("")
    a = arena("honest")
    a.extra_env = {"PATH": path}
    run = a.session()
    assert run.outcome == "Advanced", run.out
    assert log.read_text() == "", "plan-runner ran a planted program: " + log.read_text()[:500]
    a.assert_all_well(run)


@needs_root
def test_the_trusted_path_leaves_out_every_folder_others_can_write(tmp_path, request):
    """The folder on PATH that others can write is dropped, with why; sticky /tmp as an entry too; a root-owned
    0755 folder is kept."""
    if again_as_root(request):
        return
    log = tmp_path / "log"
    folder = _planted_path(tmp_path, log)
    safe = tmp_path / "safe"
    safe.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    found = tools.resolve(f"{folder}:/tmp:{safe}:/usr/bin", check_code=False)
    kept = found.path.split(":")
    assert str(folder) not in kept and "/tmp" not in kept and str(safe) in kept
    assert found.git == "/usr/bin/git" and any(str(folder) in d for d in found.dropped)


def test_removals_and_reads_never_go_through_a_link(tmp_path):
    """A link to the judge's folder inside the agent's tree: removing the tree removes the link, not what it
    points to; a read through a linked folder gets nothing, and `plan-runner logs` shows nothing of a
    transcript that is a link (positive control: the same file, copied in, is shown)."""
    from runner.drivers.cli.transcripts import render_dir

    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "config").write_text("AUTHORIZATION: basic ghs_secret\n")
    area = tmp_path / "area"
    (area / "work" / "sub").mkdir(parents=True)
    (area / "work" / "sub" / "out").symlink_to(judge, target_is_directory=True)
    (area / "work" / "linked").symlink_to(judge, target_is_directory=True)
    assert fsafe.read_bytes(area / "work" / "linked" / "config", below=area, limit=1000) is None
    assert fsafe.read_bytes(judge / "config", below=tmp_path, limit=1000) is not None  # control
    fsafe.remove(area / "work", below=area)
    assert not (area / "work").exists() and (judge / "config").exists()
    logs = tmp_path / "logs"
    logs.mkdir()
    line = '{"type": "assistant", "message": {"content": [{"type": "text", "text": "JUDGE-ONLY-TEXT"}]}}\n'
    (judge / "stream.jsonl").write_text(line)
    (logs / "claude-stream.jsonl").symlink_to(judge / "stream.jsonl")
    assert "JUDGE-ONLY-TEXT" not in "\n".join(render_dir(logs))
    (logs / "claude-stream.jsonl").unlink()
    (logs / "claude-stream.jsonl").write_text(line)
    assert "JUDGE-ONLY-TEXT" in "\n".join(render_dir(logs))
