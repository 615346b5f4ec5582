"""The job's voice within GitHub's limits: a step summary never over 1 MiB (past it the runner drops the whole
summary), cut at a line with an open code fence closed and a note; `::debug::` lines only with the runner's debug
logging on (RUNNER_DEBUG=1, which ACTIONS_STEP_DEBUG turns on), secrets redacted."""

from __future__ import annotations

import io

from runner.adapters.action_io import SUMMARY_LIMIT, Reporter, cap_summary


def test_a_summary_over_the_limit_is_cut_to_fit_with_a_note(tmp_path):
    path = tmp_path / "summary"
    path.write_text("x" * 1000 + "\n")  # an earlier write of the same step
    rep = Reporter({"GITHUB_STEP_SUMMARY": str(path)}, io.StringIO())
    body = "# report\n\n```text\n" + "gate output é\n" * 200_000 + "```\n"
    rep.write_summary(body)
    data = path.read_bytes()
    assert len(data) <= SUMMARY_LIMIT and len(data) > SUMMARY_LIMIT - 200
    text = data.decode("utf-8")
    assert text.rstrip().endswith("and in this job's log.")
    assert sum(1 for line in text.splitlines() if line.startswith("```")) % 2 == 0  # the fence was closed
    rep.write_summary("more")  # a full file takes nothing more
    assert len(path.read_bytes()) <= SUMMARY_LIMIT


def test_a_summary_that_fits_is_written_whole():
    assert cap_summary("short\n", 100) == "short\n"
    assert cap_summary("é" * 10, 5) == ""  # no room even for the note: nothing rather than an overflow


def test_debug_lines_only_when_the_runner_debugs_and_never_with_a_secret():
    out = io.StringIO()
    Reporter({"ANTHROPIC_API_KEY": "sk-ant-secret-value-123456"}, out).debug("quiet")
    assert out.getvalue() == ""
    for env in ({"RUNNER_DEBUG": "1"}, {"ACTIONS_STEP_DEBUG": "true"}):
        out = io.StringIO()
        Reporter({**env, "ANTHROPIC_API_KEY": "sk-ant-secret-value-123456"}, out).debug(
            "key sk-ant-secret-value-123456 seen")
        assert out.getvalue().startswith("::debug::key ") and "sk-ant-secret-value-123456" not in out.getvalue()
