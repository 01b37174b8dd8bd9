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
    assert f"{config}:2:1: unsafe_bind: " in capsys.readouterr().out


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
