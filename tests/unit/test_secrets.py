"""What a secret is and how it is redacted: runner/adapters/secrets.py, the one place that decides both."""

from __future__ import annotations

import json

from runner.adapters import secrets
from runner.adapters.secrets import (
    forms,
    is_github_credential,
    key_like,
    redact,
    redact_bytes,
    redact_evidence,
    redact_file,
    secret_forms,
    secret_values,
)
from tests.core_builders import evidence, gate
from tests.unit.test_agentenv import JOB_ENV


def test_github_credential_names():
    """Job tokens, personal tokens and Actions runtime variables count as GitHub credentials; repo names do not."""
    assert is_github_credential("GITHUB_TOKEN")
    assert is_github_credential("gh_token")
    assert is_github_credential("ACTIONS_ID_TOKEN_REQUEST_URL")
    assert is_github_credential("GITHUB_PAT")
    assert not is_github_credential("GITHUB_REPOSITORY")
    assert not is_github_credential("ANTHROPIC_API_KEY")


def test_secret_values_lists_secret_looking_values_longest_first():
    """Values of token/secret/password/key variables are listed for masking; plain values are not."""
    values = secret_values(JOB_ENV)
    for v in ("sk-ant-secret-value", "ghs_job_token_value", "hunter2hunter2", "aws-secret-value", "runtime-token"):
        assert v in values
    assert "octo/repo" not in values and "plan-runner" not in values and "/tmp" not in values
    assert [len(v) for v in values] == sorted((len(v) for v in values), reverse=True)


def test_a_login_file_in_a_variable_makes_each_of_its_tokens_a_secret():
    """A variable holding a login file (JSON) is a secret, and so is each long string in it."""
    login = json.dumps({"tokens": {"access_token": "at-0123456789abcdef", "id": "short"}})
    values = secret_values({"CODEX_AUTH_JSON": login})
    assert login in values and "at-0123456789abcdef" in values and "short" not in values


def test_only_key_like_values_are_searched_in_commits():
    """Tokens and keys are searched for in the agent's commits; a short or word-like password is not (it would
    find ordinary code and park the plan for nothing), though it is still redacted."""
    values = ["sk-ant-api03-AbC123xyz", "ghs_0123456789abcdefABCDEF", "postgres", "hunter2", "correcthorsebattery",
              "123456789012345"]
    assert key_like(values) == ["sk-ant-api03-AbC123xyz", "ghs_0123456789abcdefABCDEF"]


def test_redact_masks_every_occurrence():
    """Redaction replaces each secret everywhere, the longer one first."""
    text = "key=abcdef123 and abcdef123456 and abcdef123"
    assert redact(text, ["abcdef123", "abcdef123456"]) == "key=*** and *** and ***"
    assert redact("nothing here", ["", "zzz"]) == "nothing here"


def test_a_value_shorter_than_the_minimum_is_no_secret_to_redact():
    """A five-character value would mask ordinary words: it is left alone, a six-character one is not."""
    assert redact("abcde abcdef", ["abcde", "abcdef"]) == "abcde ***"


def test_a_secret_is_redacted_as_it_appears_inside_a_json_string():
    """Transcripts and evidence are JSON: a secret with a quote, a backslash or a non-ASCII character appears
    escaped there, and that form is masked too."""
    secret = 'pa"ss\\wörd-123'
    line = json.dumps({"text": f"the key is {secret}"})
    assert secret not in line  # escaped in the JSON
    assert json.loads(redact(line, [secret]))["text"] == "the key is ***"
    assert redact(f"raw {secret}", [secret]) == "raw ***"
    assert forms([secret]) == sorted({secret, json.dumps(secret)[1:-1]}, key=len, reverse=True)
    assert secret_forms([secret]) == [f.encode() for f in forms([secret])]


def test_redaction_keeps_the_type_of_the_text():
    """A subclass of str (a report's `Markdown`) comes back as one, redacted or not."""
    class Marked(str):
        pass

    assert type(redact(Marked("key sk-0123456789"), ["sk-0123456789"])) is Marked
    assert type(redact(Marked("nothing"), ["sk-0123456789"])) is Marked


def test_redacted_evidence_holds_no_secret_in_any_field():
    """Gate output and the agent's words are kept and published: every field is cleared, escaped forms included."""
    secret = "sk-ant-SECRET\"VALUE-42"
    e = evidence(gates=(gate(output_tail=f"printed {secret}"),), handoff=f"handoff {secret}")
    clean = redact_evidence(e, [secret])
    assert secret not in clean.model_dump_json() and json.dumps(secret)[1:-1] not in clean.model_dump_json()
    assert clean.gates[0].output_tail == "printed ***" and clean.handoff == "handoff ***"
    assert redact_evidence(e, []) is e


def test_redaction_is_streamed_and_finds_secrets_across_chunk_boundaries(tmp_path, monkeypatch):
    """A secret split over two read chunks is still replaced; the result equals a whole-file replace."""
    secret = b"sk-ant-SECRETVALUE"
    data = b"".join(b"x" * i + secret + b"y" for i in range(40)) + b"tail sk-ant-SECRET"
    path = tmp_path / "t.log"
    path.write_bytes(data)
    monkeypatch.setattr(secrets, "CHUNK", 7)
    redact_file(path, [secret, b"sk-ant-SECRETV"])
    assert path.read_bytes() == data.replace(secret, b"***")
    assert secret not in path.read_bytes()


def test_a_file_without_a_secret_is_left_as_it_was(tmp_path):
    """Nothing to replace: the file is not rewritten (its identity and time stay), and no temporary is left."""
    path = tmp_path / "t.log"
    path.write_bytes(b"nothing secret here\n")
    before = path.stat()
    redact_file(path, [b"sk-ant-SECRETVALUE"])
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in tmp_path.iterdir()] == ["t.log"]
    assert redact_bytes(b"a sk-ant-SECRETVALUE b", [b"sk-ant-SECRETVALUE"]) == b"a *** b"
