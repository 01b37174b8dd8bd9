"""The envelope helpers: timestamps and display URLs."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
import yarl

from gateway.tools.envelope import display_url, now_iso


def test_now_iso_is_utc_with_milliseconds_across_second_boundaries() -> None:
    seen = set()
    deadline = time.monotonic() + 1.2  # crosses at least one second boundary
    while time.monotonic() < deadline:
        before = datetime.now(UTC)
        stamp = now_iso()
        after = datetime.now(UTC)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
        parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= parsed <= after
        seen.add(stamp[:19])
        time.sleep(0.01)
    assert len(seen) >= 2


@pytest.mark.parametrize(
    "url",
    ["http://a.example/ä b?q=<x>", "https://A.example:443/x/../y", "http://[::1]:8080/%7e"],
)
def test_display_url_is_the_same_for_a_string_and_its_parsed_url(url: str) -> None:
    assert display_url(yarl.URL(url)) == display_url(url)
