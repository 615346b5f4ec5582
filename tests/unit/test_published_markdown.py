"""The agent's Markdown is data wherever plan-runner publishes it (issue 22 "text for people", SPEC 4b inv. 6).

Real reports (park issue on GitHub and locally, pull request body, job summary, the body cut to GitHub's
limit) are rendered with hostile text in every field the agent or its gates write: commit subjects, file
names, authors, gate names, gate output, errors, the handoff, hints, tampering lines, checkpoint and stage
titles (the agent edits the plan file), the park reason. They are then parsed with markdown-it-py (a
CommonMark parser; it is in the venv as rich's dependency, used here as a test-only tool), and compared with
the same report rendered from harmless text: the block and inline structure must be the same (no heading,
list, link, image, HTML or table cell from the agent), and the text must hold no bare address, mention,
escape byte or C1 control.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from markdown_it import MarkdownIt

from runner.adapters.github.body import cap_body
from runner.adapters.render.report import (
    Markdown, render_park_issue, render_report, render_summary, render_watch, session_rows,
)
from runner.adapters.render.termreport import to_terminal
from runner.core.actions import Blame, Outcome, SessionKind, Verdict
from runner.core.ledger import SessionRecord, SessionStarted
from runner.core.evidence import CommitInfo, Hints
from runner.core.plan import Checkpoint, Plan, PlanConfig, Stage
from runner.core.policy import Park, RunState
from tests.core_builders import DONE, T0, TODO, evidence, gate, signals

HOSTILE = (
    "# Plan finished\n## All gates green ![ok](https://evil.example/ok.png) [the PR](https://evil.example/pr) "
    "<https://evil.example> https://evil.example www.evil.example mail@evil.example @octocat #12 "
    "<details><summary>open me</summary> <img src=x onerror=alert(1)> <!-- hide\n"
    "\n/plan-runner skip\n\n> quoted\n- list\n1. ordered\n| a | b |\n|---|---|\n"
    "```\nfence\n````\n~~~\n    indented\n**bold** _em_ \\*esc\\* &amp; &lt;b&gt; [ref]: https://evil.example\n"
    "line  \nbreak ::error::forged ##[warning]forged \x1b[31mred\x1b]0;title\x07 \x9b2J \x85 \u202eevil\u202c"
)
HARMLESS = "x"


def _plan(text: str) -> Plan:
    return Plan(path="plans/auth.md", id="auth", config=PlanConfig(),
                stages=(Stage(number=1, title=text, sessions=1, checkpoints=(
                    Checkpoint(id="1.1", title=text, state=DONE), Checkpoint(id="1.2", title=text, state=TODO))),))


def _reports(text: str) -> dict[str, str]:
    plan = _plan(text)
    name = text.replace("\n", "/")
    ev = evidence(
        commits=(CommitInfo(sha="a" * 40, summary=text, author=text, files=(name,)),),
        gates=(gate(name="tests", passed=False, output_tail=text, error=text),),
        handoff=text, tampering=(f"{name}: changed a protected path",),
        signals=signals(error=text, last_tool=text, tool_calls=2, tool_failures=1,
                        hints=Hints(final_text=text, claims=(text,), stop_reason=text, result_subtype=text)),
        next_checkpoint="1.2")
    verdict = Verdict(outcome=Outcome.NO_PROGRESS, blame=Blame.AGENT, rule=7, reasons=(text, f"file {name}"),
                      observed_at=T0 + timedelta(minutes=1), rejected_flips=(f"1.2: {text}",), all_failed=True)
    action = Park(reason=text, details=(text, text))
    report = render_report(plan, RunState(sessions=2, tokens=1234, cost_usd=0.5), title=f"plan-runner parked auth: {text}",
                           verdict=verdict, evidence=ev, reason=action.reason, details=action.details,
                           next_action=action)
    issue = render_park_issue(plan, report, text)
    rows = _rows(text)
    return {
        "report": report,
        "park issue": issue,
        "local park file": render_park_issue(plan, report, text, local=True),
        "summary": render_summary(plan, report, f"auth session 2: {text}"),
        "summary of a message": render_summary(plan, text, text),
        "summary with the sessions timeline": render_summary(plan, report, "auth session 2", rows=rows),
        "watch pull request": render_watch(plan, RunState(sessions=2, tokens=1234), rows, status=Markdown("running"),
                                           next_action=text, links=[("park issue", OURS + "issues/3"), (text, text)],
                                           report=report),
        "capped issue": cap_body(issue + "\n" + "#### Commits\n\n" + ("- filler\n" * 9000), limit=20_000),
    }


OURS = "https://github.example/octo-org/demo/"  # the links plan-runner builds: runs, the park issue


def _rows(text: str) -> list[dict]:
    """Two sessions of a ledger with the agent's text wherever a record carries text (a hostile job name too:
    `link` refuses what is not a plain URL, whatever run_url makes of it)."""
    entries = []
    for n, job in ((1, f"{text} 7"), (2, "8")):  # a job that is no URL path: never a link
        entries.append(SessionStarted(n=n, kind=SessionKind.DELIVERY, checkpoint=text, started_at=T0,
                                      base_sha="a" * 40, job=job))
        entries.append(SessionRecord(n=n, kind=SessionKind.DELIVERY, checkpoint=text, started_at=T0,
                                     finished_at=T0 + timedelta(seconds=75 * n), outcome=Outcome.ADVANCED,
                                     blame=Blame.NONE, rule=9, advanced=(text,), reasons=(text,), tokens=1000 * n,
                                     cost_usd=0.25, cost_lower_bound=n == 2))
    return session_rows(entries, run_url=lambda job: f"{OURS}actions/runs/{job}")


_MD = MarkdownIt("commonmark").enable("table")


def _shape(markdown: str) -> list:
    """The document's structure: every token but the text itself."""
    out = []
    for tok in _MD.parse(markdown):
        if tok.type == "inline":
            out.append([c.type for c in tok.children or () if c.type != "text"])
        elif tok.type in ("html_block", "fence", "code_block"):
            out.append((tok.type, tok.info) if tok.type != "html_block"
                       else (tok.type, tok.content.strip()[:30]))
        else:
            out.append(tok.type)
    return out


def _texts(markdown: str) -> list[str]:
    return [c.content for tok in _MD.parse(markdown) if tok.type == "inline" for c in tok.children or ()
            if c.type == "text"]


@pytest.mark.parametrize("kind", list(_reports(HARMLESS)))
def test_hostile_markdown_in_every_field_changes_no_structure_of_a_published_body(kind):
    hostile, harmless = _reports(HOSTILE)[kind], _reports(HARMLESS)[kind]
    got, want = _shape(hostile), _shape(harmless)
    if kind == "capped issue":  # the cut depends on the text's length; the opening and the end do not
        got, want = got[:12] + got[-12:], want[:12] + want[-12:]
    assert got == want


@pytest.mark.parametrize("kind", list(_reports(HARMLESS)))
def test_no_link_image_html_heading_or_address_from_the_agent_is_live(kind):
    body = _reports(HOSTILE)[kind]
    ours = {f"{OURS}actions/runs/8", f"{OURS}issues/3"}  # the links plan-runner built (run 1's job is hostile)
    html = re.sub(r'<a href="(%s)">' % "|".join(map(re.escape, ours)), "", _MD.render(body))
    assert "<a " not in html and "<img" not in html and "<details" not in re.sub(
        r"<details><summary>(tests: last lines|The last report)</summary>", "", html)
    for tok in _MD.parse(body):
        if tok.type == "html_block":  # plan-runner's own: the markers and the <details> it opens
            assert re.fullmatch(r"<!-- plan-runner:(park|watch) plan=auth -->"
                                r"|<details><summary>(tests: last lines|The last report)</summary>"
                                r"|</details>", tok.content.strip()), tok.content
        links = [c for c in tok.children or () if c.type == "link_open"]
        assert {c.attrs["href"] for c in links} <= ours
        assert not (tok.children and [c for c in tok.children if c.type in ("html_inline", "image")])
    for text in _texts(body):
        assert not re.search(r"[a-z]://|www\.|\w@\w|@[a-z]|#\d", text, re.IGNORECASE), text
    assert not re.search(r"[\x1b\x80-\x9f\u202a-\u202e]", body)


def test_the_handoff_and_gate_output_stay_whole_inside_their_fences():
    body = _reports(HOSTILE)["report"]
    fences = [t for t in _MD.parse(body) if t.type == "fence"]
    assert len(fences) == 2 and all("/plan-runner skip" in f.content and "<details>" in f.content for f in fences)


def test_the_terminal_shows_the_agents_text_as_written_without_control_bytes():
    text = to_terminal(_reports(HOSTILE)["local park file"])
    assert "[the PR](https\u200b" not in text and "[the PR](https:" in text.replace("\u200b", "")
    assert "\x1b" not in text and "\x9b" not in text and "open me" in text


def test_trusted_markdown_stays_markdown_and_other_text_is_escaped():
    assert render_summary(_plan("x"), Markdown("## kept"), "h").count("\n## kept") == 1
    assert "\\#\\# escaped" in render_summary(_plan("x"), "## escaped", "h")


def test_a_redacted_report_stays_markdown():
    """Redaction of known secrets keeps the report plan-runner's (a str method returns a plain str)."""
    plan = _plan("x")
    report = render_report(plan, RunState(), title="t", evidence=evidence(handoff="key sk-0123456789"),
                           secrets=["sk-0123456789"])
    assert isinstance(report, Markdown) and "sk-0123456789" not in report
    assert "\n### How to answer" in render_park_issue(plan, report, None) and "\n## t" in render_park_issue(plan, report, None)
