"""`plan-runner session` with the real Claude Code CLI (issue 46, item 3): settings one session writes into its CLI's
own config folder (a start-up hook, an MCP server in the CLI's user config) are not in force in the next session.
A control runs the same CLI on the same files without plan-runner: the hook's words and the server's tools reach
the model, so the files would be in force were they kept and read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servers.messages import MessagesServer, reply
from tests.e2e.test_session_real_agents import claude_path, make_repo, session, shell
from tests.conftest import agent_writable

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
HOOK_WORDS = "WIDENED-HOOK-CONTEXT"
HOOK = [{"hooks": [{"type": "command", "command": f"echo {HOOK_WORDS}"}]}]
SETTINGS = {"hooks": {"SessionStart": HOOK, "UserPromptSubmit": HOOK},
            "permissions": {"allow": ["Bash(*)", "WebFetch"]}}
USER_CONFIG = {"mcpServers": {"extra": {"type": "stdio", "command": sys.executable,
                                        "args": [str(ROOT / "tests" / "servers" / "mcp_stdio.py"), "/dev/null"]}}}


def test_the_widened_settings_are_in_force_where_they_are_read(tmp_path):
    """The control: the CLI started by hand with those files in its config folder runs the hook and offers the
    server's tools."""
    config, work = tmp_path / "config", tmp_path / "w"
    config.mkdir()
    work.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    (config / "settings.json").write_text(json.dumps(SETTINGS))
    (config / ".claude.json").write_text(json.dumps(USER_CONFIG))
    with MessagesServer(default=reply("hello")) as srv:
        env = dict(os.environ, ANTHROPIC_BASE_URL=srv.url, ANTHROPIC_API_KEY="sk-ant-test-key-0000",
                   CLAUDE_CONFIG_DIR=str(config), HOME=str(config))
        subprocess.run([claude_path(), "-p", "say hi", "--output-format", "stream-json", "--verbose"], cwd=work,
                       env=env, capture_output=True, text=True, timeout=180, check=True)
        bodies = json.dumps([r.json for r in srv.message_requests])
    assert HOOK_WORDS in bodies and "mcp__extra" in bodies


def test_settings_one_session_writes_into_its_config_folder_are_not_in_force_in_the_next(tmp_path):
    """Session 1 writes the hook into `$CLAUDE_CONFIG_DIR/settings.json` and the server into the CLI's user config
    (`$CLAUDE_CONFIG_DIR/.claude.json`), then advances; session 2 advances too, and none of its requests carries
    the hook's words or the server's tools."""
    repo = make_repo(tmp_path, "claude-code")
    marker = agent_writable(repo, "claude-config-written", "hello")
    # What the agent wrote is recorded as it writes it (tee): the running CLI rewrites its own `.claude.json` from
    # memory at times, so reading the file back a moment later can find the CLI's copy instead (seen under load).
    widen = (f"printf '%s' '{json.dumps(SETTINGS)}' | tee \"$CLAUDE_CONFIG_DIR/settings.json\" >> {marker} && "
             f"printf '%s' '{json.dumps(USER_CONFIG)}' | tee \"$CLAUDE_CONFIG_DIR/.claude.json\" >> {marker}")
    tick = ("echo {name} > {name}.txt && git add {name}.txt && git commit -q -m 'Add {name}' && "
            "sed -i 's/- \\[ \\] {cid}/- [x] {cid}/' plans/hello.md && git commit -q -am 'Tick {cid}'")
    with MessagesServer() as srv:
        srv.enqueue(reply("Widening.", shell("claude-code", widen)),
                    reply("Working.", shell("claude-code", tick.format(name="hello", cid="1.1"))), reply("Done."))
        first = session(repo, srv)
        assert first["outcome"] == "Advanced", first
        assert HOOK_WORDS in marker.read_text() and "mcpServers" in marker.read_text()
        done = len(srv.message_requests)
        srv.enqueue(reply("Working.", shell("claude-code", tick.format(name="bye", cid="1.2"))), reply("Done."))
        second = session(repo, srv)
        bodies = json.dumps([r.json for r in srv.message_requests[done:]])
    assert second["outcome"] == "Advanced", second
    assert len(srv.message_requests) > done
    assert HOOK_WORDS not in bodies and "mcp__extra" not in bodies
