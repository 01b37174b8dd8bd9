from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.provenance.dsse import Signer, keyid_of, load_public_key


def test_generate_writes_a_usable_key_pair(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["keys", "generate", str(tmp_path / "keys")]) == 0
    out = capsys.readouterr().out
    keyid = re.search(r"^keyid: ([0-9a-f]{64})$", out, re.M)
    assert keyid is not None
    private_path, public_path = tmp_path / "keys/signing.key", tmp_path / "keys/signing.pub"
    assert str(private_path) in out and str(public_path) in out
    assert stat.S_IMODE(private_path.stat().st_mode) == 0o600
    assert Signer.from_pem_file(private_path).keyid == keyid.group(1)
    assert keyid_of(load_public_key(public_path)) == keyid.group(1)


def test_generate_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["keys", "generate", str(tmp_path)]) == 0
    before = (tmp_path / "signing.key").read_bytes()
    capsys.readouterr()
    assert main(["keys", "generate", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "already exists; refusing to overwrite" in captured.err
    assert captured.out == ""
    assert (tmp_path / "signing.key").read_bytes() == before


def test_generate_reports_an_unwritable_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["keys", "generate", str(blocker / "keys")]) == 1
    assert "cannot create" in capsys.readouterr().err


def test_keys_needs_a_subcommand(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        main(["keys"])
    assert info.value.code == 2


def test_the_console_entry_point_runs_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "keys", "generate", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("keyid: ")
