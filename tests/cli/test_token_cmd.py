"""`gateway token new`: a fresh token each time, and a clients entry the loader accepts."""

from __future__ import annotations

import hashlib
import re

from gateway.cli import main
from gateway.configload import load_config_bytes


def test_token_and_its_entry(tmp_path, capsys) -> None:
    assert main(["token", "new", "research-agent"]) == 0
    out = capsys.readouterr().out
    token = re.search(r"^token: (gwt_[A-Za-z0-9_-]{43})$", out, re.M).group(1)
    entry = re.search(r"^  (- \{id: research-agent, .*\})$", out, re.M).group(1)
    config = load_config_bytes(
        f"clients:\n  {entry}\n".encode(), source="t.yaml", base_dir=str(tmp_path)
    )
    assert config.clients[0].id == "research-agent"
    assert config.clients[0].token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert main(["token", "new", "research-agent"]) == 0
    assert token not in capsys.readouterr().out  # never the same token twice


def test_token_entry_names_the_policy(tmp_path, capsys) -> None:
    (tmp_path / "p.yaml").write_text("name: p\n")
    assert main(["token", "new", "a", "--policy", "p.yaml"]) == 0
    entry = re.search(r"^  (- \{.*\})$", capsys.readouterr().out, re.M).group(1)
    config = load_config_bytes(
        f"clients:\n  {entry}\n".encode(), source="t.yaml", base_dir=str(tmp_path)
    )
    assert config.clients[0].policy == str(tmp_path / "p.yaml")


def test_a_bad_client_id_is_refused(capsys) -> None:
    assert main(["token", "new", "../etc"]) == 2
    captured = capsys.readouterr()
    assert "not a client id" in captured.err and "gwt_" not in captured.out


def test_role_is_written_into_the_entry_the_loader_accepts(tmp_path, capsys) -> None:
    from gateway.configload.clients import CLIENT_ROLES

    for role in CLIENT_ROLES:
        assert main(["token", "new", "someone", "--role", role]) == 0
        entry = re.search(r"^  (- \{.*\})$", capsys.readouterr().out, re.M).group(1)
        config = load_config_bytes(
            f"clients:\n  {entry}\n".encode(), source="t.yaml", base_dir=str(tmp_path)
        )
        assert config.clients[0].role == role
        assert ("role:" in entry) == (role != "agent")  # the default is left out


def test_a_role_the_configuration_does_not_know_is_refused(capsys) -> None:
    assert main(["token", "new", "someone", "--role", "admin"]) == 2
    captured = capsys.readouterr()
    assert "not a role the configuration accepts" in captured.err and "reviewer" in captured.err
    assert "gwt_" not in captured.out  # no token made for a line that would not load
