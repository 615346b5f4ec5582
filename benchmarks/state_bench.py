"""6. State: what a session costs as a plan's past grows, as its transcripts pile up, on the network, with
many plans at once, and with a big work tree.

* ledger: `plan-runner session` (child process) on plans whose state already holds 10 / 1,000 / 10,000
  ledger entries (with the stored snapshot a session writes), round-robin; baseline in the same run: the
  10,000-entry ledger without a snapshot (every entry parsed and folded, as every session did before);
* transcripts: 60 sessions in a row (12 in --quick) of a Claude Code stand-in that streams 6 MB of
  stream-json per session and commits; overhead and peak RSS of the first sessions vs the last ones;
* (every session runs with `isolation: none`: these figures are the state's, section 1 and
  benchmarks/isolation.py measure isolation)
* network: git processes and network git operations (fetch, push, ls-remote) of one dispatching session
  on the Actions path (the GitHub test server as dispatcher), and of one tick over 50 plans, counted by a
  `git` wrapper on PATH;
* concurrent: 20 plans in one repository, one session job each in its own clone, all at once;
* work tree: session overhead with 200 vs 50,000 files in the work tree (same 100-commit history).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.common import child_env, median, run_child
from benchmarks.overhead import SCRIPT as WORK_SCRIPT
from benchmarks.repos import build_repo, git
from runner.adapters.store.state import ledger_text

TARGET_LEDGER_RATIO = 1.3
TARGET_TRANSCRIPT_RATIO = 1.3
TARGET_TRANSCRIPT_RSS_MB = 60
TARGET_SESSION_NET_OPS = 2  # plus the dispatch call
TARGET_TICK_FETCHES = 1
NETWORK = {"fetch", "push", "ls-remote", "clone", "pull"}


def _plan(script: Path, *, backend: str = "script", extra: str = "", checkpoints: int = 2) -> str:
    agent = (f"{{backend: script, script: {script}, stall_minutes: 30s, time_limit_minutes: 5m}}" if backend == "script"
             else f"{{backend: claude-code, executable: {script}, stall_minutes: 30s, time_limit_minutes: 5m}}")
    boxes = "\n".join(f"- [ ] 1.{i} Step {i}" for i in range(1, checkpoints + 1))
    return f"""---
agent: {agent}
gates:
  - name: trivial
    run: "true"
budget:
  max_sessions: 100000
  max_cost_usd: 1000000{extra}
---
# Bench

## Stage 1: Work <!-- sessions: 3 -->
{boxes}
"""


def _session(repo: Path, plan_id: str, env: dict[str, str], expect: tuple[str, ...] = ("Advanced",)) -> dict:
    run = run_child([sys.executable, "-m", "runner", "session", f"plans/{plan_id}.md", "--json"], cwd=repo, env=env,
                    timeout_s=900)
    if run.returncode != 0:
        raise RuntimeError(f"plan-runner session failed ({run.returncode}):\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout)
    if result["outcome"] not in expect:
        raise RuntimeError(f"expected {expect}, got {result['outcome']}: {result.get('reasons')}")
    evidence = json.loads(git(repo, "show", f"refs/plan-runner/state/{plan_id}:files/last-evidence.json"))
    agent_s = float(evidence["signals"]["duration_s"])
    gates_s = sum(float(g["duration_s"]) for g in result["gates"])
    return {"wall_s": run.wall_s, "overhead_s": run.wall_s - agent_s - gates_s, "agent_s": agent_s,
            "cpu_s": run.cpu_s, "maxrss_mb": run.maxrss_mb}


# --- 1. the plan's past ---------------------------------------------------------------------------------------


def _past(entries: int) -> list:
    """A realistic past of `entries` ledger entries: started, session record (with gates and reasons), dispatch."""
    from runner.core.actions import Blame, Outcome, RunSession, SessionKind
    from runner.core.ledger import Dispatched, GateSummary, SessionRecord, SessionStarted

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out: list = []
    n = 0
    while len(out) < entries + 3:
        n += 1
        at = t0 + timedelta(minutes=10 * n)
        run = RunSession(kind=SessionKind.DELIVERY, checkpoint="1.1", reason="progress: keep delivering")
        out.append(SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint="1.1", started_at=at, base_sha="a" * 40,
                                  job=f"actions:{1000 + n}"))
        out.append(SessionRecord(
            n=n, kind=SessionKind.DELIVERY, checkpoint="1.1", stage=1, started_at=at, finished_at=at + timedelta(minutes=8),
            outcome=Outcome.PROGRESS, blame=Blame.NONE, rule=10, reasons=(f"{n % 7 + 1} commits, no checkpoint flipped",),
            backend="claude-code", tokens=120_000 + n, cost_usd=0.0, base_sha="a" * 40, head_sha="b" * 40,
            work_commits=n % 7 + 1, agent_session_id="0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
            gates=(GateSummary(name="tests", required=True, passed=True, duration_s=12.5),), next_action=run))
        out.append(Dispatched(at=at + timedelta(minutes=9), for_session=n + 1, key=f"plan#{n + 1}", confirmed=True))
    return out[-entries:]  # ends on a dispatch: the next session is due


def _seed(repo: Path, plan_id: str, entries: int, snapshot: bool | str) -> None:
    """`snapshot` True: segments and the snapshot, as a session writes them now; False: no snapshot (every entry
    folded)."""
    from runner.core.policy import fold, snapshot_json
    from runner.adapters.store.state import GitStateStore
    from runner.core.ports import AppendOptions

    past = _past(entries)
    store = GitStateStore(repo, remote=None)
    store.append(plan_id, past, None, options=AppendOptions(snapshot=snapshot_json(fold(past)) if snapshot else None))
    store.close()


def bench_ledger(workdir: Path, sizes: list[int], reps: int) -> dict:
    env = child_env(PLAN_RUNNER_ISOLATION="none")
    script = workdir / "work.yaml"
    script.write_text(WORK_SCRIPT, encoding="utf-8")
    cases = [(size, True) for size in sizes] + [(sizes[-1], False)]
    ids = {case: [f"l{case[0]}-{ {True: 's', False: 'n', 'blob': 'b'}[case[1]] }-{r}" for r in range(reps + 1)]
           for case in cases}
    repo = workdir / "repo-ledger"
    build_repo(repo, 100, {f"plans/{pid}.md": _plan(script) for pids in ids.values() for pid in pids}, env=env)
    for case, pids in ids.items():
        for pid in pids:
            _seed(repo, pid, case[0], case[1])
    for case in cases:
        _session(repo, ids[case][0], env)  # warm-up
    runs: dict = {case: [] for case in cases}
    for r in range(1, reps + 1):
        for case in cases:
            runs[case].append(_session(repo, ids[case][r], env))
    rows = [{"entries": case[0], "snapshot": case[1] is not False, "format": "blob" if case[1] == "blob" else "segments",
             "overhead_median_s": round(median([x["overhead_s"] for x in runs[case]]), 3),
             "cpu_median_s": round(median([x["cpu_s"] for x in runs[case]]), 3),
             "peak_rss_mb": round(max(x["maxrss_mb"] for x in runs[case]), 1)} for case in cases]
    small, big = rows[0], rows[len(sizes) - 1]
    ratio = round(big["overhead_median_s"] / small["overhead_median_s"], 2)
    return {"rows": rows, "ratio": ratio, "cpu_ratio": round(big["cpu_median_s"] / small["cpu_median_s"], 2),
            "targets": {"ratio": {"target": f"<= {TARGET_LEDGER_RATIO} ({big['entries']:,} vs {small['entries']} entries)",
                                  "value": ratio, "met": ratio <= TARGET_LEDGER_RATIO}}}


# --- 2. transcripts piling up ----------------------------------------------------------------------------------


def bench_transcripts(workdir: Path, sessions: int, stream_bytes: int) -> dict:
    from benchmarks.common import STAND_IN_KEY
    from runner.adapters.store.state import DIR_LIMIT

    env = child_env(PLAN_RUNNER_ISOLATION="none", **STAND_IN_KEY)
    stream_py = Path(__file__).resolve().parent / "stream.py"
    fake = workdir / "claude-committing"
    fake.write_text("#!/bin/sh\n"  # a session that streams, then commits one line of work
                    "date +%s%N >> work.log && git add work.log && git commit -q -m work >/dev/null\n"
                    f"exec {sys.executable} {stream_py} generate {stream_bytes}\n", encoding="utf-8")
    fake.chmod(0o755)
    repo = workdir / "repo-transcripts"
    build_repo(repo, 100, {"plans/cc.md": _plan(fake, backend="claude-code")}, env=env)
    done = []
    for _ in range(sessions):
        done.append(_session(repo, "cc", env, expect=("Progress",)))
        git(repo, "checkout", "-q", "main", env=env)
    listing = git(repo, "ls-tree", "-r", "-l", "refs/plan-runner/state/cc:transcripts", env=env)
    kept = sum(int(line.split()[3]) for line in listing.splitlines())
    k = max(1, min(3, sessions // 4))
    first, last = done[:k], done[-k:]
    f_over, l_over = median([x["overhead_s"] for x in first]), median([x["overhead_s"] for x in last])
    ratio = round(l_over / f_over, 2)
    rss = max(x["maxrss_mb"] for x in last)
    return {"sessions": sessions, "stream_bytes": stream_bytes,
            "first_overhead_s": round(f_over, 3), "last_overhead_s": round(l_over, 3), "ratio": ratio,
            "first_peak_rss_mb": round(max(x["maxrss_mb"] for x in first), 1), "last_peak_rss_mb": round(rss, 1),
            "transcripts_kept_bytes": kept, "transcripts_bound_bytes": DIR_LIMIT,
            "targets": {"ratio": {"target": f"<= {TARGET_TRANSCRIPT_RATIO}", "value": ratio,
                                  "met": ratio <= TARGET_TRANSCRIPT_RATIO},
                        "peak_rss_mb": {"target": f"< {TARGET_TRANSCRIPT_RSS_MB}", "value": round(rss, 1),
                                        "met": rss < TARGET_TRANSCRIPT_RSS_MB}}}


# --- 3. network round trips --------------------------------------------------------------------------------------


@contextmanager
def counting_git(workdir: Path):
    """Every git process started while inside is logged (argv), through a wrapper first on PATH."""
    real = shutil.which("git")
    wrapper_dir = workdir / "git-wrapper"
    wrapper_dir.mkdir(exist_ok=True)
    log = workdir / "git-calls.log"
    (wrapper_dir / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec {real} "$@"\n')
    (wrapper_dir / "git").chmod(0o755)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{wrapper_dir}{os.pathsep}{old}"
    calls: list[str] = []
    try:
        yield calls
    finally:
        os.environ["PATH"] = old
        calls += log.read_text().splitlines() if log.exists() else []


def _verb(argv: str) -> str:
    parts = argv.split()
    i = 0
    while i < len(parts) and parts[i].startswith("-"):
        i += 2 if parts[i] in ("-c", "-C") else 1
    return parts[i] if i < len(parts) else ""


NET_SCRIPT = """sessions:
  - - write: {path: app/f.py, content: "x = 1\\n"}
    - commit: "Add f"
    - check: "1.1"
    - commit: "Tick 1.1"
  - - write: {path: app/g.py, content: "y = 2\\n"}
    - commit: "Add g"
    - check: "1.2"
    - commit: "Tick 1.2"
"""


def _net(calls: list[str]) -> list[str]:
    """Only what talks to the remote counts (the agent's own clone and its bundle are local copies)."""
    return [c for c in calls if _verb(c) in NETWORK and "origin" in c.split()]


def _two_sessions(workdir: Path, name: str, srv, env: dict[str, str]) -> list[dict]:
    """Session 1 of a plan (started by hand) and session 2 (dispatched by session 1), each counted."""
    from benchmarks.github_calls import TOKEN, _with_origin
    from runner.adapters.github.events import GitHubContext
    from runner.adapters.github.client import GitHubDriver
    from runner.adapters.github.api import RetryPolicy
    from runner.drivers.session import Ports, Workspace
    from runner.adapters.store.state import GitStateStore
    from runner.drivers.session.phases import run_session

    script = workdir / f"{name}.yaml"
    script.write_text(NET_SCRIPT)
    repo = workdir / f"repo-{name}"
    build_repo(repo, 10, {"plans/work.md": _plan(script, checkpoints=3)}, env=env)
    _with_origin(repo, env)
    out = []
    for n in (1, 2):
        with GitHubDriver(GitHubContext.from_env(env), TOKEN, retry=RetryPolicy.fast()) as driver:
            ws = Workspace(repo=repo, plan_path="plans/work.md", env=env, remote="origin")
            (workdir / f"{name}-{n}").mkdir()
            api_before = len(srv.calls)
            with counting_git(workdir / f"{name}-{n}") as calls:
                result = run_session(ws, Ports(store=GitStateStore(repo, remote="origin"), dispatcher=driver,
                                               parker=driver))
        net = _net(calls)
        out.append({"session": n, "status": result.status,
                    "outcome": result.record.outcome.value if result.record else None,
                    "git_processes": len(calls), "network_ops": len(net),
                    "network": [" ".join(c.split()[:4]) for c in net], "api_calls": len(srv.calls) - api_before})
        git(repo, "checkout", "-q", "main", env=env)
    return out


def bench_network(workdir: Path, tick_plans: int) -> dict:
    from benchmarks.github_calls import TOKEN, _env, _plan as gh_plan, _seed_tick_state, _with_origin
    from runner.adapters.action_io import Reporter
    from runner.drivers.actions.tick import mode_tick
    from runner.adapters.github.events import GitHubContext
    from runner.adapters.github.client import GitHubDriver
    from runner.adapters.github.api import RetryPolicy
    from tests.servers.github import GitHubServer

    env_base = child_env(PLAN_RUNNER_ISOLATION="none")
    script = workdir / "net.yaml"
    script.write_text(NET_SCRIPT)
    trepo = workdir / "repo-net-tick"
    build_repo(trepo, 10, {f"plans/tick-{i:02d}.md": gh_plan(script) for i in range(tick_plans)}, env=env_base)
    _with_origin(trepo, env_base)
    due = _seed_tick_state(trepo, datetime.now(timezone.utc), tick_plans)
    with GitHubServer(token=TOKEN) as srv:
        env = {**_env(srv), "PLAN_RUNNER_ISOLATION": "none"}
        # Side by side in one run: the default, and the opt-in that keeps the early pushes (the "before").
        default = _two_sessions(workdir, "net", srv, env)
        early = _two_sessions(workdir, "net-early", srv, {**env, "PLAN_RUNNER_EARLY_PUSH": "1"})
        tenv = {**env, "GITHUB_EVENT_NAME": "schedule", "GITHUB_WORKSPACE": str(trepo)}
        ctx = GitHubContext.from_env(tenv)
        with GitHubDriver(ctx, TOKEN, retry=RetryPolicy.fast()) as driver, open(workdir / "tick.log", "w") as log:
            (workdir / "t").mkdir()
            with counting_git(workdir / "t") as tick_calls:
                tick = mode_tick(ctx, tenv, driver, Reporter(tenv, out=log))
    t_net = _net(tick_calls)
    t_fetch = [c for c in t_net if _verb(c) == "fetch"]
    dispatched = default[1]  # the steady state: a session a plan-runner job dispatched
    return {"sessions": default, "sessions_early_push": early,
            "session_status": dispatched["status"], "session_git_processes": dispatched["git_processes"],
            "session_network_ops": dispatched["network_ops"], "session_network": dispatched["network"],
            "session_api_calls": dispatched["api_calls"],
            "first_session_network_ops": default[0]["network_ops"],
            "early_push_network_ops": [x["network_ops"] for x in early],
            "tick_plans": tick_plans, "tick_due": due, "tick_outcome": tick.outcome,
            "tick_git_processes": len(tick_calls), "tick_fetches": len(t_fetch),
            "tick_pushes": sum(_verb(c) == "push" for c in t_net),
            "targets": {"session_network_ops": {"target": f"<= {TARGET_SESSION_NET_OPS} + dispatch (dispatched session)",
                                                "value": dispatched["network_ops"],
                                                "met": dispatched["network_ops"] <= TARGET_SESSION_NET_OPS},
                        "tick_fetches": {"target": f"{TARGET_TICK_FETCHES}", "value": len(t_fetch),
                                         "met": len(t_fetch) <= TARGET_TICK_FETCHES}}}


# --- 4. many plans at once ------------------------------------------------------------------------------------


def bench_concurrent(workdir: Path, plans: int) -> dict:
    env = child_env(PLAN_RUNNER_ISOLATION="none")
    script = workdir / "work.yaml"
    script.write_text(WORK_SCRIPT, encoding="utf-8")
    seed = workdir / "seed"
    build_repo(seed, 10, {f"plans/c{i:02d}.md": _plan(script) for i in range(plans)}, env=env)
    bare = workdir / "origin.git"
    git(workdir, "init", "-q", "--bare", "-b", "main", str(bare), env=env)
    git(seed, "push", "-q", str(bare), "main", env=env)
    clones = []
    for i in range(plans):
        clone = workdir / f"job{i:02d}"
        git(workdir, "clone", "-q", str(bare), str(clone), env=env)
        clones.append(clone)
    started = datetime.now(timezone.utc)
    with ThreadPoolExecutor(plans) as pool:
        runs = list(pool.map(lambda i: run_child([sys.executable, "-m", "runner", "session", f"plans/c{i:02d}.md",
                                                  "--json"], cwd=clones[i], env=env, timeout_s=900), range(plans)))
    wall = (datetime.now(timezone.utc) - started).total_seconds()
    outcomes = [json.loads(r.stdout).get("outcome") if r.returncode == 0 and r.stdout.strip() else f"exit {r.returncode}"
                for r in runs]
    entries = 0
    lost = 0
    for i in range(plans):
        text = ledger_text(bare, f"refs/plan-runner/state/c{i:02d}")
        kinds = [json.loads(line)["type"] for line in text.splitlines() if line.strip()]
        entries += len(kinds)
        lost += 3 - len(kinds)  # started, session, dispatch
    advanced = outcomes.count("Advanced")
    return {"plans": plans, "advanced": advanced, "outcomes": outcomes, "ledger_entries": entries, "lost": lost,
            "wall_s": round(wall, 1),
            "targets": {"all_advance": {"value": f"{advanced}/{plans}", "met": advanced == plans},
                        "lost": {"value": lost, "met": lost == 0}}}


# --- 5. work tree size -----------------------------------------------------------------------------------------


def bench_work_tree(workdir: Path, sizes: list[int], reps: int) -> dict:
    from benchmarks.overhead import plan_text, run_one

    env = child_env(PLAN_RUNNER_ISOLATION="none")
    script = workdir / "work.yaml"
    script.write_text(WORK_SCRIPT, encoding="utf-8")
    repos = {}
    for files in sizes:
        project = {"app/__init__.py": "", "README.md": "# bench\n"}
        project.update({f"tree/d{i // 500:03d}/f{i:05d}.txt": f"file {i}\n" for i in range(files)})
        project.update({f"plans/bench-{n:02d}.md": plan_text(n, script) for n in range(reps + 1)})
        repo = workdir / f"repo-{files}"
        build_repo(repo, 100, project, env=env)
        run_one(repo, 0, env)
        repos[files] = repo
    runs: dict = {files: [] for files in sizes}
    for n in range(1, reps + 1):
        for files in sizes:
            runs[files].append(run_one(repos[files], n, env))
    rows = [{"files": files, "overhead_median_s": round(median([r["overhead_s"] for r in runs[files]]), 3),
             "cpu_median_s": round(median([r["cpu_s"] for r in runs[files]]), 3)} for files in sizes]
    return {"rows": rows, "ratio": round(rows[-1]["overhead_median_s"] / rows[0]["overhead_median_s"], 2)}


def bench_state(workdir: Path, size: dict) -> dict:
    out = {}
    for name, fn in (("ledger", lambda d: bench_ledger(d, size["ledger_sizes"], size["reps"])),
                     ("transcripts", lambda d: bench_transcripts(d, size["sessions"], size["stream_bytes"])),
                     ("network", lambda d: bench_network(d, size["tick_plans"])),
                     ("concurrent", lambda d: bench_concurrent(d, size["plans"])),
                     ("work_tree", lambda d: bench_work_tree(d, size["tree_files"], size["reps"]))):
        if name not in size.get("only", (name,)):
            continue
        d = workdir / name
        d.mkdir()
        out[name] = fn(d)
    return out
