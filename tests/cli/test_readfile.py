"""read_capped: a command's input file or standard input, cut at a size cap."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from gateway.cli.readfile import ReadError, read_capped


def test_reads_a_file_up_to_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(b"x" * 10)
    assert read_capped(str(path), 10) == b"x" * 10
    with pytest.raises(ReadError, match="larger than"):
        read_capped(str(path), 9)


def test_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="cannot read .*missing"):
        read_capped(str(tmp_path / "missing"), 10)


def test_dash_reads_standard_input(monkeypatch) -> None:
    class Stdin:
        buffer = io.BytesIO(b"from stdin")

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert read_capped("-", 100) == b"from stdin"
