"""A local npm registry on 127.0.0.1 serving one package: a stand-in for `@anthropic-ai/claude-code` at the
version plan-runner pins (runner/drivers/actions/install.py), built by the tests (tests/e2e_act/claude_standin.py).

npm reads its registry from `npm_config_registry` (npm's documented configuration: every `npm_config_*`
variable sets the option of that name; actions/setup-node's `registry-url` writes the same option into an
.npmrc). The action's own `npm install --prefix <tool cache> @anthropic-ai/claude-code@<pinned>` is then
what fetches the stand-in: the packument (`GET /@anthropic-ai%2fclaude-code`), then the tarball, checked
against the packument's `integrity`. Real users' runners use npm's default registry and get the real CLI.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from runner.drivers.actions.install import CLIS

STANDIN = Path(__file__).with_name("claude_standin.py")


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(f"package/{name}")
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def standin_tarball(scenario: dict[str, list[str]], interpreter: str) -> bytes:
    """An npm package tarball: package.json with `bin.claude`, the stand-in (its shebang `interpreter`, a
    Python every user may run) and its scenario."""
    cli = CLIS["claude-code"]
    manifest = {"name": cli.package, "version": cli.version, "description": "plan-runner test stand-in",
                "bin": {cli.binary: "cli.py"}, "license": "MIT"}
    source = STANDIN.read_text(encoding="utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        _add(tar, "package.json", json.dumps(manifest, indent=2).encode(), 0o644)
        _add(tar, "cli.py", f"#!{interpreter}\n{source}".encode(), 0o755)
        _add(tar, "scenario.json", json.dumps(scenario).encode(), 0o644)
    return buf.getvalue()


class NpmRegistry:
    """Use as a context manager; `.url` is the registry (for `npm_config_registry`), `.requests` the paths asked."""

    def __init__(self, tarball: bytes) -> None:
        cli = CLIS["claude-code"]
        self.tarball, self.requests = tarball, []
        self.package, self.version = cli.package, cli.version
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def packument(self) -> dict:
        name = self.package.rsplit("/", 1)[-1]
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(self.tarball).digest()).decode()
        version = {"name": self.package, "version": self.version, "bin": {"claude": "cli.py"},
                   "dist": {"tarball": f"{self.url}{self.package}/-/{name}-{self.version}.tgz",
                            "integrity": integrity, "shasum": hashlib.sha1(self.tarball).hexdigest()}}
        return {"name": self.package, "dist-tags": {"latest": self.version}, "versions": {self.version: version}}

    def _handler(self):
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = unquote(self.path.split("?", 1)[0])
                registry.requests.append(path)
                if path.rstrip("/") == f"/{registry.package}":
                    self._send(200, json.dumps(registry.packument()).encode(), "application/json")
                elif path.endswith(".tgz") and path.startswith(f"/{registry.package}/-/"):
                    self._send(200, registry.tarball, "application/octet-stream")
                else:
                    self._send(404, b'{"error":"not found"}', "application/json")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def __enter__(self) -> NpmRegistry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
