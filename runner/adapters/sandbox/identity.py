"""Who runs untrusted code: the agent, and every gate, `verify:` and `setup:` command.

plan-runner is the judge; the agent and the code it wrote are the defendant (docs/security.md, "The trust boundary, shown by attack"). Whoever runs plan-runner (an
ordinary user, a user with passwordless sudo such as GitHub's hosted `runner`, or root), every untrusted process
runs in a room of kernel namespaces (runner.adapters.sandbox.room, bubblewrap), as plan-runner's own uid (as
root: a uid of its own user namespace, with no capability outside it):

* it sees only the agent's area (writable), the seed store its clone borrows from and the toolchain (read-only),
  and a private TMP and HOME (the room's, removed when the lease ends): not the rest of the home, not the
  judge's repository, `.git/plan-runner` or state, not another plan's area (mount namespace);
* it cannot read the judge's memory or environment, signal or trace it: the judge is not in its PID namespace
  (its /proc shows only the room's own processes);
* nothing outlives a session, by construction (invariant 2): each process runs in a PID namespace of its own,
  started with `--die-with-parent`; when its first process exits, or bwrap or plan-runner dies, the kernel
  kills everything in it, a daemon that `setsid`-ed included;
* it reaches the network only through the allow-list proxy of its phase (network namespace, `network`), and an
  API-key agent never holds its key (the proxy adds it outside).

Where the kernel refuses unprivileged user namespaces (Ubuntu 24.04's AppArmor setting), a user with
passwordless sudo has it lifted for this boot, and the session says what was done; without sudo the session
stops with what, why and how to fix (room.open_room). `isolation: none` (plan) or `--isolation none` runs
untrusted code unconfined, and says so on every session; Actions mode refuses that.

Before the room, root and sudo users ran untrusted code as pooled system users (`plan-runner-agent-*`, made
with `useradd`), with slot locks, a cgroup and a root launcher; nothing creates those users any more
(`plan-runner cleanup` still removes the ones an older version made).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from runner.adapters.sandbox import fsafe, room as rooms, tools
from runner.core.errors import PlanRunnerError

if TYPE_CHECKING:
    from runner.core.network import ModelAccess, Phase

# What a plan's `isolation:` may say. "auto" and "user" (the values of the pooled-user design) both mean the
# room now; "none" runs unconfined.
Isolation = Literal["auto", "user", "none"]
# The pooled users older versions made (plan-runner-agent, plan-runner-agent-u<uid>-<n>): only `cleanup` names them.
USER_PREFIX = "plan-runner-agent"


@dataclass(frozen=True)
class Launch:
    """How to start one untrusted process: `argv` and Popen's extra arguments."""

    argv: list[str]
    popen: dict


@dataclass(frozen=True)
class Identity:
    """The identity untrusted code runs as: plan-runner's own uid, in `room` (None: no isolation)."""

    uid: int | None = None
    gid: int | None = None
    name: str = ""
    room: rooms.Namespaces | None = field(default=None, compare=False, repr=False)
    # the agent areas the session holds (agent_clone.hold_area): root -> its in-use lock's descriptor, closed at the
    # latest when the lease ends
    areas: dict[Path, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def isolated(self) -> bool:
        return self.room is not None

    def describe(self) -> str:
        if self.room is None:
            return "no isolation (isolation: none): the agent runs as plan-runner's own user"
        return self.room.describe()

    def launch(self, argv: Sequence[str], env: dict[str, str], cwd: Path | str) -> Launch:
        """How to start `argv` in `cwd` as this identity with exactly `env` (in a room: its TMP and HOME)."""
        if self.room is None:
            return Launch(list(argv), {"cwd": cwd, "env": dict(env)})
        made = self.room.command(argv, env, cwd, self.room.view_for(Path(cwd), judge_dir("agents")))
        return Launch(made.argv, made.popen)

    @contextmanager
    def network(self, phase: Phase, network: object, access: ModelAccess | None = None,
                refused: list | None = None) -> Iterator[None]:
        """In a room, every process of the block reaches only what the plan's `network:` allows `phase` (and for
        the agent its model, through a credential route: the key stays outside), through an allow-list proxy of
        its own; what it was refused is appended to `refused`. Unconfined: the host's network."""
        if self.room is None:
            yield
            return
        from runner.adapters.netproxy import start_proxy
        from runner.core.network import ModelAccess, allow_list

        access = access if access is not None else ModelAccess()
        routes = access.routes if phase == "agent" else ()
        with start_proxy(allow_list(network, phase, access), routes) as proxy, self.room.behind(proxy):
            try:
                yield
            finally:
                if refused is not None:
                    refused.extend(proxy.refused())

    def remove(self, path: Path) -> None:
        """Delete a tree this identity may have written (links are removed, never followed): its files are
        plan-runner's own user's (a room maps its uid to plan-runner's)."""
        if os.path.lexists(path):
            fsafe.remove(Path(path), below=Path(path).parent)


def _can_sudo() -> bool:
    """Whether plan-runner's user may run `sudo -n` (only to lift a kernel's refusal of user namespaces)."""
    if os.geteuid() == 0:
        return False
    try:
        sudo = tools.resolve(check_code=False).sudo
    except PlanRunnerError:
        return False
    if sudo is None:
        return False
    try:
        return subprocess.run([sudo, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def judge_dir(name: str) -> Path:
    """A directory only the judge may write, under the system temp dir, checked (never a planted link)."""
    base = Path(os.environ.get("PLAN_RUNNER_SANDBOX_ROOT") or tempfile.gettempdir())
    path = base / f"plan-runner-{os.geteuid()}" / name
    for p in (path.parent, path):
        try:
            os.mkdir(p, 0o711)
        except FileExistsError:
            pass
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PlanRunnerError(
                what=f"{p} is not a private directory of plan-runner's user",
                why="another user created it (or a link) first: plan-runner never works in a directory "
                    "someone else controls",
                fix=f"remove {p} (as root if needed) and run again, or set PLAN_RUNNER_SANDBOX_ROOT "
                    "to a directory only you can write")
    return path


@dataclass
class Lease:
    """An identity held for one session; `release` removes what its room made."""

    identity: Identity

    def release(self) -> None:
        while self.identity.areas:
            os.close(self.identity.areas.popitem()[1])
        if self.identity.room is not None:
            self.identity.room.close()


def acquire(isolation: Isolation, *, actions: bool = False, repo: Path | None = None) -> Lease:
    """Take an identity for one session, per the plan's `isolation` setting: a room ("auto", "user"), or none.
    `repo`: the judged repository, which the room never shows (nor a PATH folder in it, nor plan-runner's own
    source tree when that is where plan-runner runs from)."""
    if isolation == "none":
        if actions:
            raise PlanRunnerError(
                what="isolation: none is refused on GitHub Actions",
                why="the agent would run as the job's own user and could read the GitHub token and forge the verdict",
                fix="remove `isolation: none` from the plan; GitHub-hosted runners isolate in kernel namespaces")
        return Lease(Identity())
    return _room_lease(repo)


def _room_lease(repo: Path | None = None) -> Lease:
    """Kernel namespaces (bubblewrap) as plan-runner's own uid, whoever that is."""
    # plan-runner's own code: its `runner` package (never the tree that holds it: a checkout of plan-runner that is
    # the judged repository would show its .git) and its venv
    package = Path(__file__).resolve().parents[2]
    also = [package] + ([Path(os.path.realpath(sys.prefix))] if sys.prefix != sys.base_prefix else [])
    also += [Path(sys.base_prefix), Path(sys.executable)]
    for cli in ("PLAN_RUNNER_CLAUDE", "PLAN_RUNNER_CODEX"):  # the agent CLIs the action installed (or the job names)
        if os.environ.get(cli):
            also.append(Path(os.environ[cli]))
    private = [judge_dir("agents").parent] + ([Path(repo)] if repo is not None else [])
    path_value = os.environ.get("PATH", os.defpath)
    shown = rooms.toolchain(path_value, also, homes=[Path.home()], private=private)
    if not any(package == p or p in package.parents for p in shown):
        shown += (package,)  # plan-runner's package alone, read-only, even inside the judged repository
    named = [p for p in path_value.split(os.pathsep) if p.startswith("/")] + [str(p) for p in also]
    made = rooms.open_room(toolchain_roots=shown, base=judge_dir("rooms"), can_sudo=_can_sudo,
                           sudo=tools.resolve(check_code=False).sudo or "sudo", links=rooms.links_on_the_way(named))
    for trusted in trust_stores(os.environ, private):
        made.show(trusted)
    uid, gid = os.geteuid(), os.getegid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return Lease(Identity(uid=uid, gid=gid, name=name, room=made))


# Variables naming the certificates a client trusts (a company's TLS-inspecting proxy, a gateway's own CA): the
# file (or SSL_CERT_DIR's folder) is shown read-only in the room, or a CLI told to trust it fails every TLS handshake.
TRUST_STORE_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                    "PIP_CERT", "GIT_SSL_CAINFO", "CODEX_CA_CERTIFICATE")


def trust_stores(env: Mapping[str, str], private: Sequence[Path] = ()) -> tuple[Path, ...]:
    """The certificate files and folders `env` names (TRUST_STORE_VARS), resolved; never one in or holding a
    folder of `private` (the judged repository, plan-runner's own folders)."""
    out: list[Path] = []
    for name in TRUST_STORE_VARS:
        value = env.get(name, "")
        if not value.startswith("/"):
            continue
        real = Path(os.path.realpath(value))
        kind = real.is_dir() if name == "SSL_CERT_DIR" else real.is_file()
        hidden = any(real == p or p in real.parents or real in p.parents
                     for p in (Path(os.path.realpath(q)) for q in private))
        if kind and not hidden and real not in out:
            out.append(real)
    return tuple(out)


@contextmanager
def leased(isolation: Isolation, *, actions: bool = False, repo: Path | None = None) -> Iterator[Identity]:
    lease = acquire(isolation, actions=actions, repo=repo)
    try:
        yield lease.identity
    finally:
        lease.release()


def area_key(repo: Path, plan_id: str) -> str:
    """A stable short name for one plan of one repository (the agent's work tree path must not change
    between sessions: Claude Code finds a session to resume by its working directory)."""
    digest = hashlib.sha256(f"{Path(repo).resolve()}\0{plan_id}".encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in plan_id)[:40]
    return f"{safe}-{digest}"
