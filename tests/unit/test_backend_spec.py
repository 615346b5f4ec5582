"""A backend is one unit: its row in runner.core.backend_spec.BACKENDS is what the plan's schema, get_backend,
the preflight, the agent's allow-list, the action's installer and `logs` read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runner.adapters.sandbox.agentenv import build_agent_env, credential_vars
from runner.backends import get_backend
from runner.core.backend_spec import BACKEND_NAMES, BACKENDS
from runner.core.errors import PlanRunnerError
from runner.core.plan import AgentConfig
from runner.drivers.cli import transcripts
from runner.drivers.actions.install import CLIS

ROOT = Path(__file__).resolve().parents[2]


def test_the_plan_accepts_exactly_the_backends_of_the_table():
    """`agent.backend` (and the published JSON schema) lists the table's rows, nothing more or less."""
    schema = json.loads((ROOT / "docs/plan.schema.json").read_text())
    text = json.dumps(schema)
    for name in BACKEND_NAMES:
        assert AgentConfig(backend=name).backend == name
        assert json.dumps(name) in text
    with pytest.raises(ValueError):
        AgentConfig(backend="not-a-backend")
    assert AgentConfig.model_json_schema()["properties"]["backend"]["enum"] == list(BACKEND_NAMES)


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_get_backend_builds_the_class_the_row_names(name):
    backend = get_backend(name)
    assert backend.name == name
    module, _, cls = BACKENDS[name].factory.partition(":")
    assert type(backend).__module__ == module and type(backend).__name__ == cls


def test_an_unknown_backend_is_a_clear_error():
    with pytest.raises(PlanRunnerError) as err:
        get_backend("nope")
    assert "claude-code" in err.value.render()


def test_every_transcript_format_has_a_reader():
    """`logs` reads every backend's files by its row; a row without a reader is caught here."""
    assert set(transcripts._READERS) == set(BACKENDS)
    for spec in BACKENDS.values():
        assert spec.transcripts, f"{spec.name} declares no transcript file"


def test_the_installer_and_the_test_scripts_pin_the_same_versions():
    """The action installs the row's npm package at its version; scripts/install-*.sh give the tests the same."""
    assert set(CLIS) == {"claude-code", "codex"}
    for name, script in (("claude-code", "install-claude.sh"), ("codex", "install-codex.sh")):
        spec = BACKENDS[name]
        text = (ROOT / "scripts" / script).read_text()
        assert re.search(r"VERSION:-" + re.escape(spec.install.version) + r"\}", text), script
        assert spec.install.package in text
        assert CLIS[name].env == spec.executable.override_env


def test_a_cloud_way_of_paying_passes_its_own_variables_only_when_selected():
    """Claude Code gets AWS_* only when CLAUDE_CODE_USE_BEDROCK selects Bedrock, the Google variables only with
    Vertex; with an API key it sees neither (least credentials)."""
    parent = {"PATH": "/bin", "ANTHROPIC_API_KEY": "a", "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s",
              "AWS_REGION": "us-east-1", "GOOGLE_APPLICATION_CREDENTIALS": "/f", "CLOUD_ML_REGION": "us-east5"}

    def names(env):
        return set(build_agent_env(env, api_key_vars=credential_vars("claude-code", env))) - {"PATH"}

    assert names(parent) == {"ANTHROPIC_API_KEY"}
    bedrock = {**parent, "CLAUDE_CODE_USE_BEDROCK": "1"}
    assert names(bedrock) == {"ANTHROPIC_API_KEY", "CLAUDE_CODE_USE_BEDROCK", "AWS_ACCESS_KEY_ID",
                              "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}
    vertex = {**parent, "CLAUDE_CODE_USE_VERTEX": "1"}
    assert names(vertex) == {"ANTHROPIC_API_KEY", "CLAUDE_CODE_USE_VERTEX", "GOOGLE_APPLICATION_CREDENTIALS",
                             "CLOUD_ML_REGION"}
    assert names({**parent, "CLAUDE_CODE_USE_BEDROCK": "0"}) == {"ANTHROPIC_API_KEY", "CLAUDE_CODE_USE_BEDROCK"}
    # the GitHub token never, whatever the way
    assert "GITHUB_TOKEN" not in build_agent_env({**bedrock, "GITHUB_TOKEN": "t"},
                                                 api_key_vars=credential_vars("claude-code", bedrock))


def test_logs_read_each_backend_by_its_rows_files(tmp_path):
    """One transcript per backend, named as its row says: `logs` renders each with its own reader."""
    (tmp_path / "claude-stream.jsonl").write_text(json.dumps(
        {"type": "assistant", "session_id": "s1", "message": {"content": [{"type": "text", "text": "CLAUDE-SAID"}]}})
        + "\n")
    (tmp_path / "codex-events.jsonl").write_text(
        json.dumps({"type": "thread.started", "thread_id": "t1"}) + "\n"
        + json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "CODEX-SAID"}}) + "\n")
    (tmp_path / "abc.json").write_text(json.dumps(
        {"session_id": "abc", "messages": [{"role": "assistant", "content": "BUILTIN-SAID"}]}))
    (tmp_path / "script-1.jsonl").write_text(json.dumps({"type": "text", "text": "SCRIPT-SAID"}) + "\n")
    (tmp_path / "command-output.log").write_text("COMMAND-SAID\n")
    text = "\n".join(transcripts.render_dir(tmp_path))
    for word in ("CLAUDE-SAID", "CODEX-SAID", "BUILTIN-SAID", "SCRIPT-SAID", "COMMAND-SAID"):
        assert word in text
    assert "CODEX-SAID" not in "\n".join(transcripts.render_dir(tmp_path, "other-thread"))
