"""A stand-in for Claude Code's `claude` CLI, shipped by the tests as an npm package of the same name and
version (tests/e2e_act/npm_registry.py), so the action installs it exactly as it installs the real one.

It speaks the CLI's stream-json protocol as plan-runner drives it (runner/backends/claude_code/backend.py): the
prompt arrives as a stream-json user message on stdin; it answers with the `system/init` line, assistant
`tool_use` lines and `user` `tool_result` lines, and one `result` line; then it waits for stdin to close.
What it does is scripted per checkpoint (scenario.json beside this file): shell commands it runs with its
Bash tool in the work tree, as an agent would, and `HANDOFF: text` written to the handoff path the prompt
names. Standard library only: it runs as the agent's unprivileged user.
"""

import json
import os
import re
import subprocess
import sys
import uuid

VERSION = "2.1.332"
HERE = os.path.dirname(os.path.realpath(__file__))


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def usage(n):
    return {"input_tokens": 1000 + 100 * n, "output_tokens": 20, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def main():
    if "--version" in sys.argv[1:]:
        print(VERSION + " (Claude Code)")
        return 0
    if "-p" not in sys.argv[1:] or "stream-json" not in sys.argv[1:]:
        print("stand-in: only `-p --input-format stream-json --output-format stream-json` is scripted",
              file=sys.stderr)
        return 2
    line = sys.stdin.readline()
    prompt = json.loads(line)["message"]["content"] if line.strip() else ""
    with open(os.path.join(HERE, "scenario.json"), encoding="utf-8") as fh:
        scenario = json.load(fh)
    sid = str(uuid.uuid4())
    emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": sid,
          "tools": ["Bash", "Edit", "Read", "Write"], "model": "stand-in", "permissionMode": "dontAsk",
          "claude_code_version": VERSION,
          "apiKeySource": "ANTHROPIC_API_KEY" if os.environ.get("ANTHROPIC_API_KEY") else "none"})
    checkpoint = re.search(r"Your task is checkpoint (?:\*\*)?(\d+(?:\.\d+)+)", prompt)
    handoff = re.search(r"write a handoff to `([^`]+)`", prompt)
    steps = scenario.get(checkpoint.group(1) if checkpoint else "", [])
    if not os.environ.get("ANTHROPIC_API_KEY"):
        steps = []  # the real CLI cannot work without a credential either
    if "GITHUB_TOKEN" in os.environ or "PLAN_RUNNER_PUSH_TOKEN" in os.environ:
        steps = ["echo 'the GitHub token reached the agent' >&2; exit 1"]
    n = 0
    for step in steps:
        n += 1
        tool_id = f"toolu_{n:06d}"
        if step.startswith("HANDOFF: ") and handoff:
            path = handoff.group(1)
            emit({"type": "assistant", "session_id": sid, "message": {
                "id": f"msg_{n:06d}", "role": "assistant", "model": "stand-in", "usage": usage(n),
                "content": [{"type": "tool_use", "id": tool_id, "name": "Write",
                             "input": {"file_path": path, "content": step[9:]}}]}})
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(step[9:] + "\n")
            result, failed = "written", False
        else:
            emit({"type": "assistant", "session_id": sid, "message": {
                "id": f"msg_{n:06d}", "role": "assistant", "model": "stand-in", "usage": usage(n),
                "content": [{"type": "tool_use", "id": tool_id, "name": "Bash",
                             "input": {"command": step, "description": "scripted"}}]}})
            proc = subprocess.run(["bash", "-c", step], capture_output=True, text=True, timeout=120)
            result, failed = (proc.stdout + proc.stderr)[-2000:] or "(no output)", proc.returncode != 0
        emit({"type": "user", "session_id": sid, "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": result, "is_error": failed}]}})
    text = "Done." if steps else "Nothing scripted for this prompt."
    emit({"type": "assistant", "session_id": sid, "message": {
        "id": f"msg_{n + 1:06d}", "role": "assistant", "model": "stand-in", "usage": usage(n + 1),
        "content": [{"type": "text", "text": text}]}})
    emit({"type": "result", "subtype": "success", "is_error": False, "session_id": sid, "result": text,
          "num_turns": n + 1, "duration_ms": 10, "total_cost_usd": 0.01 * (n + 1), "stop_reason": "end_turn",
          "usage": {"input_tokens": sum(usage(i)["input_tokens"] for i in range(1, n + 2)),
                    "output_tokens": 20 * (n + 1), "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0}})
    for _ in sys.stdin:  # plan-runner closes stdin once it has the result
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
