"""What `setup:` costs a session on a real third-party project (issue 27): humanize 4.12.3's sdist from PyPI,
checked by sha256, with its own test suite. Times, per session, the fresh checkout plus:

* `fresh`: set-up run on every session (no `cache:`): `python3 -m venv .venv` and `pip install -e .[tests]`
  from a local wheelhouse (downloads are made once, before timing);
* `first`: the first session with `cache: [.venv]`: set-up built from the base commit, archived, the judged
  commit checked out again and the cache restored onto it;
* `cached`: a later session: the cache restored;

against `tests`: its test suite run directly in a set-up checkout (`.venv/bin/python -m pytest -q`).
Not isolated (the judge's own user), so the agent's user's chown of the tree is not in the figures.

    python -m benchmarks.setup_cost [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from runner.adapters.judge.setup import run_setup
from runner.adapters.sandbox.identity import Identity
from runner.core.plan import SetupConfig

SDIST = "humanize-4.12.3.tar.gz"
SHA256 = "8430be3a615106fdfceb0b2c1b41c4c98c6b0fc5cc59663a5539b111dd325fb0"
# hatch-vcs writes src/humanize/_version.py (git-ignored) during the editable install: the gates need it too,
# so it is cached with the venv (a restore brings back only what `cache:` names)
CACHE = (".venv", "src/humanize/_version.py")
WHEELS = ("freezegun", "pytest", "pytest-cov", "hatchling", "hatch-vcs", "editables")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def fetch(top: Path) -> tuple[Path, Path]:
    wheels = top / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), *WHEELS], check=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "humanize",
                    "--find-links", str(wheels), "-d", str(top), "humanize==4.12.3"], check=True)
    sdist = top / SDIST
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"{SDIST}: sha256 {digest}, expected {SHA256}")
    return sdist, wheels


def project(top: Path, sdist: Path) -> tuple[Path, str, str]:
    with tarfile.open(sdist) as tar:
        tar.extractall(top, filter="data") if sys.version_info >= (3, 12) else tar.extractall(top)  # noqa: S202
    repo = top / "humanize-4.12.3"
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "humanize 4.12.3")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nan agent's edit\n")
    git(repo, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "-am", "agent")
    return repo, base, git(repo, "rev-parse", "HEAD").strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="pr-setup-cost-"))
    try:
        sdist, wheels = fetch(top)
        repo, base, judged = project(top, sdist)
        place = top / "gates"

        def checkout(sha: str) -> Path:
            shutil.rmtree(place, ignore_errors=True)
            place.mkdir()
            subprocess.run(f"git -C {repo} archive {sha} | tar -x -C {place}", shell=True, check=True)
            return place
        run = ("python3 -m venv .venv",
               f".venv/bin/pip install -q --no-index --find-links {wheels} -e .[tests]")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(top)}
        figures: dict[str, list[float]] = {"fresh": [], "first": [], "cached": [], "tests": []}
        for i in range(args.repeat):
            for kind in ("fresh", "first", "cached"):
                cache = top / f"cache-{i}"
                if kind == "first":
                    shutil.rmtree(cache, ignore_errors=True)
                started = time.perf_counter()
                workdir = checkout(judged)
                cfg = SetupConfig(run=run, cache=() if kind == "fresh" else CACHE, key=("pyproject.toml",))
                failed = run_setup(cfg, sha=judged, repo=repo, workdir=workdir, env=env, identity=Identity(),
                                   cache_dir=cache, trusted_sha=base, checkout=checkout)
                figures[kind].append(time.perf_counter() - started)
                if failed:
                    raise SystemExit(f"set-up failed: {failed[0].error}\n{failed[0].output_tail}")
            started = time.perf_counter()
            done = subprocess.run([str(place / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                                  cwd=place, capture_output=True, text=True)
            figures["tests"].append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(done.stdout[-2000:])
        print(f"humanize 4.12.3 (sha256 {SHA256[:16]}...), {args.repeat} runs, median seconds:")
        for kind, values in figures.items():
            print(f"  {kind:7s} {statistics.median(values):7.2f}   (min {min(values):.2f}, max {max(values):.2f})")
        print("  last test run:", done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
