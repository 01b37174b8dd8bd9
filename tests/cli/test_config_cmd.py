"""`gateway config check`: the configuration and every policy it names, FILE:LINE:COL."""

from __future__ import annotations

import textwrap

from gateway.cli import main


def write(path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_every_problem_of_the_config_and_its_policies(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "bad.yaml", "name: bad\ndefault: maybe\n")
    write(tmp_path / "good.yaml", "name: good\n")
    config = write(
        tmp_path / "gateway.yaml",
        """\
        policy: good.yaml
        clients:
          - {id: a, token_sha256: "%s", policy: bad.yaml}
        """
        % ("ab" * 32),
    )
    assert main(["config", "check", config]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("bad.yaml:2:10: ") for line in out), out
    assert "good.yaml: ok (name good, sha256 " in "\n".join(out)


def test_config_errors_use_file_line_col(tmp_path, capsys) -> None:
    config = write(tmp_path / "gateway.yaml", "listen: {port: 0}\nfoo: 1\n")
    assert main(["config", "check", config]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{config}:1:16: out_of_range: ")
    assert out[1].startswith(f"{config}:2:1: unknown_key: ")


def test_a_missing_provider_key_is_a_warning_at_its_line(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("BRAVE_TEST_KEY", raising=False)
    config = write(
        tmp_path / "gateway.yaml",
        """\
        search:
          providers:
            - {id: brave, kind: brave, api_key_env: BRAVE_TEST_KEY}
        """,
    )
    assert main(["config", "check", config]) == 0  # serve would start; searches would fail
    out = capsys.readouterr().out
    assert f"{config}:3:45: warning[missing_env]: " in out and "BRAVE_TEST_KEY" in out
    assert "policy: the embedded default" in out
    monkeypatch.setenv("BRAVE_TEST_KEY", "x")
    assert main(["config", "check", config]) == 0
    assert "missing_env" not in capsys.readouterr().out


def test_an_unsafe_bind_fails_the_check(tmp_path, capsys) -> None:
    config = write(tmp_path / "gateway.yaml", "# open to the network\nlisten: {host: 0.0.0.0}\n")
    assert main(["config", "check", config]) == 1
    out = capsys.readouterr().out
    assert f"{config}:2:10: unsafe_bind: " in out  # at listen.host, the key that decides
    assert "ok (" not in out and f"{config}: 1 error; `gateway serve` would refuse it" in out
    block = write(tmp_path / "block.yaml", "server: {}\nlisten:\n  port: 9000\n  host: '::'\n")
    assert main(["config", "check", block]) == 1
    assert f"{block}:4:3: unsafe_bind: " in capsys.readouterr().out


def test_an_audit_folder_serve_could_not_open_fails_the_check(tmp_path, capsys) -> None:
    (tmp_path / "blocker").write_text("a file, not a folder\n")
    config = write(tmp_path / "gateway.yaml", "audit:\n  path: blocker/audit/gateway.jsonl\n")
    assert main(["config", "check", config]) == 1
    out = capsys.readouterr().out
    assert f"{config}:2:3: unwritable_audit: audit.path: " in out
    assert "blocker is a file where a folder should be" in out and "ok (" not in out
    (tmp_path / "audit" / "gateway-x.jsonl").mkdir(parents=True)
    folder = write(tmp_path / "folder.yaml", "instance_id: x\n")  # the default audit.path
    assert main(["config", "check", folder]) == 1
    out = capsys.readouterr().out
    assert f"{folder}:1:1: unwritable_audit: audit.path (its default): " in out
    assert "is a folder, not a file" in out
    fine = write(tmp_path / "fine.yaml", "audit:\n  path: new/deeper/g-{instance}.jsonl\n")
    assert main(["config", "check", fine]) == 0  # serve makes missing folders
    assert not (tmp_path / "new").exists()  # and the check made none


def test_the_file_comes_from_gateway_config(tmp_path, capsys, monkeypatch) -> None:
    config = write(tmp_path / "gateway.yaml", "listen: {port: 9999}\n")
    monkeypatch.setenv("GATEWAY_CONFIG", config)
    assert main(["config", "check"]) == 0
    assert f"{config}: ok (0 clients, 0 policies)" in capsys.readouterr().out
    monkeypatch.delenv("GATEWAY_CONFIG")
    assert main(["config", "check"]) == 2
    assert "GATEWAY_CONFIG" in capsys.readouterr().err


def test_a_key_file_serve_could_not_load(tmp_path, capsys) -> None:
    (tmp_path / "signing.key").write_text("not a key\n")
    config = write(tmp_path / "gateway.yaml", "# keys\nsigning_key: signing.key\n")
    assert main(["config", "check", config]) == 1
    out = capsys.readouterr().out
    assert f"{config}:2:1: bad_key: signing_key: " in out
    assert main(["keys", "generate", str(tmp_path / "keys")]) == 0
    good = write(tmp_path / "good.yaml", "signing_key: keys/signing.key\n")
    capsys.readouterr()
    assert main(["config", "check", good]) == 0
