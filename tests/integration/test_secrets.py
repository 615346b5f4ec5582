"""Secrets: the agent never gets the GitHub token or unlisted secrets, and no known secret value is published
anywhere plan-runner writes (logs, summaries, outputs, issue bodies, reports, the ledger), even when the agent
or a gate prints it."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from runner.drivers.actions.main import run_action
from tests.e2e_act import world as w
from tests.reliability_world import (
    MUL_STEP,
    all_git_text,
    files_text,
    git,
    make_repo,
    result_json,
    run_session,
    script,
)
from tests.conftest import agent_writable
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

API_KEY = "sk-ant-api-key-value-7f3a9"
GITHUB_TOKEN = "ghs_jobtoken0123456789abcdef"
UNLISTED = {
    "GITHUB_TOKEN": GITHUB_TOKEN,
    "GH_TOKEN": "gho_personaltoken_55aa77",
    "ACTIONS_RUNTIME_TOKEN": "runtime-token-value-9911",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-request-token-8822",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value-4455",
    "DEPLOY_PASSWORD": "deploy-password-value-3366",
    "NPM_TOKEN": "npm_tokenvalue_778899",
}
LISTED = {"DATABASE_URL": "postgres://db.invalid/app", "PUBLIC_FLAG": "on"}
ALL_SECRETS = [API_KEY, *UNLISTED.values()]


def _env() -> dict[str, str]:
    return {**UNLISTED, **LISTED, "ANTHROPIC_API_KEY": API_KEY}


def test_the_agent_environment_holds_only_the_allow_list(tmp_path):
    """An agent that dumps its environment sees the plan's listed names, never its model's key (the proxy outside
    its room adds it), a token or an unlisted secret; a gate gets the plan's listed names and no credentials."""
    dump, gate_dump = agent_writable(tmp_path / "repo", "agent-env.json"), agent_writable(tmp_path / "repo", "gate-env.txt")
    repo = make_repo(tmp_path, script([{"env_dump": str(dump)}, MUL_STEP, {"commit": "Add mul"}]),
                     agent_extra="\n  env: [DATABASE_URL, PUBLIC_FLAG]",
                     gate=f"env > {gate_dump}")
    out = result_json(run_session(repo, env=_env()))
    assert out["outcome"] == "Progress", out
    seen = json.loads(dump.read_text())
    # The model's key stays outside the room: the allow-list proxy adds it to the requests that leave (docs/security.md)
    assert API_KEY not in json.dumps(seen) and seen.get("ANTHROPIC_API_KEY") != API_KEY, seen.get("ANTHROPIC_API_KEY")
    assert seen["DATABASE_URL"] == LISTED["DATABASE_URL"] and seen["PUBLIC_FLAG"] == "on"
    for name, value in UNLISTED.items():
        assert name not in seen and value not in json.dumps(seen), name
    gate_env = gate_dump.read_text()
    assert all(value not in gate_env for value in UNLISTED.values())
    assert API_KEY not in gate_env and LISTED["DATABASE_URL"] in gate_env  # least credentials


def test_a_plan_cannot_hand_the_github_token_to_the_agent(tmp_path):
    """`agent.env: [GITHUB_TOKEN]` is refused with a clear error before any agent runs."""
    repo = make_repo(tmp_path, script([{"env_dump": str(tmp_path / "env.json")}]),
                     agent_extra="\n  env: [GITHUB_TOKEN]")
    proc = run_session(repo, env=_env())
    assert proc.returncode != 0 and "GITHUB_TOKEN" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "env.json").exists()


def _printing_script(tmp_path: Path) -> str:
    return script(
        [{"say": f"my key is {API_KEY}"},
         {"run": "echo key=$ANTHROPIC_API_KEY; echo db=$DEPLOY_PASSWORD"},
         {"say": json.dumps({"text": f"json-quoted {API_KEY}"})},
         MUL_STEP, {"commit": "Add mul"}, {"tokens": 100}],
        [{"say": f"again {API_KEY}"}], [{"say": f"again {API_KEY}"}])


def test_secrets_printed_by_the_agent_or_a_gate_appear_nowhere_plan_runner_writes(tmp_path):
    """Local mode: the terminal, the --json record, the ledger and its files, the transcripts, the report
    and every git object on both sides carry no secret value, though the agent and the gate printed them."""
    gate = "echo gate sees $DEPLOY_PASSWORD; exit 1"  # a secret the plan hands the agent and its gates by name
    repo = make_repo(tmp_path, _printing_script(tmp_path), gate=gate, agent_extra="\n  env: [DEPLOY_PASSWORD]")
    outputs = []
    for _ in range(3):  # GatesRed, then more sessions until the circuit breaker parks with a report
        proc = run_session(repo, env={**_env(), "DEPLOY_PASSWORD": UNLISTED["DEPLOY_PASSWORD"]})
        outputs.append(proc.stdout + proc.stderr)
        if result_json(proc).get("status") == "parked":
            break
    assert result_json(proc)["status"] == "parked", proc.stdout
    published = ("\n".join(outputs)).encode() + all_git_text(repo) + all_git_text(tmp_path / "origin.git")
    scratch = repo / ".git" / "plan-runner"
    published += files_text(scratch / "reports") + files_text(scratch / "calc" / "transcripts")
    assert b"***" in published  # the secret was printed, and redacted
    for secret in ALL_SECRETS:
        assert secret.encode() not in published, secret
    report = (scratch / "reports" / "calc-park.md").read_text()
    assert "gate sees ***" in report


def test_secrets_never_reach_github_the_job_log_or_the_summary(tmp_path):
    """GitHub mode: every request body sent to the API (issues, comments), the job log, the outputs, the summary
    and the pushed ledger are free of the API key and the token, while the agent and a gate print the key."""
    # the script is committed to the repository: it names the variable, never the value
    script_text = ("sessions:\n  - - run: 'echo key $ANTHROPIC_API_KEY; echo token $GITHUB_TOKEN'\n"
                   "    - write: {path: a.py, content: x}\n    - commit: a\n    - handoff: 'HUMAN: which?'\n")
    plan = w.PLAN.replace("run: python3 -m unittest -q", "run: echo gate sees $DEPLOY_PASSWORD").replace(
        "  backend: script\n", "  backend: script\n  env: [DEPLOY_PASSWORD]\n")
    with GitHubServer(token=GITHUB_TOKEN) as srv:
        bare = w.make_remote(tmp_path, {"plans/greeter.md": plan, "plans/greeter.script.yaml": script_text})
        srv.branches = w.BareBranches(bare)
        ws = w.checkout(bare, tmp_path / "job1")
        env = {**w.job_env(srv, ws, tmp_path / "runner", "workflow_dispatch", w.dispatch_event("plans/greeter.md")),
               **{k: v for k, v in UNLISTED.items() if k != "GITHUB_TOKEN"},
               "ANTHROPIC_API_KEY": API_KEY, "PLAN_RUNNER_MODE": "session"}
        out = io.StringIO()
        rc = run_action(env, out=out)
        sent = json.dumps([c.body for c in srv.calls]) + json.dumps(list(srv.issues.values()), default=str) \
            + json.dumps(list(srv.comments.values()), default=str)
    outputs = w.parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
    assert rc == 0 and outputs["outcome"] == "NeedsHuman", outputs
    log = out.getvalue()
    masks = [line for line in log.splitlines() if line.startswith("::add-mask::")]
    assert f"::add-mask::{API_KEY}" in masks and f"::add-mask::{GITHUB_TOKEN}" in masks
    log_after_masks = "\n".join(line for line in log.splitlines() if not line.startswith("::add-mask::"))
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    published = (sent + log_after_masks + summary + json.dumps(outputs)).encode() + all_git_text(bare)
    assert b"gate sees ***" in published
    for secret in ALL_SECRETS:
        assert secret.encode() not in published, secret


def test_a_secret_the_agent_commits_never_leaves_the_machine(tmp_path):
    """The agent writes its API key into a committed file: the session parks (NeedsHuman) naming the file, not
    the value; neither the session ref nor the work branch is pushed, so the remote holds no object with the
    key, while the local work branch keeps the commit for the human."""
    leak = [MUL_STEP, {"commit": "Add mul"},
            {"write": {"path": "calc/settings.py", "content": f"API_KEY = '{API_KEY}'\n"}},
            {"commit": "Configure the client"}, {"check": "1.1"}, {"commit": "Tick 1.1"}]
    repo = make_repo(tmp_path, script(leak, [{"say": "still here"}]))
    proc = run_session(repo, env=_env())
    out = result_json(proc)
    assert out["outcome"] == "NeedsHuman" and out["status"] == "parked", out
    assert any("calc/settings.py" in r and "nothing of this session was pushed" in r for r in out["reasons"])
    bare = tmp_path / "origin.git"
    assert API_KEY.encode() not in all_git_text(bare)
    local_work = subprocess.run(["git", "show", "plan-runner/calc:calc/settings.py"], cwd=repo,
                                capture_output=True, text=True).stdout
    assert API_KEY in local_work  # kept here for the human, not lost
    remote_refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=bare,
                                 capture_output=True, text=True, check=True).stdout.split()
    assert not any(r.startswith("refs/plan-runner/sessions/") for r in remote_refs), remote_refs
    published = proc.stdout.encode() + proc.stderr.encode() + files_text(repo / ".git" / "plan-runner" / "reports")
    assert API_KEY.encode() not in published


# A secret that holds a newline (a PEM key in DEPLOY_PRIVATE_KEY), whose first line ends a block of a stored
# transcript: a file over runner.adapters.store.dirs.BLOCKED_FROM is stored in blocks cut after a line whose
# checksum says so, and its first line is one of those.
def _block_ending_line(stem: str) -> str:
    import zlib

    from runner.adapters.store.dirs import BLOCK_AVG
    for i in range(10**7):
        line = f"{stem}{i:07d}"
        if zlib.crc32((line + "\n").encode()) < len(line + "\n") * (2**32 / BLOCK_AVG):
            return line
    raise AssertionError("no block-ending line found")


COMMAND_AGENT_PLAN = """\
---
agent:
  backend: command
  executable: {python}
  args: ["-P", "{script}"]
  stall_minutes: 30s
  time_limit_minutes: 90s
gates:
  - name: tests
    run: {python} -m unittest discover -s tests -q
budget:
  max_sessions: 12
---
# Calc

## Stage 1: Arithmetic <!-- sessions: 2 -->
- [ ] 1.1 Multiplication
"""


def test_a_secret_holding_a_newline_split_by_a_transcript_block_leaves_no_trace_in_the_state(tmp_path):
    """A command agent prints 1.5 MB and then the session's secret, a two-line key whose first line ends a block of
    the stored transcript (`command-output.log`, stored in blocks), and its JSON-escaped form: neither line of the
    key, nor the key in either form, is in any object of the repository or the remote; the transcript says `***`."""
    import sys

    from tests.conftest import agent_visible
    first = _block_ending_line("-----BEGIN TEST KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    second = "kYwggSiAgEAAoIBAQC7VJTUt9Us8cKjMzEfYyjiWA4R4-----END TEST KEY-----"
    key = first + "\n" + second
    repo = make_repo(tmp_path, script([]))
    agent = agent_visible(repo, "leaky-agent.py")
    agent.write_text("import json, sys\n"
                     "for i in range(15000):\n"
                     "    print(f'filler line {i:06d} ' + 'x' * 80)\n"
                     f"print({key!r})\n"
                     f"print(json.dumps({key!r}))\n"
                     "print('done')\n")
    (repo / "plans" / "calc.md").write_text(COMMAND_AGENT_PLAN.format(python=sys.executable, script=agent))
    git(repo, "commit", "-qam", "a command agent")  # an identity of its own: CI's user has no git config
    git(repo, "push", "-q", "origin", "main")
    proc = run_session(repo, env={**_env(), "DEPLOY_PRIVATE_KEY": key})
    assert result_json(proc).get("outcome"), proc.stderr[-2000:]
    state = all_git_text(repo) + all_git_text(tmp_path / "origin.git")
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", "refs/plan-runner/state/calc"], cwd=repo,
                             capture_output=True, text=True, check=True).stdout
    assert "command-output.log.plan-runner-blocks/000001" in listing, listing  # stored in blocks
    log = subprocess.run(["git", "show", "refs/plan-runner/state/calc:transcripts/command-output.log.plan-runner-blocks/"
                          + "000000"], cwd=repo, capture_output=True, check=True).stdout
    assert b"filler line 000000" in log  # the transcript was stored and searched
    for trace in (key, json.dumps(key)[1:-1], first, second):
        assert trace.encode() not in state, trace[:40]
    blocks = [line for line in listing.splitlines() if "command-output.log.plan-runner-blocks/" in line]
    stored = b"".join(subprocess.run(["git", "show", f"refs/plan-runner/state/calc:{b}"], cwd=repo,
                                     capture_output=True, check=True).stdout for b in blocks)
    assert stored.count(b"***") == 2 and b"done\n" in stored
