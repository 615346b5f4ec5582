"""The scripted agent: a real child process that plays one session of a script.

Started by `runner.backends.script.backend` under supervision. It reads its steps (JSON,
already validated by the backend) and acts on the real work tree: files, shell
commands, git commits, checkbox edits in the plan, the handoff. It talks to the
backend in JSON lines on stdout (`start`, `prompt`, `text`, `tool`,
`tool_output`, `progress`, `tokens`, `limit`, `error`, `nudge`, `result`) and
reads nudges from stdin, logging each one it receives.

Standard library only, and run with `python -P` by path, so nothing in the work
tree (a `json.py`, say) can shadow what it imports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

_print_lock = threading.Lock()


class Inbox:
    """The nudges the backend sent this session: how many, and whether one came."""

    def __init__(self) -> None:
        self.nudges = 0
        self.nudged = threading.Event()


def emit(message_type: str, /, **fields: object) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps({"type": message_type, **fields}) + "\n")
        sys.stdout.flush()


def say(text: str) -> None:
    emit("text", text=text)


def _take(raw: str, plain_type: str, inbox: Inbox) -> None:
    """Log one message from the backend: the prompt, or a nudge (a plain-text line is a `plain_type`)."""
    try:
        message = json.loads(raw)
    except ValueError:
        message = {"type": plain_type, "text": raw}
    text = str(message.get("text", "")) if isinstance(message, dict) else raw
    if isinstance(message, dict) and message.get("type") == "prompt":
        emit("prompt", characters=len(text))
        return
    inbox.nudges += 1
    emit("nudge", text=text, count=inbox.nudges)
    inbox.nudged.set()


def _read_prompt(inbox: Inbox) -> None:
    """Take the prompt (the first line the backend sends) before any step runs, so the transcript
    always records it, however short the session."""
    raw = sys.stdin.readline().strip()
    if raw:
        _take(raw, "prompt", inbox)


def _read_stdin(inbox: Inbox) -> None:
    """Log every further message the backend sends (nudges)."""
    for raw in sys.stdin:
        if raw.strip():
            _take(raw.strip(), "nudge", inbox)


class Agent:
    def __init__(self, workdir: Path, plan: Path | None, handoff: Path | None) -> None:
        self.workdir = workdir
        self.plan = plan
        self.handoff = handoff

    def path(self, raw: str) -> Path:
        p = Path(raw)
        return p if p.is_absolute() else self.workdir / p

    def tool(self, name: str, detail: str, ok: bool = True, **extra: object) -> None:
        emit("tool", name=name, detail=detail, ok=ok, **extra)

    # --- files ---------------------------------------------------------------------------
    def write(self, arg: dict) -> None:
        target = self.path(arg["path"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(arg.get("content", "")), encoding="utf-8")
        self.tool("write", arg["path"])

    def append(self, arg: dict) -> None:
        target = self.path(arg["path"])
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as fh:
            fh.write(str(arg.get("content", "")))
        self.tool("append", arg["path"])

    def delete(self, arg: str) -> None:
        target = self.path(arg)
        try:
            target.unlink()
            self.tool("delete", arg)
        except FileNotFoundError:
            self.tool("delete", arg, ok=False, error="no such file")

    def env_dump(self, arg: str) -> None:
        target = self.path(arg)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(dict(os.environ), indent=1, sort_keys=True), encoding="utf-8")
        self.tool("env_dump", arg)

    def handoff_step(self, arg: str) -> None:
        if self.handoff is None:
            self.tool("handoff", "", ok=False, error="no handoff path was given to the agent")
            return
        self.handoff.parent.mkdir(parents=True, exist_ok=True)
        self.handoff.write_text(arg if arg.endswith("\n") else arg + "\n", encoding="utf-8")
        self.tool("handoff", str(self.handoff))

    # --- shell and git -------------------------------------------------------------------
    def run(self, arg: str) -> None:
        proc = subprocess.run(arg, shell=True, cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, check=False)
        out = proc.stdout.decode("utf-8", errors="replace")
        for line in out.splitlines()[-40:]:
            emit("tool_output", text=line)
        self.tool("run", arg, ok=proc.returncode == 0, exit_code=proc.returncode)

    def commit(self, message: str) -> None:
        git = ["git"]
        if not subprocess.run(["git", "config", "--get", "user.email"], cwd=self.workdir,
                              capture_output=True, check=False).stdout.strip() and "GIT_AUTHOR_EMAIL" not in os.environ:
            git += ["-c", "user.name=script agent", "-c", "user.email=script-agent@plan-runner.invalid"]
        subprocess.run(git + ["add", "-A"], cwd=self.workdir, capture_output=True, check=False)
        proc = subprocess.run(git + ["commit", "-q", "-m", message], cwd=self.workdir, capture_output=True, check=False)
        if proc.returncode == 0:
            sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=self.workdir, capture_output=True, text=True, check=False)
            self.tool("commit", message, sha=sha.stdout.strip())
        else:
            error = (proc.stdout + proc.stderr).decode("utf-8", errors="replace").strip()
            self.tool("commit", message, ok=False, error=error[-500:])

    # --- the plan tracker ----------------------------------------------------------------
    def _edit_checkbox(self, name: str, cid: str, mark: str, reason: str | None) -> None:
        if self.plan is None or not self.plan.is_file():
            self.tool(name, cid, ok=False, error="no plan file was given to the agent")
            return
        text = self.plan.read_text(encoding="utf-8")
        line_re = re.compile(rf"^( {{0,3}}[-*+][ \t]+\[)[ xX](\][ \t]+{re.escape(cid)})(?=\s|$)(.*)$", re.MULTILINE)
        m = line_re.search(text)
        if not m:
            self.tool(name, cid, ok=False, error=f"checkpoint {cid} not found in the plan")
            return
        rest = m.group(3)
        comment_at = rest.find("<!--")
        body, comment = (rest, "") if comment_at < 0 else (rest[:comment_at], " " + rest[comment_at:].strip())
        body = re.sub(r"\s*BLOCKED:.*$", "", body).rstrip()
        if reason is not None:
            body = f"{body} BLOCKED: {reason}"
        line = f"{m.group(1)}{mark}{m.group(2)}{body}{comment}"
        self.plan.write_text(text[: m.start()] + line + text[m.end():], encoding="utf-8")
        self.tool(name, cid)

    def check(self, cid: str) -> None:
        self._edit_checkbox("check", str(cid), "x", None)

    def uncheck(self, cid: str) -> None:
        self._edit_checkbox("uncheck", str(cid), " ", None)

    def block(self, arg: dict) -> None:
        self._edit_checkbox("block", str(arg["id"]), " ", str(arg.get("reason") or "needs a human decision"))

    def edit_front_matter(self, arg: object) -> None:
        """Tampering on purpose: change the plan's configuration, which agents may not do."""
        if self.plan is None or not self.plan.is_file():
            self.tool("edit_front_matter", "", ok=False, error="no plan file was given to the agent")
            return
        text = self.plan.read_text(encoding="utf-8")
        end = text.find("\n---", 3) if text.startswith("---") else -1
        if end < 0:
            self.tool("edit_front_matter", "", ok=False, error="the plan has no front matter")
            return
        front, rest = text[:end], text[end:]
        if isinstance(arg, dict):
            front = front.replace(str(arg["replace"]), str(arg.get("with", "")))
        else:
            front = front + "\n" + str(arg)
        self.plan.write_text(front + rest, encoding="utf-8")
        self.tool("edit_front_matter", str(self.plan))


def _tokens(arg: object) -> dict[str, int]:
    if isinstance(arg, dict):
        return {"input_tokens": int(arg.get("input", 0)), "output_tokens": int(arg.get("output", 0))}
    return {"input_tokens": 0, "output_tokens": int(arg)}  # type: ignore[call-overload]  # a YAML scalar; int() refuses others


def play(steps: list[dict], agent: Agent, inbox: Inbox) -> int:
    """Run the steps in order; the return value is the exit code."""
    for step in steps:
        (kind, arg), = step.items()
        if kind == "say":
            say(str(arg))
        elif kind == "tokens":
            emit("tokens", **_tokens(arg))
        elif kind == "silent":
            time.sleep(float(arg))
        elif kind == "sleep":
            deadline = time.monotonic() + float(arg)
            while time.monotonic() < deadline:  # busy but talking: no stall, only the time limit stops it
                emit("progress", text="working...")
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        elif kind == "wait_nudge":
            got = inbox.nudged.wait(float(arg))
            say("heeding the nudge: wrapping up" if got else "no nudge came")
        elif kind == "rate_limit":
            arg = arg if isinstance(arg, dict) else {}
            if "reset_at" in arg:
                emit("limit", reset_at=str(arg["reset_at"]), message=str(arg.get("message", "rate limit reached")))
            else:  # "resets in N s", as a real backend says it: plan-runner dates it on its own clock
                emit("limit", reset_in=float(arg.get("reset_in", 300)), message=str(arg.get("message", "rate limit reached")))
            return 1
        elif kind == "transient":
            emit("error", kind="transient", message=str(arg or "overloaded"))
            return 1
        elif kind == "auth_error":
            emit("error", kind="auth", message=str(arg or "invalid api key"))
            return 1
        elif kind == "exit":
            arg = arg if isinstance(arg, dict) else {"code": int(arg)}
            code = int(arg.get("code", 0))
            if arg.get("error"):
                sys.stderr.write(str(arg["error"]) + "\n")
                sys.stderr.flush()
                emit("error", kind="crash", message=str(arg["error"]))
            return code
        elif kind == "handoff":
            agent.handoff_step(str(arg))
        elif kind in ("write", "append", "delete", "run", "commit", "check", "uncheck", "block",
                      "edit_front_matter", "env_dump"):
            getattr(agent, kind)(arg)
        else:
            emit("error", kind="crash", message=f"unknown script step {kind!r}")
            return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="plan-runner scripted agent (one session)")
    parser.add_argument("--steps", required=True, type=Path, help="JSON file with this session's steps")
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--plan", type=Path)
    parser.add_argument("--handoff", type=Path)
    parser.add_argument("--session-id", default="script")
    parser.add_argument("--resumed", action="store_true")
    args = parser.parse_args(argv)
    steps = json.loads(args.steps.read_text(encoding="utf-8"))
    inbox = Inbox()
    _read_prompt(inbox)
    threading.Thread(target=_read_stdin, args=(inbox,), name="stdin", daemon=True).start()
    emit("start", session_id=args.session_id, resumed=args.resumed, steps=len(steps))
    say(f"{'Resuming' if args.resumed else 'Starting'} scripted session {args.session_id}")
    code = play(steps, Agent(args.workdir.resolve(), args.plan, args.handoff), inbox)
    emit("result", exit_code=code, nudges=inbox.nudges)
    return code


if __name__ == "__main__":
    sys.exit(main())
