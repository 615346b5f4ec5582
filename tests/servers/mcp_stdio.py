"""A stand-in MCP server over stdio (newline-delimited JSON-RPC 2.0), for the real Claude Code and Codex CLIs.

`python mcp_stdio.py LOG`: answers initialize, tools/list (tools `echo` and `secret`) and tools/call; `echo` returns
its text and the value of STANDIN_VALUE in its environment. Every request it gets is appended to LOG as a line.
"""

from __future__ import annotations

import json
import os
import sys

TOOLS = [
    {"name": "echo", "description": "Echo the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "secret", "description": "A tool the plan denies.", "inputSchema": {"type": "object", "properties": {}}},
]


def main() -> None:
    log = open(sys.argv[1], "a", encoding="utf-8")  # noqa: SIM115
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        log.write(json.dumps(msg) + "\n")
        log.flush()
        if "id" not in msg:
            continue  # a notification
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "standin", "version": "1.0.0"}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            args = params.get("arguments") or {}
            text = f"echo:{args.get('text', '')} env:{os.environ.get('STANDIN_VALUE', '<unset>')}"
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        else:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                         "error": {"code": -32601, "message": f"no method {method}"}}) + "\n")
            sys.stdout.flush()
            continue
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
