"""2b. An agent that streams Claude Code stream-json: how fast and how lean plan-runner reads it.

A generator child prints realistic stream-json (init, assistant text and tool
uses with usage, tool results of a few KB, a final `result` line) until SIZE
bytes. Measured in a fresh child process each (clean peak memory):

* `bare`: a `json.loads` loop over the same lines, in memory: the speed limit;
* `supervise`: `runner.adapters.sandbox.supervise.supervise` reading the generator through a pipe,
  `json.loads` per line in `on_line` (what every stream backend sits on);
* `parser`: the same, with the Claude Code stream-json parser from
  `runner.backends.claude_code.streamjson` in `on_line`, when that module exists.

Run as `python -m benchmarks.stream MODE SIZE` (prints one JSON line) or through run.py.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from pathlib import Path

SESSION = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
COST = 1.2345


def _lines() -> list[str]:
    """One turn of a session: about 10 KB of stream-json."""
    usage = {"input_tokens": 1200, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 24000,
             "output_tokens": 180, "service_tier": "standard"}
    out = []
    for i in range(3):
        tool_id = f"toolu_01ABCDEF{i:06d}"
        out.append(json.dumps({"type": "assistant", "session_id": SESSION, "parent_tool_use_id": None, "message": {
            "id": f"msg_01XYZ{i:06d}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Running the tests to see what fails. " * 4},
                        {"type": "tool_use", "id": tool_id, "name": "Bash",
                         "input": {"command": "python -m pytest -q tests/test_app.py", "description": "run tests"}}],
            "stop_reason": None, "usage": usage}}))
        result = "\n".join(f"tests/test_app.py::test_case_{k} PASSED [{k}%]" for k in range(60))
        out.append(json.dumps({"type": "user", "session_id": SESSION, "parent_tool_use_id": None, "message": {
            "role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": result,
                                         "is_error": False}]}}))
    return out


def _final() -> str:
    return json.dumps({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1234567,
                       "num_turns": 999, "result": "Done.", "session_id": SESSION, "total_cost_usd": COST,
                       "usage": {"input_tokens": 123, "output_tokens": 456}})


def generate(size: int) -> None:
    """The agent: stream-json on stdout until `size` bytes, then the final result line."""
    init = json.dumps({"type": "system", "subtype": "init", "session_id": SESSION, "model": "claude-sonnet-4-5",
                       "tools": ["Bash", "Read", "Edit"], "cwd": "/work"}) + "\n"
    block = ("\n".join(_lines()) + "\n").encode()
    out = sys.stdout.buffer
    out.write(init.encode())
    written = len(init)
    rng = random.Random(7)
    n = 0
    while True:
        # A tool result that differs in every turn (a diff, a log), so the stream compresses like a
        # real one (a few times), not like one turn repeated (hundreds of times).
        n += 1
        varying = (json.dumps({"type": "user", "session_id": SESSION, "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_01VAR{n:09d}", "is_error": False,
             "content": rng.randbytes(768).hex()}]}}) + "\n").encode()
        if written + len(block) + len(varying) > size:
            break
        out.write(block)
        out.write(varying)
        written += len(block) + len(varying)
    out.write((_final() + "\n").encode())
    out.flush()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(mode: str, size: int) -> dict:
    idle = _rss_mb()
    if mode in ("bare", "parser_mem"):
        # The same bytes, in memory: a bare json.loads loop, or the StreamJsonParser alone.
        lines = [line.encode() for line in _lines()]
        per = sum(len(line) + 1 for line in lines)
        rounds = max(1, size // per)
        handle = _parser() if mode == "parser_mem" else None
        texts = [line.decode() for line in lines]
        started = time.perf_counter()
        if handle is None:
            for _ in range(rounds):
                for line in lines:
                    json.loads(line)
            last = json.loads(_final())
        else:
            for _ in range(rounds):
                for text in texts:
                    handle(text)
            handle(_final())
            last = getattr(handle, "final", None)
        seconds = time.perf_counter() - started
        total = rounds * per
    else:
        from runner.adapters.sandbox.supervise import supervise

        handle = _parser() if mode == "parser" else None
        seen = {"n": 0, "last": None}

        def on_line(line: str, ctl) -> None:
            seen["n"] += 1
            if handle is not None:
                handle(line)
            else:
                seen["last"] = json.loads(line)

        argv = [sys.executable, "-m", "benchmarks.stream", "generate", str(size)]
        started = time.perf_counter()
        result = supervise(argv, cwd=Path(__file__).resolve().parent.parent, env=_env(), stall_s=60,
                           time_limit_s=3600, on_line=on_line)
        seconds = time.perf_counter() - started
        total = result.output_bytes
        last = seen["last"] if handle is None else getattr(handle, "final", None)
    right = isinstance(last, dict) and last.get("type") == "result" and last.get("total_cost_usd") == COST
    return {"mode": mode, "bytes": total, "seconds": round(seconds, 3), "mb_s": round(total / 2**20 / seconds, 1),
            "idle_rss_mb": round(idle, 1), "peak_rss_mb": round(_rss_mb(), 1), "final_result_right": right}


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "SYSTEMROOT")}


class _Parser:
    """`StreamJsonParser.feed` per line, as the claude-code backend calls it; the signals at the end."""

    def __init__(self) -> None:
        from runner.backends.claude_code.streamjson import StreamJsonParser

        self.parser = StreamJsonParser()
        self.final = None

    def __call__(self, line: str) -> None:
        self.parser.feed(line)
        self.final = self.parser.result


def _parser() -> _Parser:
    return _Parser()


def bench_stream(workdir: Path, size: int) -> dict:
    from benchmarks.common import ROOT, child_env, run_child

    env = child_env()
    rows = {}
    modes = ("bare", "parser_mem", "supervise", "parser") if _has_parser() else ("bare", "supervise")
    for mode in modes:
        run = run_child([sys.executable, "-m", "benchmarks.stream", mode, str(size)], cwd=ROOT, env=env, timeout_s=900)
        if run.returncode != 0:
            raise RuntimeError(f"stream {mode} failed:\n{run.stderr[-3000:]}")
        rows[mode] = {**json.loads(run.stdout.strip().splitlines()[-1]), "tree_peak_rss_mb": round(run.maxrss_mb, 1)}
    best = rows.get("parser") or rows["supervise"]
    # The target compares parsing with a bare json.loads loop over the same bytes: both in memory.
    # The end-to-end rows (through a pipe from a producer process on the same 2 cores) are context.
    ratio = (rows.get("parser_mem") or best)["mb_s"] / rows["bare"]["mb_s"]
    extra = best["peak_rss_mb"] - best["idle_rss_mb"]
    out = {
        "measured": True,
        "parser": "measured" if "parser" in rows else "not measured yet: runner/backends/claude_code/streamjson.py does not exist",
        "bytes": size,
        "bare_mb_s": rows["bare"]["mb_s"],
        "supervise_mb_s": rows["supervise"]["mb_s"],
        "parser_mb_s": rows["parser"]["mb_s"] if "parser" in rows else None,
        "parser_mem_mb_s": rows["parser_mem"]["mb_s"] if "parser_mem" in rows else None,
        "speed_ratio": round(ratio, 2),
        "extra_rss_mb": round(extra, 1),
        "final_result_right": best["final_result_right"],
        "rows": rows,
        "table": [("bare_mb_s", "stream: bare json.loads loop, MB/s"),
                  ("supervise_mb_s", "stream: supervise + json.loads per line, MB/s"),
                  ("parser_mem_mb_s", "stream: StreamJsonParser over the same bytes, MB/s"),
                  ("parser_mb_s", "stream: supervise + StreamJsonParser (pipe, producer), MB/s"),
                  ("speed_ratio", "stream: parser speed vs bare json.loads, same bytes (>= 0.5)"),
                  ("extra_rss_mb", "stream: parser peak RSS above idle, MB"),
                  ("final_result_right", "stream: final result line parsed")],
        "targets": {"speed_ratio": {"met": ratio >= 0.5}, "extra_rss_mb": {"met": extra <= 100},
                    "final_result_right": {"met": best["final_result_right"]}},
    }
    return out


def _has_parser() -> bool:
    import importlib.util

    return importlib.util.find_spec("runner.backends.claude_code.streamjson") is not None


if __name__ == "__main__":
    if sys.argv[1] == "generate":
        generate(int(sys.argv[2]))
    else:
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
