"""`gateway extract`: saved pages extracted offline, as text or one JSON object per file."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway.cli import main
from gateway.cli.extract_cmd import MAX_PAGE_BYTES, guess_content_type

REPO = Path(__file__).resolve().parents[2]
PAGE = b"""<!doctype html><html><head><title>Harbour news</title>
<meta name="description" content="The harbour reopens"></head>
<body><nav><a href="/">Home</a> <a href="/news">News</a></nav><article><h2>Repairs</h2>
<p>The harbour reopened on Tuesday after three weeks of repairs, and the first
<a href="/ferry">ferry</a> left at dawn with a full deck of cars and commuters.</p>
<p>Engineers replaced the damaged pier, rebuilt the ramp and tested the new lights, while
the town council paid for extra buses during the closure.</p></article>
<footer>Copyright the harbour board</footer></body></html>"""


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "harbour.html"
    path.write_bytes(PAGE)
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "extract", *args],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )


def test_markdown_of_the_main_content(page: Path) -> None:
    done = run(str(page))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("## Repairs\n\nThe harbour reopened")
    assert "[ferry](/ferry)" in done.stdout
    assert "Home" not in done.stdout and "Copyright" not in done.stdout


def test_text_mode_and_json(page: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.html.gz"
    other.write_bytes(gzip.compress(b"<html><body><p>Short and gzipped.</p></body></html>"))
    done = run("--mode", "text", "--json", str(page), str(other))
    assert done.returncode == 0, done.stderr
    first, second = (orjson.loads(line) for line in done.stdout.splitlines())
    assert set(first) == {"file", "title", "description", "text"}
    assert first["file"] == str(page)
    assert first["title"] == "Harbour news" and first["description"] == "The harbour reopens"
    assert first["text"].startswith("Repairs\n\nThe harbour reopened")
    assert "first ferry left" in first["text"] and "](/" not in first["text"]
    assert second["text"] == "Short and gzipped." and second["title"] is None


def test_several_files_have_headers(page: Path, tmp_path: Path, capsys) -> None:
    note = tmp_path / "note.txt"
    note.write_text("plain words")
    assert main(["extract", str(page), str(note)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"==> {page} <==\n## Repairs")
    assert out.endswith(f"\n==> {note} <==\nplain words\n")


def test_content_type_overrides_the_guess(page: Path, capsys) -> None:
    assert main(["extract", "--content-type", "text/plain", str(page)]) == 0
    assert capsys.readouterr().out == PAGE.decode() + "\n"


def test_standard_input(monkeypatch, capsys) -> None:
    class Stdin:
        buffer = io.BytesIO(PAGE)

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert main(["extract", "--json", "-"]) == 0
    record = orjson.loads(capsys.readouterr().out)
    assert record["file"] == "-" and record["title"] == "Harbour news"


def test_unreadable_file_is_reported_and_the_rest_still_printed(page: Path, tmp_path) -> None:
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"\x1f\x8b" + b"not gzip at all")
    done = run("--json", str(tmp_path / "missing.html"), str(broken), str(page))
    assert done.returncode == 1
    assert f"cannot read {tmp_path / 'missing.html'}" in done.stderr
    assert "broken.gz: broken gzip data" in done.stderr
    assert orjson.loads(done.stdout)["title"] == "Harbour news"


def test_a_gzip_bomb_stops_at_the_size_cap(tmp_path: Path, capsys) -> None:
    bomb = tmp_path / "bomb.html.gz"
    bomb.write_bytes(gzip.compress(b" " * (MAX_PAGE_BYTES + 10), compresslevel=9))
    assert main(["extract", str(bomb)]) == 1
    assert "larger than" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "body", "expected"),
    [
        ("page.html", b"", "text/html"),
        ("page.htm.gz", b"", "text/html"),
        ("data.json", b"{}", "application/json"),
        ("saved", b"<!doctype html><p>x", "text/html"),
        ("saved", b"just words", "text/plain"),
    ],
)
def test_guess_content_type(name: str, body: bytes, expected: str) -> None:
    assert guess_content_type(name, body) == expected


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 800  # ~200 KB


@pytest.mark.parametrize(
    ("name", "body", "args", "why"),
    [
        ("shot.png", PNG, (), "the content type is image/png"),
        ("saved", PNG, (), "NUL bytes"),  # no telling name: the bytes say it
        ("saved", PNG, ("--content-type", "text/plain"), "NUL bytes"),
        ("blob", bytes(range(1, 32)) * 300, (), "control characters"),
        ("doc.pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", (), "application/pdf"),
    ],
    ids=["png-by-name", "png-by-bytes", "png-said-text", "controls", "pdf"],
)
def test_a_binary_file_is_refused_not_dumped(tmp_path: Path, name, body, args, why) -> None:
    path = tmp_path / name
    path.write_bytes(body)
    done = run(*args, str(path))
    assert done.returncode == 1
    assert done.stdout == ""  # never a byte of it on the terminal
    assert f"gateway extract: {path}: not text (" in done.stderr and why in done.stderr
    assert len(done.stderr) < 400


def test_utf16_text_is_still_text(tmp_path: Path, capsys) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes("\ufeffplain words here".encode("utf-16-le"))
    assert main(["extract", str(path)]) == 0
    assert "plain words here" in capsys.readouterr().out
