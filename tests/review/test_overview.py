"""Per-client tallies and decisions over time, read once per file and then incrementally."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.review import overview
from gateway.review.files import AuditFolder
from gateway.review.overview import OTHER, Overview, Tally
from tests.audit.logfiles import fetch_record, open_log
from tests.review.seed import denied, write_folder


def test_the_tally_of_the_seeded_folder(tmp_path: Path) -> None:
    tally = Overview(AuditFolder(write_folder(tmp_path / "audit")["template"])).tally()
    research = tally.clients["research-agent"]
    assert research.decisions["deny"] == 13 and research.decisions["allow"] == 16
    assert research.reasons == {"domain_not_allowed": 13}
    assert research.allowed["docs1.example.org"] == 5
    assert tally.clients["xsearch-agent"].allowed == {"x.example": 5}
    assert [r.policy for r in tally.reloads] == ["research-v2"]
    assert sum(sum(c.values()) for c in tally.buckets.values()) == tally.records
    assert tally.bucket_seconds == 60


def test_only_new_lines_are_read_and_rotation_keeps_the_count(tmp_path: Path) -> None:
    path = tmp_path / "g-{instance}.jsonl"
    log = open_log(path, rotate_bytes=2048)
    folder = AuditFolder(str(path))
    view = Overview(folder)
    for i in range(5):
        log.append(fetch_record(i))
    assert view.tally().records == 5
    for i in range(20):  # rotates several times
        log.append(denied(i))
    log.close()
    assert len(folder.chains()[0].files) > 1
    tally = view.tally()
    assert tally.records == 25
    assert tally.clients["research-agent"].decisions == {"allow": 5, "deny": 20}
    assert view.tally().records == 25  # nothing new: the same


def test_distinct_domains_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overview, "MAX_DOMAINS", 3)
    tally = Tally()
    for i in range(10):
        tally.add(fetch_record(i, destination={"domain": f"d{i}.example"}))
    allowed = tally.clients["research-agent"].allowed
    assert len(allowed) == 4 and allowed[OTHER] == 7


def test_minute_buckets_become_hours_past_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overview, "MAX_BUCKETS", 10)
    tally = Tally()
    for minute in range(30):
        tally.add(
            {
                **fetch_record(minute),
                "@timestamp": f"2027-01-15T0{minute // 10}:{minute % 10 * 6:02d}:00Z",
            }
        )
    assert tally.bucket_seconds == 3600
    assert sum(sum(c.values()) for c in tally.buckets.values()) == 30
    assert len(tally.buckets) == 3
