"""Per-client tallies and decisions over time, read once per file and then incrementally."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.review import overview
from gateway.review.files import AuditFolder
from gateway.review.overview import OTHER, Overview, Tally
from tests.audit.logfiles import fetch_record, open_log
from tests.review.seed import denied, write_folder, write_kinds_chain


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


def test_records_that_decide_nothing_are_counted_apart_and_signals_by_domain(
    tmp_path: Path,
) -> None:
    folder = write_folder(tmp_path / "audit")["template"]
    before = Overview(AuditFolder(folder)).tally()
    write_kinds_chain(folder)
    tally = Overview(AuditFolder(folder)).tally()
    assert tally.records - before.records == 8
    assert tally.decisions - before.decisions == 3  # the search, the CONNECT, the fetch
    assert tally.kinds - before.kinds == {
        "malformed_request": 2,
        "auth_challenge": 1,
        "auth_failure": 1,
        "tunnel_close": 1,
        "decision": 3,
    }
    assert sum(sum(c.values()) for c in tally.buckets.values()) == tally.decisions
    research = tally.clients["research-agent"]
    assert research.malformed == 1 and tally.clients["-"].malformed == 1
    assert sum(tally.clients["-"].decisions.values()) == 0
    found = tally.signals["injected.example"]
    assert (found.records, found.marker_lookalikes, found.invisible_chars) == (1, 3, 7)


def test_signal_domains_are_capped_when_tallies_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overview, "MAX_DOMAINS", 2)
    parts = []
    for i in range(4):
        part = Tally()
        part.add(
            fetch_record(
                i,
                destination={"domain": f"d{i}.example"},
                sanitized={"marker_lookalikes": 1, "invisible_chars": i},
            )
        )
        parts.append(part)
    total = Tally()
    for part in parts:
        total.merge(part)
    assert sorted(total.signals) == [OTHER, "d0.example", "d1.example"]
    assert total.signals[OTHER].records == 2 and total.signals[OTHER].invisible_chars == 5
