"""A small world for the GitHub-side tests: a bare remote, fresh checkouts, events, a job env.

`BareBranches` lets the GitHub test server see the branches jobs really pushed to
the bare remote, so a pull request is opened against real refs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

PLAN = """\
---
base: main
agent:
  backend: script
  script: plans/greeter.script.yaml
  stall_minutes: 10s
  time_limit_minutes: 40s
  session_tokens: 100000
gates:
  - name: tests
    run: python3 -m unittest -q
    timeout_minutes: 1m
budget:
  max_sessions: 12
---
# Greeter

## Stage 1: Greeting <!-- sessions: 2 -->
- [ ] 1.1 `greet()` says hello
- [ ] 1.2 `greet(name)` uses the name

## Stage 2: Docs <!-- sessions: 1 -->
- [ ] 2.1 README documents `greet`
"""

GREET_1 = "def greet(name=None):\\n    return 'hello'\\n"
TEST_1 = ("import unittest\\n\\nfrom greeter import greet\\n\\n\\nclass T(unittest.TestCase):\\n"
          "    def test_hello(self):\\n        self.assertEqual(greet(), 'hello')\\n")
GREET_2 = "def greet(name=None):\\n    return f'hello {name}' if name else 'hello'\\n"

# The happy path with every kind of GitHub-side event on the way.
SCRIPT = f"""
sessions:
  - id: s-hello
    steps:
      - write: {{path: greeter.py, content: "{GREET_1}"}}
      - write: {{path: test_greeter.py, content: "{TEST_1}"}}
      - commit: "greet says hello"
      - check: "1.1"
      - commit: "Tick 1.1"
      - tokens: 1200
  - id: s-limited
    steps:
      - rate_limit: {{reset_in: 2, message: "429 rate_limit_error: too many requests"}}
  - id: s-name
    steps:
      - write: {{path: greeter.py, content: "{GREET_2}"}}
      - commit: "greet uses the name"
      - check: "1.2"
      - commit: "Tick 1.2"
      - tokens: 900
  - id: s-question
    steps:
      - handoff: "HUMAN: should the README be in English or French?"
      - tokens: 300
  - id: s-docs
    steps:
      - write: {{path: README.md, content: "# greeter\\n\\n`greet(name)` says hello.\\n"}}
      - commit: "Document greet"
      - check: "2.1"
      - commit: "Tick 2.1"
      - tokens: 700
"""


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Maintainer", "GIT_AUTHOR_EMAIL": "m@example.invalid",
           "GIT_COMMITTER_NAME": "Maintainer", "GIT_COMMITTER_EMAIL": "m@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def make_remote(root: Path, files: dict[str, str]) -> Path:
    """A bare remote whose `main` holds `files`."""
    bare = root / "origin.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    seed = root / "seed"
    git(root, "clone", "-q", str(bare), str(seed))
    for name, text in files.items():
        (seed / name).parent.mkdir(parents=True, exist_ok=True)
        (seed / name).write_text(text)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "greeter: a plan")
    git(seed, "push", "-q", "origin", "HEAD:main")
    return bare


def checkout(bare: Path, dest: Path) -> Path:
    """What a job's checkout gives: a fresh clone of main."""
    git(bare.parent, "clone", "-q", "--branch", "main", str(bare), str(dest))
    return dest


def ref(bare: Path, name: str) -> str | None:
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{name}"], cwd=bare,
                          capture_output=True, text=True)
    return proc.stdout.strip() or None


class BareBranches(dict):
    """`GitHubServer.branches`, read live from the bare remote."""

    def __init__(self, bare: Path) -> None:
        super().__init__()
        self.bare = bare

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and ref(self.bare, name) is not None

    def __getitem__(self, name: str) -> str:
        sha = ref(self.bare, name)
        if sha is None:
            raise KeyError(name)
        return sha

    def get(self, name: str, default=None):  # type: ignore[override]
        return ref(self.bare, name) or default


def ledger(bare: Path, plan_id: str) -> list[dict]:
    from runner.adapters.store.state import ledger_text  # either format: one blob, or segments

    text = ledger_text(bare, f"refs/plan-runner/state/{plan_id}")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def dispatch_event(plan: str) -> dict:
    return {"inputs": {"plan": plan}, "ref": "refs/heads/main"}


def schedule_event() -> dict:
    return {"schedule": "*/10 * * * *"}


def comment_event(issue: dict, body: str, user: str, comment_id: int, *, action: str = "created",
                  bot: bool = False) -> dict:
    return {
        "action": action,
        "issue": {"number": issue["number"], "title": issue.get("title", ""), "body": issue.get("body", ""),
                  "state": issue.get("state", "open"),
                  "labels": [{"name": n} for n in issue.get("labels", [])]},
        "comment": {"id": comment_id, "body": body, "user": {"login": user, "type": "Bot" if bot else "User"}},
        "repository": {"full_name": "octo-org/demo"},
        "sender": {"login": user},
    }


def job_env(srv, workspace: Path, tmp: Path, event_name: str, event: dict, run_id: int = 1) -> dict[str, str]:
    """The environment the Actions runner gives the plan-runner step."""
    tmp.mkdir(parents=True, exist_ok=True)
    event_path = tmp / f"event-{run_id}.json"
    event_path.write_text(json.dumps(event))
    for name in ("output", "summary"):
        (tmp / f"{name}-{run_id}").write_text("")
    return {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp)),
        "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace), "GITHUB_REPOSITORY": "octo-org/demo",
        "GITHUB_API_URL": srv.url, "GITHUB_SERVER_URL": "https://github.example.invalid",
        "GITHUB_RUN_ID": str(run_id), "GITHUB_REF_NAME": "main",
        "GITHUB_WORKFLOW_REF": "octo-org/demo/.github/workflows/plan-runner.yml@refs/heads/main",
        "GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_OUTPUT": str(tmp / f"output-{run_id}"), "GITHUB_STEP_SUMMARY": str(tmp / f"summary-{run_id}"),
        "GITHUB_TOKEN": srv.token, "ANTHROPIC_API_KEY": "sk-ant-test-secret-value-123",
        "GIT_AUTHOR_NAME": "plan-runner", "GIT_AUTHOR_EMAIL": "plan-runner@users.noreply.github.com",
        "GIT_COMMITTER_NAME": "plan-runner", "GIT_COMMITTER_EMAIL": "plan-runner@users.noreply.github.com",
    }


def parse_outputs(text: str) -> dict[str, str]:
    """`$GITHUB_OUTPUT` in the heredoc form back into a dict."""
    out, lines, i = {}, text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line:
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
            i += 1
        else:
            i += 1
    return out
