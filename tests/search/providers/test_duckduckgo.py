from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.duckduckgo import ADAPTER
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<div id="links">
 <div class="result results_links results_links_deep result--ad">
  <div class="links_main result__body"><h2 class="result__title">
   <a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;u3=x">Ad</a></h2>
  <a class="result__snippet" href="#">Buy now</a></div></div>
 <div class="result results_links results_links_deep web-result">
  <div class="links_main links_deep result__body">
   <h2 class="result__title"><a rel="nofollow" class="result__a"
    href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.example.org%2Fguide%3Fa%3D1&amp;rut=3f9c">Example
    <b>Guide</b></a></h2>
   <div class="result__extras"><div class="result__extras__url">
    <a class="result__url" href="#">docs.example.org/guide</a></div></div>
   <a class="result__snippet" href="#">A short <b>guide</b> to the &amp; example API.</a></div></div>
 <div class="result results_links results_links_deep web-result">
  <div class="links_main links_deep result__body">
   <h2 class="result__title"><a class="result__a" href="https://direct.example.com/page">Direct</a></h2>
   <a class="result__snippet" href="#">Second result.</a></div></div>
 <div class="result results_links web-result"><div class="result__body">
   <h2 class="result__title"><a class="result__a" href="javascript:alert(1)">Bad</a></h2></div></div>
 <div class="nav-link"><form action="/html/" method="post">
  <input type="hidden" name="s" value="10"><input type="hidden" name="vqd" value="4-1234567890">
 </form></div>
</div></body></html>"""

ANOMALY = """<html><body><div class="anomaly-modal__modal">
<form id="challenge-form" action="/anomaly.js"><p>Unfortunately, bots use DuckDuckGo too.</p>
<p>Please complete the following challenge to confirm this search was made by a human.</p>
</form></div></body></html>"""


async def test_parses_results_unwraps_links_and_drops_ads(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, PAGE))
    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("Example Guide", "https://docs.example.org/guide?a=1",
         "A short guide to the & example API."),
        ("Direct", "https://direct.example.com/page", "Second result."),
    ]  # fmt: skip
    assert all(r.published_at is None for r in results)


async def test_request_maps_region_freshness_and_operators(ask) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields(
        {
            "query": "rust async",
            "region": "cn-zh",
            "freshness": "week",
            "site": "tokio.rs",
            "exclude_domains": ["spam.example"],
        }
    )
    _, fake = await ask(ADAPTER, Reply(200, PAGE), query)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/html/")
    form = {k: v[0] for k, v in parse_qs(sent.body.decode(), keep_blank_values=True).items()}
    assert form == {"q": "rust async site:tokio.rs -site:spam.example", "b": "", "kl": "cn-zh",
                    "df": "w"}  # fmt: skip
    assert sent.headers["Accept-Language"].startswith("zh-CN")


@pytest.mark.parametrize(
    ("query", "applies"),
    [
        pytest.param({"query": "x"}, False, id="none"),
        pytest.param({"query": "x", "freshness": "day"}, True, id="freshness"),
        pytest.param({"query": "x", "time_range": "2025-01-01..2025-02-01"}, False, id="range"),
    ],
)
def test_applies_time_filter(query: dict, applies: bool) -> None:
    q = SearchQuery.from_fields(query)
    assert ADAPTER.applies_time_filter(q) is applies
    assert (b"df=" in (ADAPTER.build_request(q, "http://127.0.0.1", None).body or b"")) is applies


@pytest.mark.parametrize(
    ("reply", "error_class", "words"),
    [
        pytest.param(Reply(202, ANOMALY), ErrorClass.RATE_LIMITED, "bot challenge", id="202-anomaly"),
        pytest.param(Reply(200, ANOMALY), ErrorClass.RATE_LIMITED, "HTTP 200", id="200-anomaly"),
        pytest.param(Reply(403, "Forbidden"), ErrorClass.RATE_LIMITED, "HTTP 403", id="403"),
        pytest.param(Reply(503, "busy"), ErrorClass.SERVER_ERROR, "HTTP 503", id="503"),
        pytest.param(Reply(200, "<html><body><p>Something else</p></body></html>"),
                     ErrorClass.INVALID_RESPONSE, "layout", id="unknown-layout"),
        pytest.param(Reply(200, b""), ErrorClass.INVALID_RESPONSE, "unparseable", id="empty-body"),
    ],
)  # fmt: skip
async def test_error_shapes(ask, reply: Reply, error_class: ErrorClass, words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert caught.value.error_class is error_class
    assert words in caught.value.message


async def test_no_results_page_is_empty_not_an_error(ask) -> None:  # type: ignore[no-untyped-def]
    page = '<html><body><div class="no-results">No results.</div></body></html>'
    results, _ = await ask(ADAPTER, Reply(200, page))
    assert results == []


async def test_markup_inside_a_word_does_not_split_it(ask) -> None:  # type: ignore[no-untyped-def]
    page = ("<html><body><div id='links'><div class='result web-result'>"
            "<h2><a href='https://a.example/'>Py<b>thon</b> 3</a></h2>"
            "<a class='result__snippet'>re<b>lease</b>d</a></div></div></body></html>")  # fmt: skip
    results, _ = await ask(ADAPTER, Reply(200, page))
    assert (results[0].title, results[0].snippet) == ("Python 3", "released")
