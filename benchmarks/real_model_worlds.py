"""Credit rates of real small models on plans written the way users write them (docs/real-model.md).

    python benchmarks/real_model_worlds.py [--models qwen-1.5b qwen-0.5b] [--worlds bugfix ...] [--out FILE]
        [--budget pinned|default]

Each world (tests/real_model_worlds.py) with each model: a fresh model server (greedy decoding, one thread), a
real `plan-runner run` with the built-in `anthropic` backend, then a clean clone of the pushed commit checked by
hand. One JSON line per run (to stdout and `--out`): checkpoints credited, sessions and their outcomes, tokens,
seconds, and whether every verdict agrees with the clean clone. `--calls DIR` keeps every model call per run.
`--budget default` writes no `budget:` in the plan, as a user who writes none (max_sessions 60, the stage's attempt
budget `sessions: 2` x slack 2.0 = 4, the circuit breaker as always); `pinned` (the default, the earlier rounds'
tables) pins max_sessions to the stage's 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.real_model_worlds import PINNED, WORLDS, agrees, check_world, make_world, row, run_world  # noqa: E402
from tests.servers.llama import LlamaServer, calls_text, model_path  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen-1.5b", "qwen-0.5b"])
    parser.add_argument("--worlds", nargs="+", default=list(WORLDS), choices=list(WORLDS))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--calls", type=Path, help="a folder for every run's model calls")
    parser.add_argument("--time-limit", default="20m", help="each session's time limit (default 20m)")
    parser.add_argument("--budget", choices=[PINNED, "default"], default=PINNED,
                        help="pin max_sessions to the stage's sessions (default), or write no budget: as a user")
    args = parser.parse_args(argv)
    for model in args.models:
        weights = model_path(model)
        for name in args.worlds:
            world = WORLDS[name]
            with tempfile.TemporaryDirectory(prefix=f"world-{name}-") as tmp:
                started = time.monotonic()
                repo = make_world(Path(tmp), world, model, time_limit=args.time_limit,
                                  budget=PINNED if args.budget == PINNED else None)
                with LlamaServer(weights, max_tokens_cap=1024) as srv:
                    run = run_world(repo, srv.url, timeout_s=3 * 3600)
                    replies = srv.replies()
                check = check_world(Path(tmp), world, run)
                tokens = sum(int(s.get("tokens") or 0) for s in run.sessions)
                result = row(model, world, run, check, tokens, agrees(run, check, world))
                result["calls"] = len(replies)
                result["budget"] = args.budget
                result["sampled_calls"] = sum(1 for r in replies if r.get("temperature"))
                result["wall_seconds"] = round(time.monotonic() - started)
                result["stopped"] = [next((r for r in s.get("reasons", ())), "") for s in run.sessions]
                line = json.dumps(result)
                print(line, flush=True)
                if args.out:
                    with args.out.open("a") as out:
                        out.write(line + "\n")
                if args.calls:
                    args.calls.mkdir(parents=True, exist_ok=True)
                    (args.calls / f"{model}-{name}.txt").write_text(
                        json.dumps(run.sessions, indent=1) + "\n" + run.stderr[-4000:] + "\n" + calls_text(replies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
