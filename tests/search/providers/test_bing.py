from __future__ import annotations

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.bing import ADAPTER, unwrap
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

PAGE = """<html><body><ol id="b_results">
<li class="b_ad"><h2><a href="https://www.bing.com/aclick?ld=e8x">Ad</a></h2></li>
<li class="b_algo">
 <div class="b_tpcn"><a class="tilk" href="https://www.example.com/"><div class="tptt">Example</div>
  <div class="b_attribution"><cite>https://www.example.com &#8250; blog</cite></div></a></div>
 <h2><a href="https://www.bing.com/ck/a?!&amp;&amp;p=9f3e&amp;u=a1aHR0cHM6Ly93d3cuZXhhbXBsZS5jb20vYmxvZy9wb3N0LTE&amp;ntb=1">Post one &#8212; Example blog</a></h2>
 <div class="b_caption"><p class="b_lineclamp2"><span class="news_dt">Feb 20, 2025</span>&ensp;&#183;&ensp;First post about the example.</p></div>
</li>
<li class="b_algo"><h2><a href="https://plain.example.org/x">Plain</a></h2>
 <div class="b_caption"><p><span class="algoSlug_icon">WEB</span>Second snippet.</p></div></li>
</ol></body></html>"""  # noqa: E501


async def test_parses_results_and_unwraps(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, PAGE))
    assert [(r.title, r.url, r.snippet, r.published_at) for r in results] == [
        ("Post one — Example blog", "https://www.example.com/blog/post-1",
         "First post about the example.", "2025-02-20"),
        ("Plain", "https://plain.example.org/x", "Second snippet.", None),
    ]  # fmt: skip


async def test_request_mapping(ask) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields(
        {"query": "q", "region": "uk-en", "include_domains": ["a.org", "b.org"], "freshness": "day"}
    )
    _, fake = await ask(ADAPTER, Reply(200, PAGE), query)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("GET", "/search")
    assert sent.query["q"] == "q (site:a.org OR site:b.org)"
    assert sent.query["mkt"] == "en-GB"
    assert sent.query["filters"] == 'ex1:"ez1"'
    assert ADAPTER.applies_time_filter(query) is False  # sent, but never claimed


@pytest.mark.parametrize(
    ("href", "target"),
    [
        pytest.param("https://www.bing.com/ck/a?!&&p=1&u=a1aHR0cHM6Ly9hLmNvbS8&ntb=1",
                     "https://a.com/", id="ck-a"),
        pytest.param("https://www.bing.com/ck/a?p=1&u=zzz", None, id="ck-a-without-a1"),
        pytest.param("https://www.bing.com/ck/a?p=1&u=a1%%%", None, id="ck-a-garbage"),
        pytest.param("https://www.bing.com/aclick?ld=1", None, id="ad"),
        pytest.param("https://a.com/x", "https://a.com/x", id="direct"),
        pytest.param("/search?q=x", None, id="relative"),
    ],
)  # fmt: skip
def test_unwrap(href: str, target: str | None) -> None:
    assert unwrap(href) == target


@pytest.mark.parametrize(
    ("reply", "error_class"),
    [
        pytest.param(Reply(200, "<html><body><div id='challenge-container'></div></body></html>"),
                     ErrorClass.RATE_LIMITED, id="challenge"),
        pytest.param(Reply(200, "<html><body><p>hello</p></body></html>"),
                     ErrorClass.RATE_LIMITED, id="no-result-list"),
        pytest.param(Reply(429, "slow down"), ErrorClass.RATE_LIMITED, id="429"),
        pytest.param(Reply(302, "", {"Location": "https://cn.bing.com/"}),
                     ErrorClass.INVALID_RESPONSE, id="redirect-not-followed"),
        pytest.param(Reply(500, "oops"), ErrorClass.SERVER_ERROR, id="500"),
    ],
)  # fmt: skip
async def test_error_shapes(ask, reply: Reply, error_class: ErrorClass) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert caught.value.error_class is error_class


async def test_empty_result_list_is_no_results(ask) -> None:  # type: ignore[no-untyped-def]
    page = '<html><body><ol id="b_results"><li class="b_no">No results</li></ol></body></html>'
    results, _ = await ask(ADAPTER, Reply(200, page))
    assert results == []


@pytest.mark.parametrize(
    ("line", "total"),
    [
        ('<span class="sb_count">About 1,230,000 results</span>', 1230000),
        ('<span class="sb_count" data-x="1">Ungefähr 45.600 Ergebnisse</span>', 45600),
        ('<span class="sb_count">约 987 个结果</span>', 987),
        ("", None),
    ],
)
async def test_the_estimated_total_is_read(upstream, transport, line, total) -> None:  # type: ignore[no-untyped-def]
    fake = await upstream()
    fake.queue(Reply(200, PAGE.replace('<ol id="b_results">', line + '<ol id="b_results">', 1)))
    response = await transport.send(
        ADAPTER.build_request(SearchQuery("q"), fake.base_url, None), timeout=5, allow_private=True
    )
    assert ADAPTER.parse(response)  # the results are read as before
    assert ADAPTER.parse_total is not None and ADAPTER.parse_total(response) == total
