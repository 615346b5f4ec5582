"""The gate battery: plan-runner re-runs every gate itself and records real results.

Command gates run in a shell through `runner.adapters.sandbox.proc.run` (own process group, the
agent's identity; a timeout kills the whole group, and nothing a gate started
outlives it), their output streamed into a bounded tail. HTTP gates are red on a
transport error, a non-2xx status, or a 2xx body that reports failure (docs/plan-format.md,
"Front matter"). A required gate that fails is run once more so a flaky test is
reported as flaky instead of burning an attempt. This module is an adapter: it
spawns processes and speaks HTTP; the verdict is computed elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.adapters.sandbox import proc
from runner.core.evidence import GateResult
from runner.core.fingerprint import fingerprint
from runner.core.plan import GateConfig
from runner.adapters.sandbox.identity import Identity
from runner.core.tail import BoundedTail

__all__ = [
    "GateCache",
    "GateEvent",
    "body_failure",
    "gate_definition_hash",
    "run_command_gate",
    "run_gate",
    "run_gates",
    "run_http_gate",
]

TAIL_BYTES = 16384
_TERM_GRACE_S = 1.0  # SIGTERM first so test runners can clean up, then SIGKILL
_DRAIN_GRACE_S = 2.0  # after the shell exits, how long a background child may hold the pipe


@dataclass(frozen=True)
class GateEvent:
    """Live progress for the terminal and the summary."""

    kind: Literal["start", "rerun", "finish", "cached"]
    gate: str
    result: GateResult | None = None


ChecksRunner = Callable[[GateConfig], GateResult]


def run_gates(
    gates: Sequence[GateConfig],
    *,
    workdir: Path,
    env: Mapping[str, str],
    tree_hash: str | None = None,
    cache: GateCache | None = None,
    on_event: Callable[[GateEvent], None] | None = None,
    checks_runner: ChecksRunner | None = None,
    tail_bytes: int = TAIL_BYTES,
    identity: Identity | None = None,
) -> tuple[GateResult, ...]:
    """Run every gate in order and return one result per gate.

    A required gate that fails is re-run once: green the second time makes it
    ``flaky`` (and green), red again keeps it red with ``reran``. Optional gates
    run once. Green command-gate results are cached by (tree hash, gate
    definition) when both ``tree_hash`` and ``cache`` are given.
    """
    emit = on_event or (lambda event: None)
    results = []
    for gate in gates:
        cached = cache.get(tree_hash, gate) if (cache and tree_hash and gate.kind == "command") else None
        if cached is not None:
            emit(GateEvent("cached", gate.name, cached))
            results.append(cached)
            continue
        emit(GateEvent("start", gate.name))
        result = run_gate(gate, workdir=workdir, env=env, checks_runner=checks_runner, tail_bytes=tail_bytes,
                          identity=identity)
        if gate.required and not result.passed and _worth_rerunning(gate, result, checks_runner):
            emit(GateEvent("rerun", gate.name, result))
            second = run_gate(gate, workdir=workdir, env=env, checks_runner=checks_runner, tail_bytes=tail_bytes,
                          identity=identity)
            if second.passed:
                # Keep the first failure's tail: it is the evidence that the gate is flaky.
                result = second.model_copy(update={"reran": True, "flaky": True, "output_tail": result.output_tail})
            else:
                result = second.model_copy(update={"reran": True})
        if cache and tree_hash and gate.kind == "command" and result.passed and not result.timed_out:
            cache.put(tree_hash, gate, result)
        emit(GateEvent("finish", gate.name, result))
        results.append(result)
    return tuple(results)


def _worth_rerunning(gate: GateConfig, result: GateResult, checks_runner: ChecksRunner | None) -> bool:
    # Without a checks runner the result is a fixed "cannot check here"; running it again says nothing new.
    # Neither does a gate only a person can unblock (`needs_human`).
    return not (gate.kind == "checks" and checks_runner is None) and not result.needs_human


def run_gate(
    gate: GateConfig,
    *,
    workdir: Path,
    env: Mapping[str, str],
    checks_runner: ChecksRunner | None = None,
    tail_bytes: int = TAIL_BYTES,
    identity: Identity | None = None,
) -> GateResult:
    """Run one gate once (command gates as `identity`: gate code is untrusted)."""
    if gate.kind == "command":
        return run_command_gate(gate, workdir=workdir, env=env, tail_bytes=tail_bytes, identity=identity)
    if gate.kind == "http":
        return run_http_gate(gate, tail_bytes=tail_bytes)
    if checks_runner is not None:
        return checks_runner(gate)
    # Remote CI can only be asked on GitHub; locally the gate is reported but cannot decide.
    return GateResult(
        name=gate.name,
        required=False,
        kind="checks",
        passed=False,
        error="remote checks need GitHub",
    )


def _shell() -> list[str]:
    bash = shutil.which("bash")
    return [bash, "-c"] if bash else ["/bin/sh", "-c"]


def run_command_gate(
    gate: GateConfig, *, workdir: Path, env: Mapping[str, str], tail_bytes: int = TAIL_BYTES,
    identity: Identity | None = None,
) -> GateResult:
    """Run ``gate.run`` in a shell; exit code 0 is green. Output is streamed, never held whole."""
    assert gate.run is not None
    cwd = Path(workdir) / gate.cwd if gate.cwd else Path(workdir)
    full_env = {**env, **gate.env}
    tail = BoundedTail(tail_bytes)
    base = {"name": gate.name, "required": gate.required, "kind": "command"}
    if not cwd.is_dir():
        why = f"the gate's working directory {gate.cwd!r} does not exist in the work tree"
        return GateResult(**base, passed=False, error=why, fingerprint=fingerprint(f"{gate.name}\n{why}"))
    try:
        # its own process group, as `identity`: a timeout kills every descendant, and after the gate
        # nothing it started runs on (a daemon that called setsid included, when isolated)
        finished = proc.run([*_shell(), gate.run], cwd=cwd, env=full_env, time_limit_s=gate.timeout_s,
                            on_output=tail.feed, merge_stderr=True, identity=identity,
                            term_grace_s=_TERM_GRACE_S, drain_s=_DRAIN_GRACE_S,
                            stop_leftovers_at_exit=False)  # a background job may finish its output
    except proc.StartFailed as exc:
        why = f"could not start the gate: {exc.error.strerror or exc.error}"
        return GateResult(**base, passed=False, error=why, fingerprint=fingerprint(f"{gate.name}\n{why}"))
    timed_out = finished.reason == "time_limit"
    output = tail.text()
    error = None
    if timed_out:
        error = f"timed out after {gate.timeout_s:g}s; the process group was killed"
    passed = finished.succeeded
    return GateResult(
        **base,
        passed=passed,
        exit_code=finished.shell_code,  # the shell's convention for "killed by signal N": 128 + N
        duration_s=round(finished.duration_s, 3),
        output_tail=output,
        fingerprint="" if passed else fingerprint(f"{gate.name}\n{error or ''}\n{output}"),
        timed_out=timed_out,
        error=error,
    )


_JSON_PARSE_LIMIT = 1 << 20  # bodies larger than this are judged by status alone


def run_http_gate(gate: GateConfig, *, tail_bytes: int = TAIL_BYTES) -> GateResult:
    """GET ``gate.http``: green only for a 2xx whose body does not report failure."""
    assert gate.http is not None
    import httpx  # only HTTP gates need it; importing it costs every session a quarter second

    base = {"name": gate.name, "required": gate.required, "kind": "http"}
    tail = BoundedTail(tail_bytes)
    head = bytearray()
    started = time.monotonic()
    deadline = started + gate.timeout_s
    status = None
    content_type = ""
    try:
        with httpx.Client(timeout=min(gate.timeout_s, 60.0), follow_redirects=True) as client:
            with client.stream("GET", gate.http, headers={"Accept": "application/json, */*"}) as response:
                status = response.status_code
                content_type = response.headers.get("content-type", "")
                for chunk in response.iter_bytes():
                    tail.feed(chunk)
                    if len(head) <= _JSON_PARSE_LIMIT:
                        head += chunk[: _JSON_PARSE_LIMIT + 1 - len(head)]
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("the body did not finish within the gate's timeout")
    except httpx.HTTPError as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        timed_out = isinstance(exc, httpx.TimeoutException)
        return GateResult(
            **base,
            passed=False,
            http_status=status,
            duration_s=round(time.monotonic() - started, 3),
            output_tail=tail.text(),
            timed_out=timed_out,
            error=why,
            fingerprint=fingerprint(f"{gate.name}\n{type(exc).__name__}"),
        )
    body = tail.text()
    problem = None
    if not 200 <= status < 300:
        problem = f"HTTP {status}"
    elif len(head) <= _JSON_PARSE_LIMIT:
        problem = body_failure(bytes(head), content_type)
    passed = problem is None
    return GateResult(
        **base,
        passed=passed,
        http_status=status,
        duration_s=round(time.monotonic() - started, 3),
        output_tail=body,
        error=problem,
        fingerprint="" if passed else fingerprint(f"{gate.name}\n{problem}\n{body}"),
    )


_FAILED_STATUS = frozenset({"error", "fail", "failed", "failure", "down", "unhealthy", "ko", "critical"})


def body_failure(body: bytes, content_type: str = "") -> str | None:
    """Why a 2xx body reports failure, or None when it does not (or is not JSON).

    A body that says it did not succeed is a failure whatever the status code
    (docs/plan-format.md, "Front matter"): ``success: false``, ``ok: false``, ``healthy: false``, a
    failing ``status``, or a non-empty ``error``/``errors``.
    """
    text = body.decode("utf-8", errors="replace").strip()
    if not text or ("json" not in content_type.lower() and text[:1] not in "{["):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    fields = {str(k).lower(): v for k, v in data.items()}
    for key in ("success", "ok", "healthy"):
        value = fields.get(key)
        if value is False or (isinstance(value, str) and value.strip().lower() == "false"):
            return f"the body reports failure: {key} is false"
    status = fields.get("status")
    if isinstance(status, str) and status.strip().lower() in _FAILED_STATUS:
        return f"the body reports failure: status is {status!r}"
    for key in ("error", "errors"):
        value = fields.get(key)
        if value not in (None, False, "", [], {}, 0):
            return f"the body reports failure: {key} is {json.dumps(value)[:200]}"
    return None


def gate_definition_hash(gate: GateConfig) -> str:
    """Hash of everything that defines what a gate does; any edit is a cache miss."""
    return hashlib.sha256(gate.model_dump_json(by_alias=True).encode()).hexdigest()[:16]


class GateCache:
    """Green command-gate results keyed by (tree hash, gate definition hash), in one JSON file.

    Only green results are stored: a red gate is always re-run, since red may
    come from the environment rather than the tree. A corrupt or unreadable file
    is ignored and rewritten on the next store.
    """

    MAX_ENTRIES = 256

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _load(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        entries = data.get("entries") if isinstance(data, dict) else None
        return entries if isinstance(entries, dict) else {}

    @staticmethod
    def _key(tree_hash: str, gate: GateConfig) -> str:
        return f"{tree_hash}:{gate_definition_hash(gate)}"

    def get(self, tree_hash: str, gate: GateConfig) -> GateResult | None:
        raw = self._load().get(self._key(tree_hash, gate))
        if raw is None:
            return None
        try:
            result = GateResult.model_validate(raw)
        except ValueError:
            return None
        return result.model_copy(update={"cached": True, "required": gate.required})

    def put(self, tree_hash: str, gate: GateConfig, result: GateResult) -> None:
        entries = self._load()
        key = self._key(tree_hash, gate)
        entries.pop(key, None)
        entries[key] = result.model_copy(update={"cached": False}).model_dump(mode="json")
        while len(entries) > self.MAX_ENTRIES:  # oldest first: dicts keep insertion order
            entries.pop(next(iter(entries)))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": 1, "entries": entries}), encoding="utf-8")
        os.replace(tmp, self.path)
