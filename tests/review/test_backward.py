"""Reading files backwards, with and without literal needles, and bisecting by time."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gateway.audit.chain import format_timestamp
from gateway.review import backward
from gateway.review.backward import line_timestamp, lines_backwards, offset_after


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few bytes, so that lines straddle chunk edges everywhere."""
    monkeypatch.setattr(backward, "FIRST_CHUNK", 7)
    monkeypatch.setattr(backward, "MAX_CHUNK", 53)


def write(path: Path, lines: list[bytes], tail: bytes = b"") -> list[tuple[int, bytes]]:
    data, expected = b"", []
    for line in lines:
        expected.append((len(data), line))
        data += line + b"\n"
    path.write_bytes(data + tail)
    return expected


@pytest.mark.parametrize("seed", range(40))
def test_lines_come_newest_first_whatever_the_chunking(
    tmp_path: Path, small_chunks: None, seed: int
) -> None:
    rng = random.Random(seed)
    lines = [
        b"x" * rng.randint(0, 90) + b"%d" % i + (b" hit" if rng.random() < 0.3 else b"")
        for i in range(rng.randint(0, 40))
    ]
    tail = b"torn" * rng.randint(0, 2)
    expected = write(tmp_path / "f", lines, tail)
    assert list(lines_backwards(str(tmp_path / "f"))) == expected[::-1]
    wanted = [e for e in expected[::-1] if b"hit" in e[1] or b"7" in e[1]]
    assert list(lines_backwards(str(tmp_path / "f"), needles=[b"hit", b"7"])) == wanted


def test_begin_and_end_bound_the_lines(tmp_path: Path, small_chunks: None) -> None:
    expected = write(tmp_path / "f", [b"a", b"bb", b"ccc", b"d" * 30, b"eeeee"])
    path = str(tmp_path / "f")
    assert list(lines_backwards(path, end=expected[2][0])) == expected[:2][::-1]
    assert list(lines_backwards(path, begin=expected[1][0])) == expected[1:][::-1]
    assert (
        list(lines_backwards(path, begin=expected[1][0], end=expected[4][0])) == expected[1:4][::-1]
    )
    assert (
        list(lines_backwards(path, begin=expected[3][0], needles=[b"e", b"d"]))
        == expected[3:][::-1]
    )


def test_lines_over_the_record_limit_are_skipped(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backward, "MAX_LINE_BYTES", 20)
    expected = write(tmp_path / "f", [b"first", b"L" * 200, b"mid", b"M" * 21, b"last"])
    assert [line for _, line in lines_backwards(str(tmp_path / "f"))] == [b"last", b"mid", b"first"]
    assert [o for o, _ in lines_backwards(str(tmp_path / "f"))] == [
        expected[4][0],
        expected[2][0],
        0,
    ]


def stamped(seconds: float, text: str = "") -> bytes:
    return b'{"@timestamp":"%s","x":"%s"}' % (format_timestamp(seconds).encode(), text.encode())


def test_timestamps_are_read_from_the_prefix_or_the_record() -> None:
    assert line_timestamp(stamped(1_800_000_000.5)) == 1_800_000_000.5
    assert line_timestamp(b'{"x":1,"@timestamp":"2027-01-15T08:00:00Z"}') == 1_800_000_000
    assert line_timestamp(b"not json") is None
    assert line_timestamp(b'{"@timestamp":"yesterday"}') is None


@pytest.mark.parametrize("moment", [0, 999.5, 1000, 1003, 1003.2, 1500, 2000, 5000])
def test_offset_after_finds_the_first_later_line(tmp_path: Path, moment: float) -> None:
    times = [1000 + i for i in range(0, 1000, 3)]
    expected = write(tmp_path / "f", [stamped(t, "y" * (t % 17)) for t in times])
    later = [offset for (offset, _), t in zip(expected, times, strict=True) if t > moment]
    size = (tmp_path / "f").stat().st_size
    assert offset_after(str(tmp_path / "f"), moment) == (later[0] if later else size)


def test_offset_after_on_an_empty_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    assert offset_after(str(tmp_path / "f"), 10) == 0
