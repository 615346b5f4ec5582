"""What a GitHub Actions job tells the world: masks, annotations, step outputs, the job summary.

Pure formatting (`format_*`) plus small writers (`write_*`) for the runner's files.
Every text that leaves here has known secret values redacted first; `Reporter`
keeps that rule in one place so no caller can forget it.
"""

from __future__ import annotations

import base64
import os
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

from runner.adapters.secrets import redact, secret_values
from runner.adapters.render.report import defang

OUTPUT_NAMES = ("outcome", "next-action", "issue-url", "pull-request-url", "record")
# GitHub's limit on what one step writes to $GITHUB_STEP_SUMMARY ("Adding a job summary": "each step is restricted to a
# maximum size of 1MiB"); past it the runner uploads no summary at all for the step, only an error annotation.
SUMMARY_LIMIT = 1024 * 1024
SUMMARY_CUT = ("\n\n> **This summary was cut to GitHub's 1 MiB step-summary limit.** The whole report is in the plan's "
               "state (`plan-runner logs <plan>`) and in this job's log.\n")


def escape_data(text: str) -> str:
    """A workflow command's message: `%`, CR and LF escaped as the runner expects."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_command(name: str, message: str, **props: str) -> str:
    """`::name k=v,...::message`, with both parts escaped so untrusted text cannot end the command."""
    rendered = ",".join(f"{k}={escape_property(v)}" for k, v in props.items() if v)
    return f"::{name}{' ' + rendered if rendered else ''}::{escape_data(message)}"


def format_output(name: str, value: str) -> str:
    """One `$GITHUB_OUTPUT` entry in the heredoc form, safe for any value (newlines included)."""
    delimiter = f"ghadelimiter_{uuid.uuid4()}"
    while delimiter in value:  # practically never; a value cannot be allowed to end the block
        delimiter = f"ghadelimiter_{uuid.uuid4()}"
    return f"{name}<<{delimiter}\n{value}\n{delimiter}\n"


def mask_values(env: Mapping[str, str]) -> list[str]:
    """Every value to mask before anything prints: secrets, each of their lines, and the
    base64 form git sends the token in (`x-access-token:<token>`)."""
    values: list[str] = []
    for secret in secret_values(env):
        values.append(secret)
        values += [line for line in secret.splitlines() if len(line) >= 6 and line != secret]
    for name in ("GITHUB_TOKEN", PUSH_TOKEN):
        if env.get(name):
            values.append(basic_auth(env[name]))
    return list(dict.fromkeys(values))


PUSH_TOKEN = "PLAN_RUNNER_PUSH_TOKEN"  # the action's `push-token` input: pushes that start workflows


def basic_auth(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()


@dataclass
class Reporter:
    """The job's voice: log lines on stdout, outputs and summary in the runner's files."""

    env: Mapping[str, str]
    out: TextIO = field(default_factory=lambda: sys.stdout)
    secrets: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.secrets = mask_values(self.env)

    def clean(self, text: str) -> str:
        return redact(text, self.secrets)

    def mask(self) -> None:
        """Ask the runner to mask every secret value; must run before anything else prints."""
        for value in self.secrets:
            self.out.write(f"::add-mask::{escape_data(value)}\n")
        self.out.flush()

    def add_secret(self, value: str) -> None:
        """A secret made while the job runs (a token minted from the GitHub App): masked by the runner from now on
        and redacted from everything this reporter writes, with the base64 form git sends it in."""
        fresh = [v for v in (value, basic_auth(value)) if value and len(value) >= 6 and v not in self.secrets]
        self.secrets.extend(fresh)
        for v in fresh:
            self.out.write(f"::add-mask::{escape_data(v)}\n")
        if fresh:
            self.out.flush()

    def log(self, text: str) -> None:
        self.out.write(defang(self.clean(text)) + "\n")
        self.out.flush()

    def annotate(self, level: str, message: str, title: str = "") -> None:
        assert level in ("error", "warning", "notice"), level
        self.out.write(format_command(level, self.clean(message), title=self.clean(title)) + "\n")
        self.out.flush()

    def set_output(self, name: str, value: str | None) -> None:
        self.outputs[name] = self.clean(value or "")

    def write_outputs(self) -> None:
        if self.env.get("GITHUB_OUTPUT"):
            append_outputs(self.env, **{n: self.outputs.get(n, "") for n in OUTPUT_NAMES},
                           **{n: v for n, v in self.outputs.items() if n not in OUTPUT_NAMES})
        else:
            for name in OUTPUT_NAMES:
                self.log(f"{name}: {self.outputs.get(name, '')}")

    @property
    def debugging(self) -> bool:
        """The runner's debug logging is on: it sets RUNNER_DEBUG=1 for every step when the repository's
        ACTIONS_STEP_DEBUG (or ACTIONS_RUNNER_DEBUG) secret or variable is true, or a run is re-run with debug logging."""
        return self.env.get("RUNNER_DEBUG") == "1" or parse_bool(self.env.get("ACTIONS_STEP_DEBUG"))

    def debug(self, text: str) -> None:
        """A `::debug::` line (shown only with debug logging on), secrets redacted; nothing when it is off."""
        if self.debugging:
            self.out.write(format_command("debug", self.clean(text)) + "\n")
            self.out.flush()

    def write_summary(self, markdown: str) -> None:
        """Append to `$GITHUB_STEP_SUMMARY` (the job summary), within GitHub's 1 MiB a step: a longer one is cut
        (an open code fence closed) with a note where the rest is; without the file, print."""
        text = self.clean(markdown).rstrip() + "\n"
        path = self.env.get("GITHUB_STEP_SUMMARY")
        if path:
            try:
                used = os.path.getsize(path)
            except OSError:
                used = 0
            text = cap_summary(text, SUMMARY_LIMIT - used)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
        else:
            self.out.write(defang(text))


def cap_summary(text: str, room: int) -> str:
    """`text` as it fits in `room` bytes of UTF-8: whole, or cut at a line with SUMMARY_CUT after it."""
    data = text.encode("utf-8")
    if len(data) <= room:
        return text
    note = SUMMARY_CUT
    keep = max(0, room - len(note.encode("utf-8")) - len("\n```\n"))
    head = data[:keep].decode("utf-8", "ignore")
    head = head[: head.rfind("\n") + 1] if "\n" in head else ""
    if sum(1 for line in head.splitlines() if line.lstrip().startswith("```")) % 2:
        head += "```\n"  # the cut fell inside a code block: close it, so the note is not shown as code
    return head + note if len((head + note).encode("utf-8")) <= room else ""


def parse_bool(value: str | None, default: bool = False) -> bool:
    if value is None or not value.strip():
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def git_credentials(token: str | None, server_url: str) -> Iterator[None]:
    """plan-runner's own git commands (fetch, push) authenticate with the token through
    `GIT_CONFIG_*` variables of this process only: nothing is written to `.git/config`, where
    the agent, working in the same tree, could read it; the agent's allow-listed environment
    never carries these variables. Inside another `git_credentials` for the same server (a step's mode, then a
    helper of it) nothing is added: git would send both headers."""
    if not token or not (server_url.startswith("https://") or loopback(server_url)):
        yield
        return
    header = f"http.{server_url.rstrip('/')}/.extraheader"
    n = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
    if any(os.environ.get(f"GIT_CONFIG_KEY_{i}") == header for i in range(n)):
        yield
        return
    names: tuple[str, ...] = ("GIT_CONFIG_COUNT",)
    names += (f"GIT_CONFIG_KEY_{n}", f"GIT_CONFIG_VALUE_{n}")
    saved = {k: os.environ.get(k) for k in names}
    os.environ[f"GIT_CONFIG_KEY_{n}"] = header
    os.environ[f"GIT_CONFIG_VALUE_{n}"] = f"AUTHORIZATION: basic {basic_auth(token)}"
    os.environ["GIT_CONFIG_COUNT"] = str(n + 1)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def loopback(url: str) -> bool:
    """A plain-http URL of this machine itself (a GitHub Enterprise test instance on the runner, the test suite's
    server): a token sent there never crosses a network. Any other http URL gets no token."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


def append_outputs(env: Mapping[str, str], **values: str) -> None:
    """Step outputs (`format_output`) appended to `$GITHUB_OUTPUT`, or printed without it. (The `Cache key` step
    has its own plain writer: it runs on the runner's python3 before anything is installed, runner/drivers/
    actions/install_cache.py.)"""
    text = "".join(format_output(k, v) for k, v in values.items())
    path = env.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
