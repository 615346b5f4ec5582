"""Plan files: parsing, problems with lines, the tracker, tampering and the schema."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.errors import PlanError, PlanRunnerError
from runner.core.evidence import CheckpointState as S
from runner.core.plan import Plan
from runner.adapters.plan_io import load_plan
from runner.core.planfile import (
    diff_tracker,
    parse_plan,
    parse_tracker,
    plan_id_from_path,
    plan_json_schema,
    protected_changes,
    restore_protected,
    set_checkpoint_state,
    with_tracker,
)
from tests.hypothesis_profiles import examples

PLAN = """\
---
branch: plan-runner/add-auth
base: main
agent:
  backend: claude-code
  model: claude-sonnet-4-5
  stall_minutes: 45s
  time_limit_minutes: 1.5
gates:
  - name: tests
    run: pytest -q
    timeout_minutes: 2h
  - name: health
    http: http://127.0.0.1:8000/health
    required: false
budget:
  slack: 1.5
---
# Add authentication

Some prose about the plan.

## Stage 1: Session store <!-- sessions: 2 -->
- [ ] 1.1 Sessions table with a migration <!-- verify: pytest -q tests/test_sessions.py -->
- [x] 1.2 Login endpoint issues a cookie

## Stage 2: Protect the API <!-- sessions: 3 -->
- [ ] 2.1 Middleware rejects missing cookies
- [ ] 2.2 BLOCKED: needs a decision on token lifetime

## Notes
- [ ] 9.9 a checkbox in notes is free text
"""


def problems_of(text: str, path: str = "plans/p.md") -> list:
    with pytest.raises(PlanError) as info:
        parse_plan(text, path)
    return info.value.problems


def lines_of(text: str) -> set[int]:
    return {p.line for p in problems_of(text)}


def test_parse_full_plan() -> None:
    """A plan in the documented syntax parses into configuration, stages and checkpoint states."""
    plan = parse_plan(PLAN, "plans/add-auth.md")
    assert plan.id == "add-auth" and plan.title == "Add authentication"
    assert plan.work_branch == "plan-runner/add-auth"
    assert plan.config.agent.stall_s == 45 and plan.config.agent.time_limit_s == 90
    assert plan.config.gates[0].timeout_s == 7200 and plan.config.gates[1].kind == "http"
    assert [(s.number, s.title, s.sessions) for s in plan.stages] == [(1, "Session store", 2), (2, "Protect the API", 3)]
    assert [(c.id, c.state) for c in plan.checkpoints] == [("1.1", S.TODO), ("1.2", S.DONE), ("2.1", S.TODO), ("2.2", S.BLOCKED)]
    assert plan.checkpoint("1.1").verify == "pytest -q tests/test_sessions.py"
    assert plan.checkpoint("1.1").title == "Sessions table with a migration"
    assert plan.checkpoint("2.2").blocked_reason == "needs a decision on token lifetime"
    assert plan.checkpoint("1.1").line == 24 and plan.stages[1].line == 27


def test_empty_front_matter_uses_defaults() -> None:
    """`---` twice is a valid front matter meaning every default."""
    plan = parse_plan("---\n---\n## Stage 1: A\n- [ ] 1.1 x\n", "p.md")
    assert plan.config.base == "main" and plan.config.agent.backend == "claude-code"
    assert plan.stages[0].sessions == 1


def test_fenced_code_is_not_structure() -> None:
    """Checkpoint-like lines inside a fenced code block are ignored."""
    text = "---\n---\n## Stage 1: A\n- [ ] 1.1 x\n```\n- [ ] 1.1 example\n## Stage 7\n```\n"
    assert [c.id for c in parse_plan(text, "p.md").checkpoints] == ["1.1"]


def test_blocked_marker_after_title() -> None:
    """`BLOCKED:` after a title keeps the title and records the reason."""
    plan = parse_plan("---\n---\n## Stage 1: A\n- [ ] 1.1 Middleware BLOCKED: which header?\n", "p.md")
    cp = plan.checkpoint("1.1")
    assert (cp.state, cp.title, cp.blocked_reason) == (S.BLOCKED, "Middleware", "which header?")


@pytest.mark.parametrize(
    ("path", "expected"),
    [("plans/add-auth.md", "add-auth"), ("plans/Add Auth!.md", "add-auth"), ("../../etc/x;rm -rf.md", "x-rm-rf"),
     ("plans/v1.2.md", "v1.2"), ("plans/..weird...md", "weird")],
)
def test_plan_id_from_file_stem(path: str, expected: str) -> None:
    """The plan id is the file stem reduced to `[a-z0-9._-]`."""
    assert plan_id_from_path(path) == expected


@pytest.mark.parametrize("bad_id", ["../x", "a b", "x;rm", "", "a..b", "-x"])
def test_explicit_unsafe_plan_id_rejected(bad_id: str) -> None:
    """An explicit plan id with traversal or shell metacharacters is a problem, not a plan."""
    with pytest.raises(PlanError) as info:
        parse_plan("---\n---\n## Stage 1: A\n- [ ] 1.1 x\n", "p.md", plan_id=bad_id)
    assert "plan id" in info.value.problems[0].what


@pytest.mark.parametrize(
    "branch", ["a b", "x..y", "-x", "x/", "x.lock", "a;b", "$(id)", "a//b", ".hidden", "x~1", "a:b", "a\\b", "x."]
)
def test_unsafe_branch_rejected(branch: str) -> None:
    """Branch names that are not safe git refs are reported on the `branch:` line."""
    problems = problems_of(f"---\nbase: main\nbranch: '{branch}'\n---\n## Stage 1: A\n- [ ] 1.1 x\n")
    assert [(p.line, "branch" in p.what) for p in problems] == [(3, True)]


def test_safe_branch_accepted() -> None:
    """An ordinary nested branch name is accepted."""
    plan = parse_plan("---\nbranch: team/feature-1.2_x\n---\n## Stage 1: A\n- [ ] 1.1 x\n", "p.md")
    assert plan.work_branch == "team/feature-1.2_x"


def test_every_problem_reported_at_once() -> None:
    """Front-matter and body problems of one file are all reported, sorted by line."""
    text = (
        "---\n"
        "agent:\n"
        "  stal_minutes: 3\n"  # 3: unknown key
        "  session_tokens: many\n"  # 4: wrong type
        "gates:\n"
        "  - name: t\n"
        "    run: ''\n"  # 7: empty command
        "  - name: t\n"  # 8: duplicate name
        "    http: ftp://x\n"  # 9: bad url
        "---\n"
        "## Stage 1: A <!-- sesions: 2 -->\n"  # 11: misspelt annotation
        "- [ ] 1.1 x <!-- verify: -->\n"  # 12: empty verify
        "- [ ] 2.1 y\n"  # 13: wrong stage prefix
        "- [ ] no id\n"  # 14: no id
        "## Stage 2: B\n"  # 15: no checkpoints
    )
    problems = problems_of(text)
    assert [p.line for p in problems] == [3, 4, 7, 8, 9, 11, 12, 13, 14, 15]
    assert "did you mean `stall_minutes`" in problems[0].fix
    assert "did you mean `<!-- sessions" in problems[5].fix
    assert all(p.file == "plans/p.md" and p.fix for p in problems)


def test_nested_unknown_key_points_at_its_line() -> None:
    """An unknown key inside a gate is reported on that key's line with the gate's keys as the fix."""
    problems = problems_of("---\ngates:\n  - name: t\n    run: x\n    requird: false\n---\n## Stage 1: A\n- [ ] 1.1 x\n")
    assert problems[0].line == 5 and "did you mean `required`" in problems[0].fix


def test_duplicate_yaml_key() -> None:
    """A key written twice is a problem (YAML would silently keep the last)."""
    problems = problems_of("---\nbase: main\nbase: dev\n---\n## Stage 1: A\n- [ ] 1.1 x\n")
    assert [(p.line, "twice" in p.what) for p in problems] == [(3, True)]


def test_yaml_syntax_error_line() -> None:
    """A YAML syntax error carries the file line of the error."""
    problems = problems_of("---\nbase: main\ngates: [\n---\n## Stage 1: A\n- [ ] 1.1 x\n")
    assert problems[0].what.startswith("YAML syntax error") and problems[0].line in (3, 4)


def test_front_matter_not_a_mapping() -> None:
    """A list as front matter is reported, not crashed on."""
    assert lines_of("---\n- a\n- b\n---\n## Stage 1: A\n- [ ] 1.1 x\n") == {2}


def test_agent_env_must_not_carry_github_token() -> None:
    """Naming the GitHub token in `agent.env` is refused."""
    problems = problems_of("---\nagent:\n  env: [MY_VAR, GITHUB_TOKEN]\n---\n## Stage 1: A\n- [ ] 1.1 x\n")
    assert [(p.line, "GITHUB_TOKEN" in p.what) for p in problems] == [(3, True)]


def test_checkpoint_before_first_stage() -> None:
    """A checkpoint above every stage heading is reported."""
    assert 3 in lines_of("---\n---\n- [ ] 1.1 x\n## Stage 1: A\n- [ ] 1.2 y\n")


def test_parse_tracker_ignores_front_matter_validity() -> None:
    """`parse_tracker` reads stages even when the front matter has unknown keys."""
    stages = parse_tracker("---\nnonsense: 1\n---\n## Stage 1: A\n- [x] 1.1 x\n", "p.md")
    assert stages[0].checkpoints[0].state is S.DONE


def test_parse_tracker_reports_problems() -> None:
    """`parse_tracker` raises PlanError for a malformed tracker."""
    with pytest.raises(PlanError):
        parse_tracker("---\n---\n## Stage 1: A\n- [ ] 1.1 x\n- [ ] 1.1 y\n", "p.md")


# --- tracker ---------------------------------------------------------------------------------


def test_with_tracker_takes_states_only() -> None:
    """States come from the head text; configuration, titles and verify from the base."""
    base = parse_plan(PLAN, "plans/add-auth.md")
    head = PLAN.replace("- [ ] 1.1 Sessions", "- [x] 1.1 Sessions").replace("max_sessions", "x").replace(
        "stall_minutes: 45s", "stall_minutes: 999"
    ).replace("- [x] 1.2 Login endpoint issues a cookie", "- [ ] 1.2 Login endpoint BLOCKED: no SMTP")
    merged = with_tracker(base, head)
    assert merged.config == base.config
    assert merged.checkpoint("1.1").state is S.DONE and merged.checkpoint("1.1").verify == base.checkpoint("1.1").verify
    assert merged.checkpoint("1.2").state is S.BLOCKED and merged.checkpoint("1.2").blocked_reason == "no SMTP"


def test_with_tracker_survives_broken_head() -> None:
    """A head whose tracker is mangled keeps base states for what it lost."""
    base = parse_plan(PLAN, "p.md")
    merged = with_tracker(base, "garbage\n- [x] 2.1 stray\n")
    assert merged == base


def test_diff_tracker_reports_flips() -> None:
    """Only checkpoints whose state changed appear, with before and after."""
    base = parse_plan(PLAN, "p.md")
    head = set_checkpoint_state(set_checkpoint_state(PLAN, "1.1", S.DONE), "2.1", S.BLOCKED, "why?")
    flips = diff_tracker(base, with_tracker(base, head))
    assert [(f.checkpoint_id, f.before, f.after) for f in flips] == [("1.1", S.TODO, S.DONE), ("2.1", S.TODO, S.BLOCKED)]


def test_diff_tracker_added_and_removed() -> None:
    """A checkpoint present on one side only flips from or to None."""
    a = parse_plan("---\n---\n## Stage 1: A\n- [ ] 1.1 x\n- [ ] 1.2 y\n", "p.md")
    b = parse_plan("---\n---\n## Stage 1: A\n- [ ] 1.1 x\n- [ ] 1.3 z\n", "p.md")
    assert [(f.checkpoint_id, f.before, f.after) for f in diff_tracker(a, b)] == [("1.2", S.TODO, None), ("1.3", None, S.TODO)]


def test_set_checkpoint_state_round_trip() -> None:
    """TODO -> DONE -> BLOCKED -> TODO restores the text exactly and touches one line."""
    done = set_checkpoint_state(PLAN, "1.1", S.DONE)
    assert [a != b for a, b in zip(PLAN.splitlines(), done.splitlines())].count(True) == 1
    assert "- [x] 1.1 Sessions table with a migration <!-- verify: pytest -q tests/test_sessions.py -->" in done
    blocked = set_checkpoint_state(done, "1.1", S.BLOCKED, "schema unclear")
    assert parse_plan(blocked, "p.md").checkpoint("1.1").blocked_reason == "schema unclear"
    assert set_checkpoint_state(blocked, "1.1", S.TODO) == PLAN


def test_set_checkpoint_state_unblocks_reason_only_line() -> None:
    """Unblocking `2.2 BLOCKED: reason` keeps the reason as the title."""
    text = set_checkpoint_state(PLAN, "2.2", S.DONE)
    assert "- [x] 2.2 needs a decision on token lifetime\n" in text
    assert parse_plan(text, "p.md").checkpoint("2.2").state is S.DONE


def test_set_checkpoint_state_keeps_crlf() -> None:
    """Windows line endings survive a state change."""
    text = PLAN.replace("\n", "\r\n")
    assert set_checkpoint_state(text, "1.1", S.DONE).count("\r\n") == text.count("\r\n")


def test_set_checkpoint_state_unknown_id() -> None:
    """Setting a checkpoint that is not in the text is a user-facing error."""
    with pytest.raises(PlanRunnerError, match="4.4"):
        set_checkpoint_state(PLAN, "4.4", S.DONE)


# --- protected changes -----------------------------------------------------------------------


def test_allowed_changes_are_not_protected() -> None:
    """Checkbox states, BLOCKED markers and free notes are the agent's to change (a checkpoint's title is not: tests/unit/test_planfile_titles.py)."""
    head = set_checkpoint_state(PLAN, "1.1", S.DONE).replace("Some prose", "Agent note.\n\nSome prose")
    head = head.replace("- [ ] 2.1 Middleware rejects missing cookies", "- [ ] 2.1 Middleware rejects missing cookies BLOCKED: which?\n  sub note")
    assert protected_changes(PLAN, head + "\n## Handoff\nnext: 2.1\n", "p.md") == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("  model: claude-sonnet-4-5\n", "  model: claude-opus-4\n", "front matter changed: `agent`"),
        ("    run: pytest -q\n", "    run: 'true'\n", "front matter changed: `gates`"),
        ("base: main\n", "base: main  # comment\n", "comments or formatting"),
        ("## Stage 2: Protect the API", "## Stage 2: Something easier", "stage 2 was renamed"),
        ("<!-- sessions: 3 -->", "<!-- sessions: 9 -->", "`sessions` changed from 3 to 9"),
        ("## Notes\n", "## Stage 3: Extra\n- [ ] 3.1 more\n## Notes\n", "stage 3 ('Extra') was added"),
        ("- [ ] 2.1 Middleware rejects missing cookies\n", "", "checkpoint 2.1 ('Middleware rejects missing cookies') was removed"),
        ("- [ ] 2.1 Middleware", "- [ ] 2.1 Middleware\n- [x] 2.3 Extra credit\n- [ ] 2.1b", "checkpoint 2.3 ('Extra credit') was added"),
        ("- [x] 1.2 Login", "- [x] 1.3 Login", "checkpoint 1.2 was renumbered to 1.3"),
        ("<!-- verify: pytest -q tests/test_sessions.py -->", "<!-- verify: true -->", "checkpoint 1.1 `verify:` changed"),
        ("- [ ] 1.1 Sessions table with a migration <!-- verify: pytest -q tests/test_sessions.py -->\n- [x] 1.2 Login endpoint issues a cookie\n",
         "- [x] 1.2 Login endpoint issues a cookie\n- [ ] 1.1 Sessions table with a migration <!-- verify: pytest -q tests/test_sessions.py -->\n",
         "checkpoints were reordered"),
    ],
)
def test_protected_changes_detected(old: str, new: str, expected: str) -> None:
    """Each kind of structural or configuration edit is reported."""
    assert old in PLAN
    changes = protected_changes(PLAN, PLAN.replace(old, new, 1), "plans/p.md")
    assert any(expected in c for c in changes), changes
    assert all(c.startswith("plans/p.md") for c in changes)


def test_removed_front_matter_is_protected() -> None:
    """Deleting the front matter is tampering."""
    head = PLAN[PLAN.index("# Add") :]
    assert any("front matter" in c for c in protected_changes(PLAN, head, "p.md"))


def test_restore_protected_reverts_tampering_and_keeps_progress() -> None:
    """After restore, nothing protected differs from base while head's states and notes remain."""
    head = (
        set_checkpoint_state(PLAN, "1.1", S.DONE)
        .replace("slack: 1.5", "slack: 9")
        .replace("<!-- sessions: 3 -->", "<!-- sessions: 1 -->\nAgent note under stage 2.")
        .replace("- [ ] 2.1 Middleware rejects missing cookies\n", "")
        .replace("- [x] 1.2 Login endpoint issues a cookie\n", "- [x] 1.2 Login endpoint issues a cookie\n- [ ] 1.7 Invented\n  note on invented\n")
        .replace(" <!-- verify: pytest -q tests/test_sessions.py -->", "")
        .replace("## Stage 2: Protect", "## Stage 3: New\n- [ ] 3.1 new\n## Stage 2: Protect")
    )
    assert len(protected_changes(PLAN, head, "p.md")) >= 5
    restored = restore_protected(PLAN, head)
    assert protected_changes(PLAN, restored, "p.md") == []
    plan = parse_plan(restored, "p.md")
    assert plan.checkpoint("1.1").state is S.DONE and plan.checkpoint("1.1").verify == "pytest -q tests/test_sessions.py"
    assert plan.checkpoint("2.1").state is S.TODO and plan.config.budget.slack == 1.5
    assert "Agent note under stage 2." in restored and "  note on invented" in restored
    assert "1.7 Invented" not in restored and "3.1 new" not in restored


def test_restore_protected_is_identity_without_tampering() -> None:
    """A head with only allowed changes comes back unchanged."""
    head = set_checkpoint_state(PLAN, "2.1", S.DONE).replace("Some prose", "Notes.\nSome prose")
    assert restore_protected(PLAN, head) == head


# --- files -----------------------------------------------------------------------------------


def test_load_plan_reports_non_utf8_line(tmp_path: Path) -> None:
    """A file that is not UTF-8 is a problem on the line of the first bad byte."""
    (tmp_path / "p.md").write_bytes(b"---\n---\n## Stage 1: Caf\xe9\n- [ ] 1.1 x\n")
    with pytest.raises(PlanError) as info:
        load_plan(tmp_path / "p.md", tmp_path)
    assert [(p.file, p.line) for p in info.value.problems] == [("p.md", 3)]


def test_load_plan_rejects_symlink_outside_root(tmp_path: Path) -> None:
    """A plan that is a symlink leaving the repository is refused."""
    repo, outside = tmp_path / "repo", tmp_path / "secret.md"
    (repo / "plans").mkdir(parents=True)
    outside.write_text("---\n---\n## Stage 1: A\n- [ ] 1.1 x\n")
    os.symlink(outside, repo / "plans" / "p.md")
    with pytest.raises(PlanError) as info:
        load_plan(repo / "plans" / "p.md", repo)
    assert "symlink" in info.value.problems[0].what and info.value.problems[0].file == "plans/p.md"


def test_load_plan_follows_symlink_inside_root(tmp_path: Path) -> None:
    """A symlink to a plan inside the repository is fine; the path is repository-relative."""
    (tmp_path / "plans").mkdir()
    (tmp_path / "real.md").write_text("---\n---\n## Stage 1: A\n- [ ] 1.1 x\n")
    os.symlink(tmp_path / "real.md", tmp_path / "plans" / "p.md")
    plan = load_plan(tmp_path / "plans" / "p.md", tmp_path)
    assert (plan.path, plan.id) == ("plans/p.md", "p")


def test_load_plan_missing_file(tmp_path: Path) -> None:
    """A missing file is a PlanError, not an exception from the OS."""
    with pytest.raises(PlanError, match="problem"):
        load_plan(tmp_path / "nope.md", tmp_path)


def test_example_plans_validate() -> None:
    """The example plans shipped in plans/ are valid."""
    root = Path(__file__).resolve().parents[2]
    for name in ("example-httpx-migration.md", "example-local-demo.md"):
        plan = load_plan(root / "plans" / name, root)
        assert plan.stages and plan.config.gates


def test_schema_shows_durations_as_written() -> None:
    """The schema accepts unit strings for durations and shows defaults in minutes."""
    agent = plan_json_schema()["$defs"]["AgentConfig"]["properties"]["stall_minutes"]
    assert agent["default"] == 12 and {a["type"] for a in agent["anyOf"]} == {"number", "string"}


# --- fuzz ------------------------------------------------------------------------------------

_LINES = st.sampled_from(
    ["---", "...", "## Stage 1: A", "## Stage 2 <!-- sessions: 0 -->", "## stage x", "- [ ] 1.1 t", "- [x] 1.2 t <!-- verify: -->",
     "- [ ] 2.1 BLOCKED:", "```", "# T", "## Notes", "base: main", "agent:", "  backend: codex", "gates:", "  - name: g",
     "    run: ''", "    http: x", "branch: a..b", "budget: {slack: .nan}", "  stall_minutes: 9" + "9" * 400, "&a [*a]",
     "x: &a [1]\ny: [*a, *a]", "- [ ] 1.1 <!-- x -->-->", "\t- [ ]", "<!--", "-->"]
)


def _check_parse(text: str) -> None:
    try:
        result = parse_plan(text, "plans/fuzz.md")
    except PlanError as err:
        assert err.problems and all(p.line >= 1 and p.fix for p in err.problems)
        err.render()
    else:
        assert isinstance(result, Plan)


@pytest.mark.timeout(120)
@settings(max_examples=examples(ci=150, thorough=3000))
@given(st.text(max_size=400))
def test_fuzz_arbitrary_text(text: str) -> None:
    """Any text either parses or raises PlanError with located problems."""
    _check_parse(text)


@pytest.mark.timeout(120)
@settings(max_examples=examples(ci=150, thorough=3000))
@given(st.lists(st.one_of(_LINES, st.text(max_size=30)), max_size=25))
def test_fuzz_plan_shaped_text(lines: list[str]) -> None:
    """Plan-shaped text built from real fragments either parses or raises PlanError; tracker helpers never crash."""
    text = "\n".join(lines)
    _check_parse(text)
    _check_parse("---\n" + text)
    base = PLAN
    assert isinstance(protected_changes(base, text, "p.md"), list)
    restored = restore_protected(base, text)
    assert protected_changes(base, restored, "p.md") == []


def test_a_repeated_checkpoint_line_is_dropped_and_its_notes_kept_under_the_previous_line() -> None:
    """Found by the fuzz test: the agent repeats checkpoint 1.2 below 1.1. The repeat is not an item (its id came
    before), so it once stayed as free text under 1.1, where it read as 1.2's first line and renamed it."""
    head = PLAN.replace("- [x] 1.2 Login endpoint issues a cookie\n",
                        "- [x] 1.2 Login endpoint issues a cookie\n- [ ] 1.2 t <!-- verify: -->\nnote kept\n")
    head = head.replace("- [ ] 1.1 Sessions table with a migration <!-- verify: pytest -q tests/test_sessions.py -->\n",
                        "- [x] 1.2 t\n- [ ] 1.1 Sessions table with a migration <!-- verify: pytest -q tests/test_sessions.py -->\n", 1)
    restored = restore_protected(PLAN, head)
    assert protected_changes(PLAN, restored, "p.md") == []
    assert "note kept\n" in restored and "1.2 t" not in restored
