"""Retry-After as every provider path reads it: one function, one cap, for search and XSearch."""

from __future__ import annotations

import pytest

from gateway.search.providers.decoding import failure_for_status
from gateway.search.transport import MAX_RETRY_AFTER, ProviderResponse, retry_after_seconds
from gateway.search.xai import DEFAULT_RETRY_AFTER, error_for

SENT = "Mon, 30 Nov 2026 06:00:00 GMT"

CASES = [
    pytest.param({"Retry-After": "12"}, 12.0, id="seconds"),
    pytest.param({"Retry-After": " 0 "}, 0.0, id="zero-padded"),
    pytest.param({"Retry-After": "99999"}, MAX_RETRY_AFTER, id="capped"),
    pytest.param({"Retry-After": "9" * 5000}, MAX_RETRY_AFTER, id="five-thousand-digits"),
    pytest.param({"Retry-After": "\xb2"}, None, id="latin1-superscript-two"),
    pytest.param({"Retry-After": "\u0663"}, None, id="arabic-indic-digit"),
    pytest.param({"Retry-After": "soon"}, None, id="words"),
    pytest.param({}, None, id="absent"),
    pytest.param(
        {"Retry-After": "Mon, 30 Nov 2026 06:00:30 GMT", "Date": SENT}, 30.0, id="http-date"
    ),
    pytest.param(
        {"Retry-After": "Tue, 30 Nov 2027 06:00:00 GMT", "Date": SENT},
        MAX_RETRY_AFTER,
        id="http-date-a-year-away-capped",
    ),
    pytest.param(
        {"Retry-After": "Mon, 30 Nov 2026 05:00:00 GMT", "Date": SENT}, 0.0, id="http-date-past"
    ),
    pytest.param(
        {"Retry-After": "Mon, 30 Nov 2026 06:00:30 GMT"}, None, id="http-date-without-date"
    ),
]


@pytest.mark.parametrize(("headers", "expected"), CASES)
def test_retry_after_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(ProviderResponse(429, headers, b"")) == expected


@pytest.mark.parametrize(("headers", "expected"), CASES)
def test_search_and_xsearch_read_retry_after_alike(
    headers: dict[str, str], expected: float | None
) -> None:
    response = ProviderResponse(429, headers, b"")
    search = failure_for_status(response)
    assert search is not None
    assert search.retry_after == expected
    # XSearch must tell the agent some wait: the default stands in for an unreadable one.
    assert error_for(response).retry_after == (
        DEFAULT_RETRY_AFTER if expected is None else expected
    )


def test_the_cap_is_the_longest_cooling() -> None:
    from gateway.search.health import MAX_COOLING

    assert MAX_RETRY_AFTER == MAX_COOLING == 600.0
