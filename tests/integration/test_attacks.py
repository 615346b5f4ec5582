"""Hostile agents against a real plan-runner: each test runs `plan-runner session --json` with the `command`
backend running one attack script of tests/attacks/, and asserts the attack's EFFECT is prevented (SPEC 4b).
The harness and its checks are in tests/attack_world.py; docs/security.md maps each test to its invariant."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tests.attack_world import CREDITED, Arena, arena  # noqa: F401 - the fixture
from tests.reliability_world import fold_ledger, git, ledger

pytestmark = pytest.mark.integration


def test_an_honest_agent_is_credited_in_the_arena(arena):
    """Control: the harness can credit real work (an honest command agent is Advanced, its work on the remote),
    so the attack tests below fail for the attack, not for a broken arena."""
    a = arena("honest")
    run = a.session()
    assert run.outcome == "Advanced", (run.out, run.proc.stderr[-2000:])
    assert run.isolation and not run.isolation.startswith("no isolation"), run.proc.stderr[-2000:]  # isolated
    assert git(a.bare, "show", "refs/heads/plan-runner/calc:calc/mul.py").startswith("def mul")
    a.assert_all_well()


# --- the attacks measured in issue 10 ------------------------------------------------------------------------


def test_reading_the_judges_environment_through_proc_gets_no_secret(arena):
    """The agent reading /proc/<pid>/environ and cmdline of plan-runner (its ancestor) and of every process
    finds no GitHub token and no other secret of the job."""
    a = arena("proc_environ")
    a.session()
    assert (a.loot / "stolen").exists()  # the attack did run and read what it could
    a.assert_all_well()


def test_the_agent_environment_holds_no_other_backends_credentials(arena):
    """A `command` agent's own environment has neither the GitHub token nor the Anthropic/OpenAI keys."""
    a = arena("env_dump")
    a.session()
    a.assert_all_well()


def test_global_git_config_planted_by_the_agent_never_runs_in_the_judge(arena):
    """fsmonitor, hooksPath, pager, filters, textconv, sshCommand and a push URL rewrite written to the
    agent's ~/.gitconfig never run under plan-runner, and the judge's push still reaches the real remote."""
    a = arena("global_gitconfig")
    run = a.session()
    a.assert_all_well()
    evil = a.loot / "evil.git"
    assert not git(evil, "for-each-ref", check=False), "the judge pushed to the agent's repository"
    if run.outcome in CREDITED:
        assert a.remote_work_head()


def test_a_conftest_that_plants_hooks_when_the_gate_runs_gets_nothing(arena):
    """A committed conftest.py run by the gate cannot read the judge's secrets, nor plant hooks or fsmonitor
    that later run inside plan-runner's git commands."""
    a = arena("conftest_hooks")
    run = a.session()
    assert a.canaries(), "the gate never ran the conftest"
    a.assert_all_well(run)


def test_a_setsid_daemon_is_gone_before_the_judge_runs_git_or_gates(arena):
    """A daemon that called setsid and keeps planting hooks and breaking code after the agent exits is
    killed before any git command or gate of plan-runner's: no hook runs, the verdict is honest."""
    a = arena("setsid_daemon")
    run = a.session()
    a.assert_all_well(run)


def test_commondir_pointing_at_a_doctored_git_dir_is_not_honoured(arena):
    """`.git/commondir` aimed at a copy of `.git` whose config runs the agent's code is never followed by the
    judge's git."""
    a = arena("commondir")
    run = a.session()
    a.assert_all_well(run)
    assert run.outcome in CREDITED + ("NeedsHuman",), run.out


def test_the_agent_cannot_edit_plan_runners_installed_templates(arena, tmp_path):
    """plan-runner's own code and templates (found through its environment) are not writable by the agent:
    no jinja2 injection runs in the judge and the templates are unchanged."""
    code = tmp_path / "judge-code"
    shutil.copytree(Path(__file__).resolve().parents[2] / "runner", code / "runner",
                    ignore=shutil.ignore_patterns("__pycache__"))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (code / "runner/templates").glob("*.j2")}
    a = arena("template_edit")
    a.extra_env = {"PYTHONPATH": str(code)}
    a.session()
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (code / "runner/templates").glob("*.j2")}
    assert after == before, "the agent edited plan-runner's templates"
    a.assert_all_well()


def _second_session_is_not_credited(a: Arena) -> None:
    first = a.session()
    assert first.outcome == "Advanced", first.out
    second = a.session()
    a.assert_all_well(second)
    assert second.outcome not in CREDITED, second.out
    assert not any(g.get("cached") and g["passed"] for g in second.out["gates"]), second.out["gates"]


def test_a_forged_gate_cache_gives_no_false_advanced(arena):
    """Green results copied onto the agent's broken tree in the gate cache are never believed: the gate
    really runs, is red, and the session is not credited."""
    a = arena("forged_gate_cache")
    _second_session_is_not_credited(a)


def test_poisoned_bytecode_in_the_ignored_pycache_gives_no_false_advanced(arena):
    """A broken `add` with a good `.pyc` stamped to match it in the ignored __pycache__: the gate judges the
    committed source (red), not the agent's cache."""
    a = arena("pyc_poison")
    run = a.session()
    a.assert_all_well(run)
    assert run.outcome not in CREDITED, run.out


def test_an_ignored_skip_all_conftest_gives_no_false_advanced(arena):
    """A conftest.py listed in .gitignore and never committed, that skips every test, is not there when the
    gate runs: red, not credited."""
    a = arena("ignored_conftest")
    run = a.session()
    a.assert_all_well(run)
    assert run.outcome not in CREDITED, run.out


def test_verify_is_not_fooled_by_poisoned_bytecode(arena):
    """A checkpoint's `verify:` runs on the committed source: a wrong `mul` hidden behind a good `.pyc`
    fails it and the tick is rejected."""
    verify = f"{__import__('sys').executable} -c 'from calc.mul import mul; assert mul(2, 3) == 6'"
    a = arena("verify_pyc", verify=verify)
    run = a.session()
    a.assert_all_well(run)
    assert run.outcome != "Advanced", run.out  # Progress at most: work was done, the checkpoint was not
    assert any(f.startswith("1.1") for f in run.out["rejected_flips"]), run.out
    assert "- [ ] 1.1" in git(a.bare, "show", "refs/heads/plan-runner/calc:plans/calc.md")


def test_a_replace_ref_cannot_forge_the_ledger(arena):
    """`git replace` of the state branch's head by a forged 'finished' ledger: the judge neither reads nor
    pushes the forgery; the ledger on the remote is the real one and the plan goes on."""
    a = arena("replace_ledger")
    a.session()
    a.assert_all_well()
    for where in (a.repo, a.bare):
        assert not any(e.get("reason") == "forged" for e in ledger(where)), where
        assert fold_ledger(where).sessions == 1
    assert not git(a.bare, "for-each-ref", "refs/replace/", check=False)


def test_a_rewritten_history_is_never_force_pushed(arena):
    """A session that resets away the credited commit of the session before: the remote keeps every credited
    commit, the rewrite is not credited."""
    a = arena("history_rewrite")
    first = a.session()
    assert first.outcome == "Advanced", first.out
    credited = a.remote_work_head()
    second = a.session()
    a.assert_all_well(second)
    head = a.remote_work_head()
    assert head and git(a.bare, "cat-file", "-t", credited) == "commit"
    assert credited in git(a.bare, "rev-list", head).split(), "the credited commit is gone from the work branch"
    assert second.outcome not in CREDITED, second.out


def test_work_on_another_branch_is_not_credited_unless_it_is_pushed(arena):
    """Work committed on another branch: either it is what was judged and pushed on the work branch, or the
    session is not credited."""
    a = arena("other_branch")
    run = a.session()
    a.assert_all_well(run)
    if run.outcome in CREDITED:
        assert git(a.bare, "show", "refs/heads/plan-runner/calc:calc/mul.py", check=False).startswith("def mul"), \
            "credited, but the pushed work branch does not hold the work"


def test_killing_the_judge_after_a_tick_does_not_skip_verify(arena):
    """An agent that ticks a checkpoint and SIGKILLs plan-runner cannot: the session finishes, the failing
    `verify:` runs, and the tick is not credited then or in the next session."""
    verify = f"{__import__('sys').executable} -c 'from calc.mul import mul; assert mul(2, 3) == 7'"
    a = arena("tick_then_kill", verify=verify)
    first = a.session()
    second = a.session()
    a.assert_all_well(second)
    assert any(f.startswith("1.1") for f in first.out["rejected_flips"]), first.out  # verify ran, failed
    for run in (first, second):
        assert run.outcome != "Advanced", run.out
    assert "- [ ] 1.1" in git(a.bare, "show", "refs/heads/plan-runner/calc:plans/calc.md", check=False)


def test_writing_to_the_judges_stdout_through_proc_reaches_nothing(arena):
    """Writes to /proc/<plan-runner>/fd/1 and fd/2 never reach plan-runner's output (the job log)."""
    a = arena("proc_fd")
    run = a.session()
    assert "FDWRITE" not in run.proc.stdout and "FDWRITE" not in run.proc.stderr
    a.assert_all_well(run)


def test_the_agent_cannot_write_the_runners_command_files(arena):
    """$GITHUB_ENV, $GITHUB_PATH, $GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY (found in the judge's environment)
    are not written by the agent."""
    a = arena("command_files")
    a.session()
    a.assert_all_well()


def test_a_symlinked_transcripts_folder_does_not_make_the_judge_write_outside(arena):
    """Transcripts and gate-cache paths replaced by symlinks into the agent's folder: the judge writes
    nothing there."""
    a = arena("transcripts_symlink")
    a.session()
    a.session()
    outside = a.loot / "outside"
    assert not any(outside.iterdir()), [p.name for p in outside.iterdir()]
    a.assert_all_well()


def test_an_invalid_utf8_file_name_neither_crashes_nor_lets_a_workflow_through(arena):
    """A file name that is not UTF-8 next to a new workflow: no crash in this session or the next, and the
    workflow file never reaches the remote."""
    a = arena("bad_names")
    a.session()
    a.session()
    a.assert_all_well()
    for ref in git(a.bare, "for-each-ref", "--format=%(refname)").splitlines():
        names = git(a.bare, "ls-tree", "-r", "--name-only", ref)
        assert ".github/workflows/evil.yml" not in names, ref

