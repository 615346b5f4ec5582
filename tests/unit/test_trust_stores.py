"""The certificates a user tells clients to trust are shown in the room; nothing private comes with them."""

from __future__ import annotations

from pathlib import Path

from runner.adapters.sandbox.identity import trust_stores


def test_named_certificate_files_and_folders_are_shown(tmp_path: Path) -> None:
    ca = tmp_path / "corp-ca.pem"
    ca.write_text("cert")
    folder = tmp_path / "certs"
    folder.mkdir()
    link = tmp_path / "link.pem"
    link.symlink_to(ca)
    env = {"NODE_EXTRA_CA_CERTS": str(ca), "SSL_CERT_DIR": str(folder), "CODEX_CA_CERTIFICATE": str(link),
           "SSL_CERT_FILE": str(tmp_path / "missing.pem"), "REQUESTS_CA_BUNDLE": "relative.pem",
           "PIP_CERT": str(folder), "OTHER": str(ca)}
    assert trust_stores(env) == (folder, ca)  # resolved, once each; a folder only for SSL_CERT_DIR


def test_a_certificate_inside_a_private_folder_is_not(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "certs").mkdir(parents=True)
    (repo / "certs" / "ca.pem").write_text("cert")
    env = {"SSL_CERT_FILE": str(repo / "certs" / "ca.pem"), "SSL_CERT_DIR": str(tmp_path)}
    assert trust_stores(env, private=[repo]) == ()  # in it, or holding it
