"""Tokens of plan-runner's session prompts, per backend and session kind (docs/real-model.md).

    python benchmarks/prompt_tokens.py [--model qwen-1.5b] [--show KIND]

Renders real prompts from real plan and evidence records (the e2e world's plan, a user-written world's, a Claude
Code and a Codex plan, a plan with two stages, gates and a verify) for delivery, fix-gates and fix-error, plus the
built-in agent's system prompt, and counts each with a model's own tokenizer (`tests/servers/llama/count_tokens.mjs`,
vocabulary only). One line per prompt: tokens, characters, name. To compare two commits, run it in a checkout of
each with this file and tests/real_model_world*.py copied in (the plans then are the same).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.adapters.render.prompts import PromptContext, render_prompt  # noqa: E402
try:
    from runner.backends.anthropic import backend as anthropic_agent  # noqa: E402
except ImportError:  # a commit before the backends became packages, for a before/after comparison
    from runner.backends import anthropic_agent  # type: ignore[no-redef]  # noqa: E402
from runner.core.actions import RunSession, SessionKind  # noqa: E402
from runner.core.evidence import CommitInfo, Evidence, ExitKind, GateResult, SessionSignals  # noqa: E402
from runner.core.planfile import parse_plan  # noqa: E402

NOW = datetime(2026, 12, 6, tzinfo=timezone.utc)
UNITTEST_TAIL = """\
======================================================================
FAIL: test_shout (tests.test_textutil.TextTest.test_shout)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/plan-runner-gates-x1/tests/test_textutil.py", line 8, in test_shout
    self.assertEqual(shout('hi'), 'HI!')
AssertionError: 'hi!' != 'HI!'
- hi!
+ HI!

----------------------------------------------------------------------
Ran 2 tests in 0.001s

FAILED (failures=1)
"""
STUCK = ('stuck (repeated_error): the same call failed 3 times in a row with the same error and no change to the work '
         'tree: edit_file {"new_string": "return a + b", "old_string": "return a-b", "path": "calc.py"}: old_string '
         "was not found in 'calc.py'")


def _plans() -> dict[str, tuple[str, str]]:
    from tests.real_model_world import GATE, PLAN, SETUP
    from tests.real_model_worlds import WORLDS, plan_text
    e2e = PLAN.format(model="qwen-1.5b", stall="5m", time_limit="25m", gate=GATE, setup=SETUP, max_sessions=2,
                      attempts=2, advisor="")
    user = plan_text(WORLDS["bugfix"], "qwen-1.5b")
    two = plan_text(WORLDS["two-checkpoints"], "qwen-1.5b")
    hello = ("---\nagent:\n  backend: {b}\ngates:\n  - name: tests\n    run: python3 -m pytest -q\n---\n# Hello\n\n"
             "## Stage 1: Greeting <!-- sessions: 2 -->\n\nAdd a hello.py that prints a greeting.\n\n"
             "- [ ] 1.1 hello.py prints hello\n")
    auth = (ROOT / "tests" / "unit" / "test_prompts.py").read_text().split('PLAN_TEXT = """\\\n', 1)[1].split('"""', 1)[0]
    return {
        "e2e world (anthropic)": (e2e, "plans/fix.md"),
        "user world bugfix (anthropic)": (user, "plans/work.md"),
        "user world two checkpoints (anthropic)": (two, "plans/work.md"),
        "hello (claude-code)": (hello.format(b="claude-code"), "plans/hello.md"),
        "hello (codex)": (hello.format(b="codex"), "plans/hello.md"),
        "auth, 2 stages (claude-code)": (auth.replace("backend: script", "backend: claude-code"), "plans/add-auth.md"),
    }


def _evidence(plan_id: str, checkpoint: str, **fields: object) -> Evidence:
    base: dict[str, object] = dict(plan_id=plan_id, session_number=1, session_kind="delivery", started_at=NOW,
                                   observed_at=NOW, base_sha="a" * 40, head_sha="b" * 40, next_checkpoint=checkpoint,
                                   signals=SessionSignals(backend="anthropic", exit_kind=ExitKind.FINISHED, exit_code=0))
    base.update(fields)
    return Evidence.model_validate(base)


def prompts() -> dict[str, str]:
    out = {"built-in agent's system prompt": anthropic_agent.SYSTEM_PROMPT}
    for name, (text, path) in _plans().items():
        plan = parse_plan(text, path)
        checkpoint = plan.next_checkpoint()
        assert checkpoint is not None
        handoff = path.replace(".md", ".handoff.md")
        ctx = PromptContext(plan=plan, plan_text=text, handoff_path=handoff, session_number=1)
        out[f"{name}: delivery"] = render_prompt(RunSession(kind=SessionKind.DELIVERY, checkpoint=checkpoint.id,
                                                            reason="next"), ctx)
        red = _evidence(plan.id, checkpoint.id, commits=(CommitInfo(sha="c" * 40, summary="fix", files=("x.py",)),),
                        gates=(GateResult(name=plan.config.gates[0].name, passed=False, exit_code=1,
                                          output_tail=UNITTEST_TAIL, reran=True),))
        ctx = PromptContext(plan=plan, plan_text=text, handoff_path=handoff, session_number=2, last_evidence=red)
        out[f"{name}: fix-gates"] = render_prompt(RunSession(kind=SessionKind.FIX_GATES, checkpoint=checkpoint.id,
                                                             reason="red"), ctx)
        crashed = _evidence(plan.id, checkpoint.id, signals=SessionSignals(
            backend="anthropic", exit_kind=ExitKind.CRASHED, error=STUCK))
        ctx = PromptContext(plan=plan, plan_text=text, handoff_path=handoff, session_number=2, last_evidence=crashed)
        out[f"{name}: fix-error"] = render_prompt(RunSession(kind=SessionKind.FIX_ERROR, checkpoint=checkpoint.id,
                                                             reason="error"), ctx)
    return out


def count(texts: dict[str, str], model: str) -> dict[str, int]:
    from tests.servers.llama import SERVER_DIR, ensure_runtime, model_path
    ensure_runtime()
    weights = model_path(model)
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for n, text in enumerate(texts.values()):
            f = Path(tmp) / f"{n}.txt"
            f.write_text(text)
            files.append(str(f))
        done = subprocess.run(["node", str(SERVER_DIR / "count_tokens.mjs"), "--model", str(weights), *files],
                              cwd=SERVER_DIR, capture_output=True, text=True, check=True, timeout=600)
    counts = [int(line.split(" ", 1)[0]) for line in done.stdout.splitlines()]
    return dict(zip(texts, counts, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen-1.5b", help="whose tokenizer (default qwen-1.5b)")
    parser.add_argument("--show", help="print the prompts whose name contains this text")
    args = parser.parse_args(argv)
    texts = prompts()
    if args.show:
        for name, text in texts.items():
            if args.show in name:
                print(f"===== {name}\n{text}")
        return 0
    for name, tokens in count(texts, args.model).items():
        print(f"{tokens:6d} {len(texts[name]):6d}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
