"""Tests that run plan-runner as users other than the suite's: the shapes plan-runner's users have (an ordinary user
with a 0750 home, with and without passwordless sudo, as GitHub's `runner`; root in a container).

The suite runs as an ordinary user (.ci/run); making another user, or acting as root, takes privilege, so these tests
carry the `sudo_user` marker: they run where the suite's user has passwordless sudo (.ci/run's second step, or a
developer's machine), and every privileged step goes through `sudo -n` (directly when the suite is root).
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUDO: list[str] = [] if os.geteuid() == 0 else ["sudo", "-n"]


def privileged(*argv: str) -> None:
    """One command as root."""
    done = subprocess.run([*SUDO, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"


def make_user(name: str, sudo: bool) -> pwd.struct_passwd:
    """An ordinary user `name` with a 0750 home (like /home/runner: other users cannot enter it), with passwordless
    sudo or without; the suite's checkout and Python opened to it (`open_checkout`)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        privileged("useradd", "--create-home", "--shell", "/bin/sh", name)
    sudoers = f"/etc/sudoers.d/{name}"
    if sudo:
        privileged("sh", "-c", f"printf '%s ALL=(ALL) NOPASSWD:ALL\\n' {name} > {sudoers} && chmod 0440 {sudoers}")
    else:
        privileged("rm", "-f", sudoers)
    entry = pwd.getpwnam(name)
    privileged("chmod", "0750", entry.pw_dir)
    open_checkout()
    return entry


def open_checkout() -> None:
    """The folders above this checkout and the suite's Python made searchable (o+x: others may open what they know
    the name of, never list it; nothing becomes readable or writable that was not), so another user runs the
    suite's plan-runner from it."""
    for target in (Path(os.path.realpath(sys.executable)), Path(sys.executable), ROOT / "runner" / "__init__.py"):
        for folder in target.parents:
            if folder == Path("/"):
                break
            try:
                mode = folder.stat().st_mode
            except OSError:
                continue
            if not mode & 0o001:
                if folder.stat().st_uid == os.geteuid():
                    folder.chmod((mode & 0o7777) | 0o001)
                else:
                    privileged("chmod", "o+x", str(folder))


def as_user(entry: pwd.struct_passwd, argv: list[str], cwd: str | Path, *, env: dict[str, str] | None = None,
            timeout: float = 180, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """`argv` as `entry`, in `cwd` (which the suite's own user may not be able to enter), with exactly `env`
    (default: a PATH with the suite's Python, the user's HOME)."""
    env = env if env is not None else {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": entry.pw_dir,
                                       "LANG": "C.UTF-8"}
    if entry.pw_uid == os.geteuid():
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=stdin)
    if not SUDO:  # root: no sudo needed to become anyone
        return subprocess.run(argv, cwd=cwd, env=env, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                              capture_output=True, text=True, timeout=timeout, stdin=stdin)
    # sudo starts in the caller's folder, which may not be the user's to enter: the shell changes to `cwd` first
    wrapped = [*SUDO, "-u", entry.pw_name, "env", "-i", *(f"{k}={v}" for k, v in env.items()),
               "sh", "-c", 'cd "$0" && exec "$@"', str(cwd), *argv]
    return subprocess.run(wrapped, cwd="/", capture_output=True, text=True, timeout=timeout, stdin=stdin)


def again_as_root(request: pytest.FixtureRequest) -> bool:
    """A test of what holds when plan-runner is root: run where the suite is root, it goes on (False); run as an
    ordinary user with sudo, this very test runs again as root through `sudo -n`, and fails with that run's output if
    it failed there (True: the caller is done)."""
    if os.geteuid() == 0:
        return False
    keep = {k: v for k, v in os.environ.items() if k.startswith(("PLAN_RUNNER_", "PIP_", "LANG", "SSL_", "PATH"))}
    # A temporary folder of its own, not root's shared /tmp/pytest-of-root: pytest removes the older numbered folders
    # there when a run ends, and two root runs at once (two workers, or root's own suite on the same machine) then
    # remove each other's, which fails the run that finds one half gone ("Directory not empty").
    basetemp = Path(tempfile.mkdtemp(prefix="pytest-again-as-root-"))
    try:
        done = subprocess.run([*SUDO, "env", *(f"{k}={v}" for k, v in keep.items()), "HOME=/root",
                               "PYTHONDONTWRITEBYTECODE=1", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"--basetemp={basetemp}", request.node.nodeid],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
    finally:
        subprocess.run([*SUDO, "rm", "-rf", "--", str(basetemp)], capture_output=True)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
    return True
