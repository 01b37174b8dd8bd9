"""The timeline over real chains written by the gateway's audit writer: newest first across
chains and rotated files, filters, paging by cursor, time bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.audit.fields import disposition_of
from gateway.review.files import AuditFolder
from gateway.review.query import parse_query
from gateway.review.timeline import timeline, why_no_client
from tests.review.seed import START, write_folder


@pytest.fixture
def folder(tmp_path: Path) -> AuditFolder:
    return AuditFolder(write_folder(tmp_path / "audit")["template"])


def everything(folder: AuditFolder, **params: str):
    entries, before = [], None
    while True:
        query = parse_query({**params, **({"before": before} if before else {})}, now=START + 10**6)
        page = timeline(folder, query)
        entries.extend(page.entries)
        if page.older is None:
            return entries
        before = page.older.encode()


def test_the_newest_page_merges_every_chain_newest_first(folder: AuditFolder) -> None:
    page = timeline(folder, parse_query({}))
    stamps = [e.timestamp for e in page.entries]
    assert stamps == sorted(stamps, reverse=True)
    assert {e.instance for e in page.entries} == {"gw-a", "gw-b", "gw-c"}
    assert page.chains == 3 and page.files > 3
    newest = next(e for e in page.entries if "url" in e.record)
    assert newest.record["url"]["full"].startswith("https://big.example/")
    assert page.entries[0].record["event"]["action"] == "checkpoint"  # the shutdown's, signed


def test_paging_visits_every_record_once(folder: AuditFolder) -> None:
    paged = everything(folder, limit="25")
    whole = timeline(folder, parse_query({"limit": "200"})).entries
    assert [(e.instance, e.seq) for e in paged] == [(e.instance, e.seq) for e in whole]
    per_chain = {}
    for entry in paged:
        per_chain.setdefault(entry.instance, []).append(entry.seq)
    assert per_chain["gw-a"] == list(range(max(per_chain["gw-a"]), 0, -1))
    assert sorted(per_chain["gw-b"]) == [1, 2, 3, 4, 5, 6]


def test_filters_keep_reloads_marked(folder: AuditFolder) -> None:
    entries = everything(folder, client="coding-agent", decision="deny")
    actions = [e.record["event"]["action"] for e in entries]
    assert "policy_reload" in actions
    refusals = [e for e in entries if e.record["event"]["action"] != "policy_reload"]
    assert refusals and all(e.record["client"]["id"] == "coding-agent" for e in refusals)
    assert all(disposition_of(e.record) == "deny" for e in refusals)


def test_a_filter_matches_what_reading_everything_would(folder: AuditFolder) -> None:
    everything_read = everything(folder, limit="200")
    for params in (
        {"domain": "example.org"},
        {"rule": "default"},
        {"tool": "WebFetch", "client": "xsearch-agent"},
        {"reason": "domain_not_allowed"},
    ):
        query = parse_query(params)
        expected = [(e.instance, e.seq) for e in everything_read if query.matches(e.record)]
        assert [
            (e.instance, e.seq) for e in everything(folder, **params, limit="25")
        ] == expected, params


def test_time_bounds(folder: AuditFolder) -> None:
    until = "2027-01-15T08:10:00Z"
    since = "2027-01-15T08:05:00Z"
    entries = everything(folder, since=since, until=until)
    assert entries
    assert all(START + 300 <= e.timestamp <= START + 600 for e in entries)
    assert len({e.file for e in entries}) >= 1


def test_a_folder_without_logs_is_an_empty_page(tmp_path: Path) -> None:
    page = timeline(AuditFolder(str(tmp_path / "g-{instance}.jsonl")), parse_query({}))
    assert page.entries == () and page.older is None and page.chains == 0


@pytest.mark.parametrize(
    ("record", "configured", "expected"),
    [
        ({"client": {"id": "agent"}, "event": {"action": "WebFetch"}}, True, None),
        ({"client": {"id": None}, "event": {"action": "auth_failure"}}, True,
         "no client: unauthenticated"),
        ({"client": {"id": None, "claimed": "bob"}, "event": {"action": "auth_failure"}}, True,
         "no client: unauthenticated (claimed bob)"),
        ({"client": {"id": None}, "event": {"action": "proxy_http"}, "policy": None}, True,
         "no client: refused before authentication"),
        ({"client": {"id": None}, "event": {"action": "proxy_http"}, "policy": None}, False,
         "no client: no clients configured"),
        ({"client": {"id": None}, "event": {"action": "proxy_connect"}, "policy": {"name": "p"}},
         True, "no client: no clients configured"),
        ({"event": {"action": "log_start"}}, True, "no client: a record of the gateway itself"),
        ({"event": {"action": "policy_reload"}}, False,
         "no client: a record of the gateway itself"),
    ],
    ids=["client", "auth", "auth-claimed", "before-auth", "no-clients", "no-clients-then",
         "lifecycle", "reload"],
)  # fmt: skip
def test_a_record_without_a_client_says_why(record, configured, expected) -> None:
    assert why_no_client(record, clients_configured=configured) == expected
