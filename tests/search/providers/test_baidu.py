from __future__ import annotations

from datetime import date

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.baidu import ADAPTER
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

# The tn=json form, as SearchXNG receives it: a BOM, entities, a raw control character inside a
# string, an entry without title or url.
JSON_BODY = (
    "\ufeff"
    '{"feed": {"entry": ['
    '{"title": "asyncio --- 异步 I/O &mdash; Python 3.13 文档",'
    ' "url": "https://docs.python.org/zh-cn/3/library/asyncio.html",'
    ' "abs": "asyncio 是用来编写\x01并发代码的库", "time": 1740960000},'
    '{"title": "Python 异步编程入门", "url": "https://www.example.cn/post/123.html",'
    ' "abs": "本文介绍事件循环&hellip;", "time": "1738368000"},'
    "{}]}}"
).encode()

HTML_PAGE = """<html><head><title>百度搜索</title></head><body><div id="content_left">
 <div class="result c-container xpath-log new-pmd" id="1" srcid="1599" tpl="www_index"
      mu="https://docs.python.org/zh-cn/3/library/asyncio.html">
  <h3 class="c-title t t tts-title"><a href="http://www.baidu.com/link?url=Kq3v9XfZ0aBcD1eFgH2iJ">asyncio --- 异步 I/O — Python 3.13 文档</a></h3>
  <div class="c-row"><span class="cos-space-mr-3xs cos-color-text-minor">2025年3月3日</span>
   <span class="summary-text_560AW">asyncio 是用来编写<em>并发</em>代码的库。</span></div>
 </div>
 <div class="result c-container" id="2" tpl="www_index">
  <h3><a href="http://www.baidu.com/link?url=only-a-redirect">No mu attribute</a></h3>
 </div>
 <div class="result c-container" id="3" tpl="se_com_default" data-tuiguang="1"
      mu="https://ads.example.cn/"><h3><a href="#">广告 result</a></h3></div>
 <div class="result c-container" id="4" tpl="www_index" mu="https://www.example.cn/post/1.html">
  <h3><a href="http://www.baidu.com/link?url=x">Python 入门</a></h3>
  <div class="c-abstract">旧版摘要</div></div>
</div></body></html>"""  # noqa: E501

CAPTCHA_PAGE = "<html><head><title>百度安全验证</title></head><body>网络不给力</body></html>"
CAPTCHA_URL = (
    "https://wappass.baidu.com/static/captcha/tuxing_v2.html?&logid=1&ak=ab"
    "&backurl=https%3A%2F%2Fwww.baidu.com%2Fs%3Fwd%3Dx&signature=c&timestamp=1"
)


async def test_json_form(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, JSON_BODY, {"Content-Type": "text/html"}))
    assert [(r.title, r.url, r.snippet, r.published_at) for r in results] == [
        ("asyncio --- 异步 I/O — Python 3.13 文档",
         "https://docs.python.org/zh-cn/3/library/asyncio.html", "asyncio 是用来编写并发代码的库",
         "2025-03-03T00:00:00Z"),
        ("Python 异步编程入门", "https://www.example.cn/post/123.html", "本文介绍事件循环…",
         "2025-02-01T00:00:00Z"),
    ]  # fmt: skip
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("GET", "/s")
    assert sent.query["tn"] == "json" and sent.query["wd"] == "test"


async def test_html_form_uses_mu_and_leaves_out_redirect_only_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, HTML_PAGE))
    assert [(r.title, r.url, r.snippet, r.published_at) for r in results] == [
        ("asyncio --- 异步 I/O — Python 3.13 文档",
         "https://docs.python.org/zh-cn/3/library/asyncio.html", "asyncio 是用来编写并发代码的库。",
         "2025-03-03"),
        ("Python 入门", "https://www.example.cn/post/1.html", "旧版摘要", None),
    ]  # fmt: skip


async def test_request_mapping(ask) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields(
        {"query": "大模型", "site": "python.org", "time_range": "2026-01-01..2026-12-31"}
    )
    _, fake = await ask(ADAPTER, Reply(200, JSON_BODY), query)
    sent = fake.requests[0]
    assert sent.query["wd"] == "大模型 site:python.org"
    start = (date(2026, 1, 1) - date(1970, 1, 1)).days * 86400
    end = (date(2026, 12, 31) - date(1970, 1, 1)).days * 86400 + 86399
    assert sent.query["gpc"] == f"stf={start},{end}|stftype=1"
    assert ADAPTER.applies_time_filter(query)
    assert "zh-CN" in sent.headers["Accept-Language"]


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(302, b"", {"Location": CAPTCHA_URL}), id="redirect-to-wappass"),
        pytest.param(Reply(200, CAPTCHA_PAGE), id="security-check-page"),
        pytest.param(Reply(200, b""), id="empty-page"),
        pytest.param(Reply(200, {"antiFlag": 1, "message": "Forbid spider access"}), id="antiflag"),
        pytest.param(Reply(403, "<html>forbidden</html>"), id="403"),
        pytest.param(Reply(429, "busy", {"Retry-After": "30"}), id="429"),
    ],
)
async def test_captcha_and_refusals_are_blocked(ask, reply: Reply) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert caught.value.error_class is ErrorClass.BLOCKED
    if reply.status == 429:
        assert caught.value.retry_after == 30


async def test_no_results_page_is_empty_not_blocked(ask) -> None:  # type: ignore[no-untyped-def]
    page = "<html><body><div class='nors'>抱歉没有找到与“x”相关的网页。</div></body></html>"
    results, _ = await ask(ADAPTER, Reply(200, page))
    assert results == []


@pytest.mark.parametrize(
    ("reply", "error_class"),
    [
        pytest.param(Reply(200, {"feed": {}}), ErrorClass.INVALID_RESPONSE, id="no-entries"),
        pytest.param(Reply(200, b"{not json"), ErrorClass.INVALID_RESPONSE, id="bad-json"),
        pytest.param(Reply(200, "<html><body>?</body></html>"), ErrorClass.INVALID_RESPONSE,
                     id="unknown-layout"),
        pytest.param(Reply(503, "down"), ErrorClass.SERVER_ERROR, id="503"),
        pytest.param(Reply(302, b"", {"Location": "https://www.baidu.com/other"}),
                     ErrorClass.INVALID_RESPONSE, id="other-redirect"),
    ],
)  # fmt: skip
async def test_other_failures(ask, reply: Reply, error_class: ErrorClass) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert caught.value.error_class is error_class
