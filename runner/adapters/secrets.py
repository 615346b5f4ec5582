"""What a secret is, and every redaction of one: the one place plan-runner decides both.

A secret is the value of a variable whose name says so (a token, a key, a password, a credential, `AUTH`)
or that is a GitHub credential (the job's token, a personal token, the Actions runtime's), of at least
`MIN_LENGTH` characters; a variable that holds a login file (JSON) makes each long string in it one too.
A secret is replaced by `***` wherever plan-runner prints, publishes or stores text, in each form it can
take there (`forms`): as it is, and as it appears inside a JSON string (transcripts and evidence are JSON,
where a quote, a backslash or a non-ASCII character of the secret is escaped). Only the key-like ones
(long, with letters and digits) are searched for in the agent's commits (`key_like`): a word-like password
would find ordinary code. A file is redacted in chunks, a secret split between two chunks included.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from runner.core.evidence import Evidence

MIN_LENGTH = 6  # a shorter value would mask ordinary words
MASK = "***"
CHUNK = 1 << 20  # bytes of a file redacted at a time

# The GitHub credentials: never handed to an agent, whatever the plan says (they let it push, dispatch or read
# secrets), and always redacted.
GITHUB_CREDENTIALS = frozenset({"GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN",
                                # the action's push token and the GitHub App's key it is minted from
                                "PLAN_RUNNER_PUSH_TOKEN", "PLAN_RUNNER_APP_PRIVATE_KEY"})
GITHUB_PREFIXES = ("GITHUB_", "GH_", "ACTIONS_")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|_KEY$|^KEY$|APIKEY|API_KEY|AUTH(?!OR)", re.IGNORECASE)


def is_github_credential(name: str) -> bool:
    upper = name.upper()
    if upper in GITHUB_CREDENTIALS:
        return True
    if upper.startswith("ACTIONS_"):
        return True  # runtime token, OIDC request token/URL, cache URL: all job capabilities
    return upper.startswith(GITHUB_PREFIXES) and bool(SECRET_NAME.search(upper) or "PAT" in upper.split("_"))


def secret_values(env: Mapping[str, str], *, min_length: int = MIN_LENGTH) -> list[str]:
    """Values of secret-looking variables in `env`, longest first, to mask in logs and redact in reports."""
    values = {v for k, v in env.items() if (SECRET_NAME.search(k) or is_github_credential(k)) and len(v) >= min_length}
    for value in list(values):  # a secret holding a login file (CODEX_AUTH_JSON): each token in it is one too
        if value.lstrip().startswith("{"):
            values.update(v for v in json_strings(value) if len(v) >= 16)
    return sorted(values, key=lambda v: (-len(v), v))


def json_strings(text: str) -> list[str]:
    """Every string value in the JSON document `text` (none when it is not JSON)."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    found: list[str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found.append(item)
    return found


def key_like(values: Iterable[str], *, min_length: int = 12) -> list[str]:
    """The secret values worth searching for in the agent's commits: long, with letters and digits,
    like a token or key. A short or word-like value (`DB_PASSWORD=postgres`) would find ordinary code
    and park the plan for nothing; it is still masked and redacted everywhere plan-runner prints."""
    return [v for v in values if len(v) >= min_length and any(c.isdigit() for c in v) and any(c.isalpha() for c in v)]


# --- redaction -------------------------------------------------------------------------------------


def forms(secrets: Iterable[str]) -> list[str]:
    """Each secret as printed and as it appears inside a JSON string, longest first (so a secret that holds
    another is masked whole)."""
    found = set()
    for s in secrets:
        if s and len(s) >= MIN_LENGTH:
            found.add(s)
            found.add(json.dumps(s)[1:-1])
    return sorted(found, key=len, reverse=True)


def secret_forms(secrets: Iterable[str]) -> list[bytes]:
    """`forms` as the byte strings a stored file is cleared of (`redact_file`)."""
    return [form.encode() for form in forms(secrets)]


T = TypeVar("T", bound=str)


def redact(text: T, secrets: Iterable[str]) -> T:
    """`text` with every form of every secret replaced by `***`; of the same type (a `Markdown` stays one)."""
    clean = str(text)
    for form in forms(secrets):
        clean = clean.replace(form, MASK)
    return text if clean == text else type(text)(clean)


def redact_evidence(evidence: Evidence, secrets: Iterable[str]) -> Evidence:
    """The same evidence with every known secret value replaced by `***` (gate tails, hints, errors)."""
    found = forms(secrets)
    if not found:
        return evidence
    raw = evidence.model_dump_json()
    clean = redact(raw, found)  # (the JSON-escaped forms' own escaped forms too: text quoted inside a field)
    return evidence if clean == raw else Evidence.model_validate_json(clean)


def redact_bytes(data: bytes, byte_forms: Sequence[bytes]) -> bytes:
    for form in byte_forms:
        data = data.replace(form, MASK.encode())
    return data


def redact_file(path: Path, byte_forms: Sequence[bytes]) -> None:
    """Replace every form with `***` in the file, streamed in chunks (a form that straddles two chunks
    is still found: a chunk is only written up to where no form can begin and end beyond it)."""
    byte_forms = sorted({f for f in byte_forms if f}, key=len, reverse=True)
    if not byte_forms:
        return
    tmp = path.with_name(path.name + ".plan-runner-redact")
    changed = False
    with path.open("rb") as src, tmp.open("wb") as dst:
        carry = b""
        while True:
            chunk = src.read(CHUNK)
            buf = carry + chunk
            end = len(buf) if not chunk else _safe_end(buf, byte_forms)
            head = buf[:end]
            clean = redact_bytes(head, byte_forms)
            changed |= clean != head
            dst.write(clean)
            carry = buf[end:]
            if not chunk:
                break
    if changed:
        os.replace(tmp, path)
    else:
        tmp.unlink()


def _safe_end(buf: bytes, byte_forms: Sequence[bytes]) -> int:
    """Where `buf` can be cut: no form can start before it and end after it (given more data may follow)."""
    end = max(0, len(buf) - (max(len(f) for f in byte_forms) - 1))
    moved = True
    while moved:
        moved = False
        for form in byte_forms:
            i = buf.find(form, max(0, end - len(form) + 1))
            while i != -1 and i < end:
                if i + len(form) > end:
                    end, moved = i + len(form), True
                i = buf.find(form, i + 1)
    return end
