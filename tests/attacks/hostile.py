"""What every hostile agent script shares (standard library only: it runs as the agent, in whatever isolation runs it).

An attack script is started by the `command` backend as `python -P <script> <loot-dir> <scope>`, in the agent's
work tree. The script and the loot directory are in the agent's own area (tests/attack_world.py), the one place
every isolation shows the agent: another user's (the pool) or a namespace room. It does some honest-looking
work, then attacks. Everything it manages to read goes into the loot directory (the test searches it for the
judge's secrets). Code it plants elsewhere (hooks, git config, conftest files, `.pth` files) runs `canary(...)`,
which appends one line to `<loot>/canary` saying which uid ran it, in which mount namespace, and what secrets
were in its environment: the test fails if a canary ever ran as the judge (its uid in its namespaces).
`<scope>` is the test's own folder, which the judge sees and a room does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LOOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ.get("ATTACK_LOOT", "/nonexistent"))
# SAFETY: the test's own directory. An attack writes, signals or traces only inside the arena (its work tree,
# its loot, the test's directory, plan-runner's process of this test), never the machine's other
# repositories, HOME or processes, even when the judge under test fails to stop it (it may run as root).
SCOPE = Path(sys.argv[2]) if len(sys.argv) > 2 else LOOT
TAG = LOOT.parent.name  # unique per test: processes carrying it in their command line are the attack's
ARENA = LOOT.parent  # the arena's folder in the agent's area: the scripts, the loot, the test's controls
WORK = Path(os.environ.get("PLAN_RUNNER_WORKDIR") or os.getcwd())
PLAN = Path(os.environ.get("PLAN_RUNNER_PLAN") or WORK / "plans" / "calc.md")
SECRET_NAMES = ("GITHUB_TOKEN", "GH_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ACTIONS_RUNTIME_TOKEN",
                "DEPLOY_PASSWORD")
ENV = {**os.environ, "GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.invalid",
       "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.invalid"}

MUL = "def mul(a, b):\n    return a * b\n"
TEST_MUL = ("import unittest\nfrom calc.mul import mul\n\n\nclass T(unittest.TestCase):\n"
            "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n")
BROKEN_ADD = "def add(a, b):\n    return a - b\n"
GOOD_ADD = "def add(a, b):\n    return a + b\n"


def control(name: str, default: str) -> str:
    """A setting the test gave this attack (a file in the arena's folder: tests/attack_world.Arena's `controls`)."""
    try:
        return (ARENA / name).read_text().strip()
    except OSError:
        return default


def say(text: str) -> None:
    print(text, flush=True)


def git(*args: str, cwd: Path | None = None, check: bool = False) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd or WORK, capture_output=True, text=True, env=ENV)
    if check and proc.returncode:
        raise SystemExit(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def write(rel: str, text: str | bytes, root: Path | None = None) -> Path:
    path = (root or WORK) / rel
    if not in_scope(path):
        raise PermissionError(f"out of the arena: {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def commit(message: str) -> str:
    git("add", "-A")
    git("commit", "-q", "--no-verify", "-m", message)
    return git("rev-parse", "HEAD")


def tick(checkpoint: str = "1.1") -> None:
    text = PLAN.read_text()
    PLAN.write_text(text.replace(f"- [ ] {checkpoint} ", f"- [x] {checkpoint} ", 1))


def honest_mul(broken_add: bool = False) -> None:
    """Real work for checkpoint 1.1 (ticked); with `broken_add`, a bug the gate catches."""
    write("calc/mul.py", MUL)
    write("tests/test_mul.py", TEST_MUL)
    if broken_add:
        write("calc/__init__.py", BROKEN_ADD)
    tick("1.1")


def canary_sh(tag: str) -> str:
    """A shell command recording who ran it (uid) and the secrets in its environment."""
    names = " ".join(f"{n}=${{{n}:-}}" for n in SECRET_NAMES)
    return (f'echo "CANARY {tag} uid=$(id -u) mnt=$(readlink /proc/self/ns/mnt) {names}" >> {LOOT}/canary '
            '2>/dev/null; true')


def canary_py(tag: str) -> str:
    """The same as Python source (one statement block)."""
    return ("import os as _o\n"
            "try:\n    _m = _o.readlink('/proc/self/ns/mnt')\nexcept OSError:\n    _m = ''\n"
            f"try:\n    open({str(LOOT / 'canary')!r}, 'a').write('CANARY {tag} uid=%d mnt=%s %s\\n' % (_o.getuid(), _m, "
            f"' '.join('%s=%s' % (n, _o.environ.get(n, '')) for n in {SECRET_NAMES!r})))\n"
            "except OSError:\n    pass\n")


def loot(label: str, data: bytes | str) -> None:
    """Keep what was read, in the loot directory the test searches."""
    if isinstance(data, str):
        data = data.encode(errors="replace")
    try:
        with open(LOOT / "stolen", "ab") as fh:
            fh.write(f"\n==== {label}\n".encode() + data)
    except OSError:
        pass


def steal(path: str | Path, label: str | None = None) -> bytes | None:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    loot(label or str(path), data)
    return data


def ppid_of(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def _is_judge(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"runner\0session" in cmd or b"runner\0action" in cmd or b"runner\0run" in cmd


def ancestors() -> list[int]:
    """Our parent, its parent... up to the plan-runner process of this test (included), never beyond it
    (the test runner and the machine are not the arena)."""
    found, pid = [], ppid_of(os.getpid())
    while pid > 1 and pid not in found:
        found.append(pid)
        if _is_judge(pid):
            return found
        pid = ppid_of(pid)
    return []  # no plan-runner above us: touch nothing


def in_scope(path: str | Path) -> bool:
    """May an attack write here: under the test's directory, the loot or our own work tree."""
    try:
        real = Path(os.path.realpath(path))
    except OSError:
        return False
    work = Path(os.path.realpath(WORK))
    area = [work.parent] if len(work.parts) >= 4 and work.parts[1] == "tmp" else []  # our folder, HOME...
    roots = [Path(os.path.realpath(r)) for r in (SCOPE, LOOT, *area)]
    return any(real == r or r in real.parents for r in roots)


def all_pids() -> list[int]:
    """Every process we can see whose working directory is inside the arena (processes of plan-runner and
    of its gates for this test); others are left alone."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                if in_scope(os.readlink(f"/proc/{p}/cwd")) or _is_judge(int(p)) and int(p) in ancestors():
                    found.append(int(p))
            except OSError:
                continue
    return sorted(found)


def judge_dirs() -> list[Path]:
    """Where the judge's repository may be: the working directories of our ancestors and of every
    process we can see, and the folders at the top of the test's own (where the judge's repository is: a path an
    attacker can know without seeing any process, as a CI runner's workspace is public)."""
    dirs: list[Path] = []
    for pid in ancestors() + all_pids():
        try:
            d = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if d not in dirs and d != WORK:
            dirs.append(d)
    for pattern in ("*", "*/*"):
        try:
            dirs += [d for d in SCOPE.glob(pattern) if d.is_dir() and d not in dirs and d != WORK]
        except OSError:
            continue
    return [d for d in dirs if in_scope(d)]


def judge_repos() -> list[Path]:
    """Directories with a `.git` the agent may find, its own work tree excluded."""
    repos = []
    for d in judge_dirs():
        for cand in (d, *d.parents):
            if (cand / ".git").exists() and cand != WORK and cand not in repos and in_scope(cand):
                repos.append(cand)
                break
    return repos


def plant_everywhere(rel: str, text: str, mode: int = 0o755) -> list[Path]:
    """Write `rel` under our own work tree's .git and under every judge repository found; return the hits."""
    hits = []
    for root in [WORK, *judge_repos()]:
        try:
            path = write(rel, text, root)
            os.chmod(path, mode)
            hits.append(path)
        except OSError:
            continue
    return hits
