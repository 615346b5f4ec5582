"""Models differ; outcomes must not.

The same objective is driven through the built-in agent by scripted model
personalities (served over real HTTP by the scripted Messages server, in a real
git repository): one that claims it is done and did nothing, one that says
nothing, one that only sets a stop reason, one that writes a confident summary
after every tool call failed, and one that spins on the same failing call. Each
session's signals come from the backend, its evidence from the real repository
and gates (`collect_evidence`), and the outcome from `classify`. Whatever the
model says, the outcome follows the evidence; a diligent personality is the
control that shows the same harness does reach Advanced.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import git
import pytest

from runner.core.actions import Outcome, Verdict
from runner.adapters.judge.collect import SessionScene, collect_evidence, handoff_path_of
from runner.core.evidence import Evidence, ExitKind, SessionSignals
from runner.core.outcome import classify
from runner.core.planfile import parse_plan
from tests.agent_helpers import fast_backend, make_request
from tests.servers.messages import MessagesServer, Turn, reply, tool_use

pytestmark = pytest.mark.integration

PLAN = """\
---
agent:
  backend: anthropic
gates:
  - name: plan-present
    run: test -f plans/greet.md
---
# Greet

## Stage 1: Greet <!-- sessions: 1 -->
- [ ] 1.1 Add hello.py
"""
PLAN_PATH = "plans/greet.md"
FLIP = {"path": PLAN_PATH, "old_string": "- [ ] 1.1", "new_string": "- [x] 1.1"}


def _run(tmp_path: Path, *turns: Turn) -> tuple[SessionSignals, Evidence, Verdict]:
    """One session of the built-in agent on a real repository, then evidence and verdict from the world."""
    workdir = tmp_path / "repo"
    repo = git.Repo.init(workdir, initial_branch="main")
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "Base")
        cfg.set_value("user", "email", "base@example.com")
    (workdir / "plans").mkdir()
    (workdir / PLAN_PATH).write_text(PLAN)
    repo.index.add([PLAN_PATH])
    base_sha = repo.index.commit("base").hexsha
    repo.close()
    plan = parse_plan(PLAN, PLAN_PATH)
    started = datetime.now(timezone.utc)
    with MessagesServer() as srv:
        srv.enqueue(*turns)
        request = make_request(tmp_path, srv.url)
        signals = fast_backend().run(request)
        assert srv.pending == 0, "every scripted turn must have been asked for"
    scene = SessionScene(repo=workdir, plan=plan, plan_text=PLAN, base_sha=base_sha, handoff_path=handoff_path_of(plan),
                         started_at=started, session_number=1, session_kind="delivery", checkpoint="1.1")
    evidence = collect_evidence(scene, signals, env=request.env, observed_at=datetime.now(timezone.utc))
    return signals, evidence, classify(evidence)


def test_diligent_model_advances(tmp_path: Path) -> None:
    """Control: a model that writes, ticks and commits is Advanced, so the harness can tell work from talk."""
    signals, evidence, verdict = _run(
        tmp_path,
        reply(tool_use("write_file", {"path": "hello.py", "content": "print('hello')\n"})),
        reply(tool_use("edit_file", FLIP)),
        reply(tool_use("run_shell", {"command": "git add -A && git commit -qm 'Add hello.py'"})),
        reply("Added hello.py."),
    )
    assert signals.exit_kind is ExitKind.FINISHED and signals.tool_failures == 0
    assert len(evidence.work_commits) == 1
    assert verdict.outcome is Outcome.ADVANCED and verdict.advanced == ("1.1",)


def test_claims_done_without_doing_anything(tmp_path: Path) -> None:
    """(a) "Done, all tests pass" with no tool call: the hint says done, the evidence says NoProgress."""
    signals, evidence, verdict = _run(tmp_path, reply("All done! Checkpoint 1.1 is complete and all tests pass."))
    assert signals.hints.claimed_done is True and "all tests pass" in signals.hints.claims
    assert signals.hints.empty_plan is True
    assert signals.exit_kind is ExitKind.FINISHED and (signals.tool_calls, signals.tool_failures) == (0, 0)
    assert evidence.commits == () and evidence.flips == ()
    assert verdict.outcome is Outcome.NO_PROGRESS
    assert any("claimed it was done" in r for r in verdict.reasons)


def test_ticks_the_box_and_claims_done(tmp_path: Path) -> None:
    """(a') Ticking the checkbox in a tracker-only commit is a claim, not work: the flip is rejected."""
    signals, evidence, verdict = _run(
        tmp_path,
        reply(tool_use("edit_file", FLIP)),
        reply(tool_use("run_shell", {"command": "git commit -qam 'Tick 1.1'"})),
        reply("Checkpoint 1.1 is done."),
    )
    assert signals.hints.claimed_done is True and signals.tool_failures == 0
    assert len(evidence.commits) == 1 and evidence.work_commits == ()
    assert verdict.outcome is Outcome.NO_PROGRESS and verdict.advanced == ()
    assert verdict.rejected_flips == ("1.1: no work commits back it",)


def test_empty_answer(tmp_path: Path) -> None:
    """(b) An empty plan / empty text: nothing claimed, nothing done, the same NoProgress."""
    signals, evidence, verdict = _run(tmp_path, reply())
    assert evidence.commits == ()
    assert signals.hints.empty_output is True and signals.hints.empty_plan is True
    assert signals.hints.final_text == "" and signals.hints.claimed_done is None
    assert signals.exit_kind is ExitKind.FINISHED and signals.output_bytes == 0
    assert verdict.outcome is Outcome.NO_PROGRESS


@pytest.mark.parametrize("stop_reason", ["max_tokens", "refusal"])
def test_only_a_stop_reason(tmp_path: Path, stop_reason: str) -> None:
    """(c) A model that only sets a stop reason: the reason is a hint; the loop ends; NoProgress."""
    signals, evidence, verdict = _run(tmp_path, reply(stop_reason=stop_reason))
    assert evidence.commits == ()
    assert signals.hints.stop_reason == stop_reason
    assert signals.exit_kind is ExitKind.FINISHED and signals.tool_calls == 0
    assert verdict.outcome is Outcome.NO_PROGRESS


def test_confident_summary_after_every_call_failed(tmp_path: Path) -> None:
    """(d) Every tool call failed, then "implemented, all tests pass": failures == calls, all_failed, NoProgress."""
    signals, evidence, verdict = _run(
        tmp_path,
        reply(tool_use("read_file", {"path": "src/app.py"})),
        reply(tool_use("run_shell", {"command": "cat tests/test_hello.py"})),
        reply(tool_use("write_file", {"path": "../hello.py", "content": "print(1)"})),
        reply("I implemented hello.py and all tests pass. Checkpoint 1.1 is complete."),
    )
    assert signals.hints.claimed_done is True and "all tests pass" in signals.hints.claims
    assert signals.tool_calls == 3 and signals.tool_failures == signals.tool_calls
    assert signals.exit_kind is ExitKind.FINISHED
    assert not (tmp_path / "hello.py").exists() and evidence.commits == ()
    assert verdict.outcome is Outcome.NO_PROGRESS and verdict.all_failed is True


def test_spins_on_the_same_failing_call(tmp_path: Path) -> None:
    """(e) The same call failing with the same error three times, nothing changed between, named once, then three
    times again: CRASHED, then AgentError."""
    call = tool_use("run_shell", {"command": "python3 -c 'import hello'"})
    signals, evidence, verdict = _run(tmp_path, reply(call), reply("Let me try that again.", call), reply(call),
                                      *(reply(call) for _ in range(3)))
    assert evidence.commits == ()
    assert signals.exit_kind is ExitKind.CRASHED
    assert (signals.error or "").startswith("stuck (repeated_error): the same call failed 3 times")
    assert "run_shell" in (signals.error or "")
    assert (signals.tool_calls, signals.tool_failures) == (6, 6)
    assert verdict.outcome is Outcome.AGENT_ERROR and verdict.fingerprint
    assert "stuck (repeated_error)" in " ".join(verdict.reasons)
    assert verdict.all_failed is True


def test_outcome_never_follows_the_claim(tmp_path: Path) -> None:
    """Across every talking personality, none that did no work is Advanced or Progress."""
    talkers = [
        (reply("Done."),),
        (reply("Everything is finished and ready for review.", stop_reason="end_turn"),),
        (reply(tool_use("list_files", {})), reply("Complete: all tests pass.")),
    ]
    for i, turns in enumerate(talkers):
        _, _, verdict = _run(tmp_path / str(i), *turns)
        assert verdict.outcome is Outcome.NO_PROGRESS, turns
