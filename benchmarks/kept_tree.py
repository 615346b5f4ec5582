"""The kept gates' tree proven before reuse (runner.adapters.sandbox.kept_tree.prune): how long the proof of an
unchanged tree of N files takes, listed by three GNU finds side by side (what a session does on a 2-core
machine), by one find, and by the walk in Python (the fallback where there is no find; how every tree was
listed before), with the floor of the same run: one bare `find -printf "%s"` over the tree (an lstat of each
entry and nothing else; `%i` alone needs none, the folder's listing holds the inode). Rounds go round-robin over the listers (a machine that slows down mid-run slows all
alike); each figure is the median (min-max) over the rounds, and the peak of Python's allocations
(tracemalloc) during one proof.

    python -m benchmarks.kept_tree [--files 50000] [--rounds 7] [--json out.json]

No root needed: the tree is the caller's own, in a temporary folder removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from runner.adapters.sandbox import kept_tree


def build(root: Path, files: int) -> None:
    """A checkout's shape: folders of 500 files each, as benchmarks.overhead_pair's repositories."""
    for i in range(files):
        d = root / "tree" / f"d{i // 500:03d}"
        if i % 500 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:05d}.txt").write_text(f"file {i}\n")


def prove(root: Path, trash: Path, entries: dict, lister: str, *, traced: bool = False) -> tuple[float, float]:
    """One proof of the unchanged tree with `lister`: seconds, and the peak of Python's allocations (MB)."""
    saved = (list(kept_tree._find), kept_tree._SPLIT_FROM)
    if lister == "python":
        kept_tree._find[:] = [None]
    elif lister == "find x1":
        kept_tree._SPLIT_FROM = 1 << 62
    record = dict(entries)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    tfd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if traced:
            tracemalloc.start()
        t = time.perf_counter()
        gone = kept_tree.prune(fd, record, tfd, limit=1000)
        took = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1] / 2**20 if traced else 0.0
    finally:
        if traced:
            tracemalloc.stop()
        os.close(fd)
        os.close(tfd)
        kept_tree._find[:], kept_tree._SPLIT_FROM = saved
    if gone or os.listdir(trash):
        raise SystemExit(f"benchmarks.kept_tree: the {lister} proof moved entries of an unchanged tree: {sorted(gone)[:5]}")
    return took, peak


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=50000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    find = kept_tree._find_program()
    listers = (["find x3", "find x1"] if find else []) + ["python"]
    top = Path(tempfile.mkdtemp(prefix="plan-runner-kept-tree-"))
    try:
        root, trash = top / "tree", top / "trash"
        root.mkdir()
        trash.mkdir()
        build(root, a.files)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
        try:
            entries = kept_tree.record(fd, None)
            kept_tree.settle(top_fd, kept_tree.newest_ctime(entries))  # (its probe file beside the tree)
        finally:
            os.close(fd)
            os.close(top_fd)
        times: dict[str, list[float]] = {name: [] for name in [*listers, "floor: find -printf %s"]}
        for _ in range(a.rounds):
            for name in listers:
                times[name].append(prove(root, trash, entries, name)[0])
            if find:
                t = time.perf_counter()
                subprocess.run([find, ".", "-xdev", "-printf", "%s\\n"], cwd=root, stdout=subprocess.DEVNULL, check=True)
                times["floor: find -printf %s"].append(time.perf_counter() - t)
        peaks = {name: prove(root, trash, entries, name, traced=True)[1] for name in listers}
    finally:
        shutil.rmtree(top, ignore_errors=True)
    rows = {name: {"median_s": round(statistics.median(v), 4), "min_s": round(min(v), 4), "max_s": round(max(v), 4),
                   "peak_traced_mb": round(peaks[name], 1) if name in peaks else None}
            for name, v in times.items() if v}
    print(f"proof of an unchanged kept tree of {a.files:,} files ({len(entries):,} entries), {a.rounds} rounds, "
          f"{os.cpu_count()} CPUs")
    for name, r in rows.items():
        peak = f"  python peak {r['peak_traced_mb']:.1f} MB" if r["peak_traced_mb"] is not None else ""
        print(f"  {name:24s} {r['median_s']:.3f} s ({r['min_s']:.3f}-{r['max_s']:.3f}){peak}")
    if a.json:
        a.json.write_text(json.dumps({"files": a.files, "entries": len(entries), "rows": rows}, indent=2) + "\n",
                          encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
