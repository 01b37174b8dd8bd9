"""One record by file and offset or by line: its fields, redirects and hashes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gateway.review.files import AuditFolder
from gateway.review.query import parse_query
from gateway.review.record import RecordNotFoundError, read_record
from gateway.review.timeline import timeline
from tests.audit.logfiles import read_lines
from tests.review.seed import write_folder


@pytest.fixture
def folder(tmp_path: Path) -> AuditFolder:
    return AuditFolder(write_folder(tmp_path / "audit")["template"])


def test_a_record_by_offset_has_every_field_and_its_hashes(folder: AuditFolder) -> None:
    entry = timeline(folder, parse_query({"rule": "rule-rtl"})).entries[0]
    view = read_record(folder, entry.file, offset=entry.offset)
    assert view.record == entry.record
    rows = dict(view.fields)
    assert rows["policy.rule"] == "rule-rtl"
    assert rows["redirects[0].status"] == 302
    assert view.redirects[0]["decision"] == "deny"
    path = Path(folder.folder) / entry.file
    line = next(raw for raw in read_lines(path) if b"rule-rtl" in raw)
    assert view.line_sha256 == hashlib.sha256(line).hexdigest()


def test_a_record_by_line_number(folder: AuditFolder) -> None:
    view = read_record(folder, "gateway-gw-c.jsonl", line=3)
    assert view.record is not None and view.record["chain"]["seq"] == 3
    assert view.line_number == 3
    first = read_record(folder, "gateway-gw-c.jsonl", line=1)
    assert first.offset == 0


@pytest.mark.parametrize(
    ("name", "offset", "line"),
    [
        ("../../etc/passwd", 0, None),
        ("gateway-gw-c.jsonl", 3, None),
        ("gateway-gw-c.jsonl", 10**9, None),
        ("gateway-gw-c.jsonl", None, 99),
        ("gateway-gw-c.jsonl", None, 0),
    ],
)
def test_nothing_but_a_records_start_is_read(folder: AuditFolder, name: str, offset, line) -> None:
    with pytest.raises(RecordNotFoundError):
        read_record(folder, name, offset=offset, line=line)


def test_a_line_that_is_not_json_is_shown_as_text(tmp_path: Path) -> None:
    (tmp_path / "g-x.jsonl").write_bytes(b"not json at all\n")
    view = read_record(AuditFolder(str(tmp_path / "g-{instance}.jsonl")), "g-x.jsonl", offset=0)
    assert view.record is None
    assert view.fields == (("(line)", "not json at all"),)
