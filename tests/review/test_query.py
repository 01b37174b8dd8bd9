"""Reading the timeline's URL query, the needles each filter implies, and matching records."""

from __future__ import annotations

import orjson
import pytest

from gateway.review.query import Cursor, Query, QueryError, parse_query
from tests.audit.logfiles import fetch_record
from tests.review.seed import denied

NOW = 1_800_000_000.0


def test_an_empty_query_is_the_newest_page() -> None:
    query = parse_query({}, now=NOW)
    assert query == Query()
    assert not query.filtered
    assert query.scan_needles() == ()
    assert query.params() == {}


def test_the_query_round_trips_through_its_params() -> None:
    params = {
        "client": "a",
        "tool": "WebFetch",
        "decision": "deny",
        "reason": "r",
        "rule": "default",
        "domain": "Example.COM.",
        "since": "2h",
        "until": "2027-01-15T08:00:00Z",
        "limit": "25",
        "before": "1800000000.000~7~gw-a",
    }
    query = parse_query(params, now=NOW)
    assert query.domain == "example.com"
    assert query.since == NOW - 7200 and query.until == NOW
    assert query.before == Cursor(NOW, "gw-a", 7)
    again = parse_query(query.params(), now=NOW)
    assert again == query


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"decision": "maybe"}, "decision: one of"),
        ({"since": "last week"}, "since: a duration"),
        ({"limit": "1000"}, "limit: one of"),
        ({"before": "junk"}, "before: not a cursor"),
        ({"client": "x" * 600}, "client: longer than"),
    ],
)
def test_bad_values_name_themselves(params: dict[str, str], message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse_query(params, now=NOW)


def test_needles_are_the_values_as_the_writer_encodes_them() -> None:
    query = Query(client='agent "x"', domain="example.com", decision="deny")
    assert query.needles() == (
        (orjson.dumps('agent "x"'),),
        (b"example.com",),
        (b'"deny"', b'"denied"'),
    )
    assert query.scan_needles() == (orjson.dumps('agent "x"'), b'"policy_reload"')
    assert Query(decision="deny").scan_needles() == (b'"deny"', b'"denied"', b'"policy_reload"')


RELOAD = {"event": {"action": "policy_reload", "outcome": "success"}}


@pytest.mark.parametrize(
    ("query", "record", "shown"),
    [
        (Query(client="research-agent"), fetch_record(1), True),
        (Query(client="other"), fetch_record(1), False),
        (Query(tool="WebSearch"), fetch_record(1), False),
        (Query(decision="deny"), denied(1), True),
        (Query(decision="deny"), fetch_record(1), False),
        (Query(decision="allow"), fetch_record(1), True),
        (Query(reason="domain_not_allowed"), denied(1), True),
        (Query(rule="default"), fetch_record(1), False),
        (
            Query(domain="example.com"),
            fetch_record(1, destination={"domain": "docs.example.com"}),
            True,
        ),
        (
            Query(domain="example.com"),
            fetch_record(1, destination={"domain": "badexample.com"}),
            False,
        ),
        (Query(client="nobody", decision="deny"), RELOAD, True),
        (Query(client="nobody"), {"event": {"action": "log_start"}}, False),
        (Query(), {"event": {"action": "log_start"}}, True),
    ],
)
def test_matching(query: Query, record: dict, shown: bool) -> None:
    assert query.matches(record) is shown
    line = orjson.dumps(record)
    if shown:  # the prefilter never hides a record that matches
        assert query.line_may_match(line)
