from __future__ import annotations

import asyncio
import logging
import socket
from datetime import date
from typing import Any
from urllib.parse import unquote_plus

import pytest
from aiohttp import web

from gateway.errors import InvalidRequestError, UpstreamError
from gateway.search.assembly import build_engine
from gateway.search.chain import RetryPolicy, SearchEngine, query_for
from gateway.search.providers import ADAPTERS
from gateway.search.providers.adapter import ProviderSettings
from gateway.search.query import SearchQuery, rewrite_chinese_year
from tests.search.conftest import FakeClock, FakeUpstream, LoopbackTransport, Reply

KEY = "BSAsecret-key-0123456789"

DDG_PAGE = """<html><body><div id="links">
<div class="result results_links web-result"><div class="result__body">
 <h2 class="result__title"><a class="result__a"
  href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fddg.example.org%2F{n}&amp;rut=1">DDG {n}</a></h2>
 <a class="result__snippet" href="#">snippet</a></div></div>
</div></body></html>"""
DDG_MANY = (
    "<html><body><div id='links'>"
    + "".join(
        f"<div class='result web-result'><h2><a href='https://many.example/{i}'>r{i}</a></h2></div>"
        for i in range(15)
    )
    + "</div></body></html>"
)
DDG_EMPTY = '<html><body><div class="no-results">No results.</div></body></html>'
DDG_ANOMALY = '<html><body><form id="challenge-form">bots use DuckDuckGo too</form></body></html>'


def brave(*urls: str) -> dict:
    return {"type": "search", "web": {"results": [{"title": f"t{i}", "url": u}
                                                   for i, u in enumerate(urls)]}}  # fmt: skip


def brave_error(status: int, code: str, detail: str) -> dict:
    return {"type": "ErrorResponse", "error": {"status": status, "code": code, "detail": detail}}


class Sleeps:
    """An injected sleep: records the waits, never really waits."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def make(transport: LoopbackTransport, clock: FakeClock, sleeps: Sleeps, upstream: Any):
    async def build(
        *kinds: str,
        cache_ttl: float = 0,
        timeout: float = 2,
        deadline: float = 5,
        backoff: float = 0.25,
        **extra: Any,
    ) -> tuple[SearchEngine, list[FakeUpstream]]:
        fakes = [await upstream() for _ in kinds]
        providers = []
        for kind, fake in zip(kinds, fakes, strict=True):
            entry: dict[str, Any] = {"id": kind[:5], "kind": kind, "base_url": fake.base_url,
                                     "allow_private": True}  # fmt: skip
            if kind in ("brave", "tavily", "serper", "bocha"):
                entry["api_key_env"] = f"{kind.upper()}_API_KEY"
            providers.append(entry)
        config = {"providers": providers, "cache_ttl": cache_ttl, "timeout": timeout,
                  "deadline": deadline, **extra}  # fmt: skip
        engine = build_engine(
            config,
            transport,
            clock,
            environ={"BRAVE_API_KEY": KEY, "TAVILY_API_KEY": "tvly-" + KEY},
            # The jitter's top draw: each wait is its full exponential step.
            retry=RetryPolicy(backoff=backoff, max_retry_after=2, jitter=lambda: 1.0),
            sleep=sleeps,
        )
        return engine, fakes

    return build


Q = SearchQuery("aiohttp middleware")


async def test_first_provider_answers(make, transport: LoopbackTransport) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    ddg.queue(Reply(200, DDG_PAGE.format(n=1)))
    outcome = await engine.search(Q)
    assert (outcome.provider, outcome.providers_tried, outcome.warnings) == (
        "duckd",
        ("duckd",),
        (),
    )
    assert [r.url for r in outcome.results] == ["https://ddg.example.org/1"]
    assert outcome.results[0].domain == "ddg.example.org"
    assert (outcome.cached, outcome.freshness_applied, outcome.query_rewritten) == (
        False, False, False)  # fmt: skip
    assert brv.requests == []
    assert transport.calls[0][1:] == (2, True)  # the per-request timeout and allow_private


async def test_anomaly_hands_over_cools_and_is_skipped(make, clock: FakeClock) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    ddg.queue(Reply(202, DDG_ANOMALY))
    brv.queue(Reply(200, brave("https://b.example/1")), Reply(200, brave("https://b.example/2")))
    outcome = await engine.search(Q)
    assert outcome.provider == "brave"
    assert outcome.providers_tried == ("duckd", "brave")
    assert len(outcome.warnings) == 1
    assert outcome.warnings[0].startswith("duckd: [rate_limited] bot challenge")
    assert len(ddg.requests) == 1  # a rate limit without a short Retry-After is not retried

    status = await engine.status()
    states = {p["id"]: (p["state"], p["cooling_until"], p["kind"]) for p in status["providers"]}
    assert states == {"duckd": ("cooling", "2027-01-15T08:01:00Z", "duckduckgo"),
                      "brave": ("healthy", None, "brave")}  # fmt: skip

    again = await engine.search(SearchQuery("second query"))
    assert again.providers_tried == ("brave",)
    assert again.warnings == (
        "duckd: [rate_limited] cooling down until 2027-01-15T08:01:00Z after repeated failures "
        "or a rate limit; not asked",
    )
    assert len(ddg.requests) == 1

    clock.advance(60)
    ddg.queue(Reply(200, DDG_PAGE.format(n=3)))
    third = await engine.search(SearchQuery("third query"))
    assert third.provider == "duckd"


async def test_server_error_is_retried_once_after_backoff(make, sleeps: Sleeps) -> None:
    engine, (ddg,) = await make("duckduckgo")
    ddg.queue(Reply(503, "busy"), Reply(200, DDG_PAGE.format(n=1)))
    outcome = await engine.search(Q)
    assert (outcome.provider, outcome.warnings) == ("duckd", ())
    assert len(ddg.requests) == 2
    assert sleeps.waits == [0.25]
    assert (await engine.status())["providers"][0]["state"] == "healthy"


async def test_second_failure_moves_on_and_two_searches_cool(make, sleeps: Sleeps) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    ddg.queue(Reply(500, "e1"), Reply(502, "e2"), Reply(500, "e3"), Reply(500, "e4"))
    brv.queue(Reply(200, brave("https://b.example/1")), Reply(200, brave("https://b.example/2")))
    first = await engine.search(Q)
    assert first.warnings == ("duckd: [server_error] HTTP 502",)
    assert len(ddg.requests) == 2 and sleeps.waits == [0.25]
    assert (await engine.status())["providers"][0]["state"] == "degraded"
    await engine.search(SearchQuery("other"))
    assert (await engine.status())["providers"][0]["state"] == "cooling"


@pytest.mark.parametrize(
    ("retry_after", "requests", "waits", "cooling_until"),
    [
        pytest.param("1", 2, [1.0], None, id="short-retry-after-retried"),
        pytest.param("30", 1, [], "2027-01-15T08:00:30Z", id="long-retry-after-cools"),
    ],
)
async def test_rate_limit_retry_after(  # type: ignore[no-untyped-def]
    make, sleeps: Sleeps, retry_after: str, requests: int, waits: list, cooling_until: str | None
) -> None:
    engine, (brv,) = await make("brave")
    limited = Reply(429, brave_error(429, "RATE_LIMITED", "slow"), {"Retry-After": retry_after})
    brv.queue(limited, Reply(200, brave("https://b.example/1")))
    if requests == 2:
        assert (await engine.search(Q)).provider == "brave"
    else:
        with pytest.raises(UpstreamError):
            await engine.search(Q)
    assert len(brv.requests) == requests
    assert sleeps.waits == waits
    assert (await engine.status())["providers"][0]["cooling_until"] == cooling_until


async def test_timeout_is_retried_then_reported(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave", timeout=0.1)
    ddg.queue(Reply(200, DDG_PAGE.format(n=1), delay=0.3), Reply(200, "", delay=0.3))
    brv.queue(Reply(200, brave("https://b.example/1")))
    outcome = await engine.search(Q)
    assert outcome.provider == "brave"
    assert outcome.warnings == ("duckd: [timeout] no answer within 0.1 s",)
    assert len(ddg.requests) == 2


async def test_deadline_spent_is_budget_exhausted(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave", timeout=0.2, deadline=0.3, backoff=0)
    ddg.queue(Reply(200, "", delay=0.4), Reply(200, "", delay=0.4))
    with pytest.raises(UpstreamError) as caught:
        await engine.search(Q)
    message = caught.value.message
    assert message.startswith("every search provider failed: ")
    assert "duckd: [budget_exhausted] the search deadline of 0.3 s ran out while waiting" in message
    assert "brave: [budget_exhausted] the search deadline of 0.3 s was spent; not asked" in message
    assert brv.requests == []
    # running out of our own budget is not held against the provider
    assert (await engine.status())["providers"][0]["state"] == "untested"


async def test_network_failure(make, transport: LoopbackTransport, clock: FakeClock) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = build_engine(
        {"providers": [{"id": "dead", "kind": "searxng", "base_url": f"http://127.0.0.1:{port}"}]},
        transport, clock, retry=RetryPolicy(backoff=0), sleep=Sleeps(),
    )  # fmt: skip
    with pytest.raises(UpstreamError) as caught:
        await engine.search(Q)
    assert "dead: [network] ClientConnectorError" in caught.value.message
    assert len(transport.calls) == 2  # retried once


async def test_empty_answer_hands_over(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    ddg.queue(Reply(200, DDG_EMPTY))
    brv.queue(Reply(200, brave("https://b.example/1")))
    outcome = await engine.search(Q)
    assert outcome.provider == "brave"
    assert outcome.warnings == ("duckd: [no_results] answered with no results",)
    assert (await engine.status())["providers"][0]["state"] == "healthy"


async def test_all_empty_is_an_empty_answer_not_an_error(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave", cache_ttl=600)
    ddg.queue(Reply(200, DDG_EMPTY), Reply(200, DDG_EMPTY))
    brv.queue(Reply(200, brave()), Reply(200, brave()))
    outcome = await engine.search(Q)
    assert (outcome.provider, outcome.results) == ("duckd", ())
    assert len(outcome.warnings) == 2
    again = await engine.search(Q)
    assert not again.cached  # an empty answer is never cached


async def test_every_provider_failing_lists_every_warning(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    ddg.queue(Reply(202, DDG_ANOMALY))
    brv.queue(Reply(422, brave_error(422, "SUBSCRIPTION_TOKEN_INVALID", "bad token")))
    with pytest.raises(UpstreamError) as caught:
        await engine.search(Q)
    assert caught.value.code == "upstream_error"
    assert "duckd: [rate_limited]" in caught.value.message
    assert "brave: [http_4xx] HTTP 422 SUBSCRIPTION_TOKEN_INVALID" in caught.value.message


async def test_pinned_provider_is_the_only_one_asked(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    brv.queue(Reply(500, "down"), Reply(500, "down"))
    with pytest.raises(UpstreamError) as caught:
        await engine.search(Q, provider_id="brave")
    assert "brave: [server_error]" in caught.value.message
    assert ddg.requests == []
    with pytest.raises(InvalidRequestError) as unknown:
        await engine.search(Q, provider_id="google")
    assert unknown.value.message.startswith("provider: unknown provider 'google'")


async def test_missing_key_is_not_asked(make, transport, clock) -> None:  # type: ignore[no-untyped-def]
    engine = build_engine(
        {"providers": [{"id": "tav", "kind": "tavily", "api_key_env": "NOPE_KEY"}]},
        transport, clock, environ={},
    )  # fmt: skip
    with pytest.raises(UpstreamError) as caught:
        await engine.search(Q)
    assert "tav: [http_4xx] no API key configured (set NOPE_KEY); not asked" in caught.value.message
    assert transport.calls == []


async def test_canonical_dedup_and_domain_filters(make) -> None:
    engine, (brv,) = await make("brave")
    brv.queue(
        Reply(200, brave(
            "http://Docs.Example.org/a?utm_source=x",
            "https://other.example/",
            "https://docs.example.org/a#part",
            "https://sub.docs.example.org/b?gclid=1&k=v",
            "https://docs.example.org.evil.test/c",
            "https://blocked.docs.example.org/d",
            "not a url",
        ))
    )  # fmt: skip
    query = SearchQuery.from_fields(
        {"query": "q", "include_domains": ["docs.example.org"],
         "exclude_domains": ["blocked.docs.example.org"]}
    )  # fmt: skip
    outcome = await engine.search(query)
    assert [r.url for r in outcome.results] == [
        "https://docs.example.org/a",
        "https://sub.docs.example.org/b?k=v",
    ]
    assert outcome.deduped == 1
    assert outcome.filtered_domains == 3
    assert [r.title for r in outcome.results] == ["t0", "t3"]  # first rank kept, https shown


async def test_results_are_capped_at_max_results(make) -> None:
    engine, (ddg,) = await make("duckduckgo")
    ddg.queue(Reply(200, DDG_MANY))
    outcome = await engine.search(SearchQuery("q", max_results=4))
    assert [r.url for r in outcome.results] == [f"https://many.example/{i}" for i in range(4)]


async def test_chinese_year_with_a_time_filtering_provider(make) -> None:
    engine, (brv,) = await make("brave")
    brv.queue(Reply(200, brave("https://a.example/1")))
    outcome = await engine.search(SearchQuery("2026年 大模型 最新进展"))
    assert brv.requests[0].query["q"] == "大模型 最新进展"
    assert brv.requests[0].query["freshness"] == "2026-01-01to2026-12-31"
    assert (outcome.query, outcome.sent_query) == ("2026年 大模型 最新进展", "大模型 最新进展")
    assert (outcome.query_rewritten, outcome.query_year, outcome.freshness_auto_inferred) == (
        True, 2026, True)  # fmt: skip
    assert outcome.freshness_applied


async def test_chinese_year_kept_where_no_time_filter_exists(make) -> None:
    engine, (ddg,) = await make("duckduckgo")
    ddg.queue(Reply(200, DDG_PAGE.format(n=1)))
    outcome = await engine.search(SearchQuery("2026年 大模型"))
    assert "q=2026%E5%B9%B4+%E5%A4%A7%E6%A8%A1%E5%9E%8B" in ddg.requests[0].body.decode()
    assert (outcome.query_rewritten, outcome.query_year, outcome.freshness_auto_inferred) == (
        False, 2026, False)  # fmt: skip
    assert not outcome.freshness_applied


async def test_freshness_applied_is_truthful(make) -> None:
    engine, (sx, brv) = await make("searxng", "brave")
    sx.queue(Reply(200, {"results": [{"url": "https://s.example/", "title": "s"}]}))
    outcome = await engine.search(SearchQuery("q", freshness="day"))  # type: ignore[arg-type]
    assert outcome.provider == "searx" and not outcome.freshness_applied
    brv.queue(Reply(200, brave("https://b.example/")))
    pinned = await engine.search(SearchQuery("q", freshness="day"), provider_id="brave")  # type: ignore[arg-type]
    assert pinned.freshness_applied


async def test_cache_hits_and_keys(make, clock: FakeClock) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave", cache_ttl=600)
    ddg.queue(Reply(200, DDG_PAGE.format(n=1)), Reply(200, DDG_PAGE.format(n=2)))
    brv.queue(Reply(200, brave("https://b.example/1")))
    first = await engine.search(Q)
    second = await engine.search(Q)
    assert (first.cached, second.cached) == (False, True)
    assert second.results == first.results
    assert len(ddg.requests) == 1
    assert (await engine.search(Q, provider_id="brave")).provider == "brave"  # another key
    clock.advance(600)
    assert not (await engine.search(Q)).cached
    assert len(ddg.requests) == 2
    stats = (await engine.status())["cache"]
    assert (stats["hits"], stats["misses"]) == (1, 3)


async def test_failures_are_not_cached(make) -> None:
    engine, (ddg,) = await make("duckduckgo", cache_ttl=600)
    ddg.queue(Reply(202, DDG_ANOMALY))
    with pytest.raises(UpstreamError):
        await engine.search(Q)
    assert (await engine.status())["cache"]["entries"] == 0


async def test_api_key_echoed_by_a_provider_is_scrubbed(  # type: ignore[no-untyped-def]
    make, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    engine, (brv, tav) = await make("brave", "tavily")
    echo = f"token {KEY} is invalid; url-encoded: BSAsecret%2Dkey-0123456789 {KEY.lower()}"
    brv.queue(Reply(422, brave_error(422, "VALIDATION", echo)))
    tav.queue(
        Reply(500, {"detail": {"error": f"bad key tvly-{KEY}"}}),
        Reply(500, {"detail": {"error": f"bad key tvly-{KEY}"}}),
    )
    with pytest.raises(UpstreamError) as caught:
        await engine.search(Q)
    assert brv.requests[0].headers["X-Subscription-Token"] == KEY  # the key was really sent
    texts = [caught.value.message, *(r.getMessage() for r in caplog.records)]
    assert "[redacted]" in caught.value.message
    for text in texts:
        assert KEY.lower() not in text.lower() and "BSAsecret%2Dkey" not in text
    assert (
        "brave: [http_4xx] HTTP 422: VALIDATION: token [redacted] is invalid; url-encoded: "
        "[redacted] [redacted]"
    ) in caught.value.message
    assert "tavil: [server_error] HTTP 500: bad key [redacted]" in caught.value.message


async def test_outcome_round_trips_through_a_dict(make) -> None:
    from gateway.search.chain import SearchOutcome

    engine, (brv,) = await make("brave")
    brv.queue(Reply(200, brave("https://a.example/1", "https://b.example/2")))
    outcome = await engine.search(SearchQuery("2026年 芯片"))
    assert SearchOutcome.from_dict(outcome.to_dict()) == outcome


@pytest.mark.parametrize(
    ("retries", "backoff_ms", "requests", "waits"),
    [
        (0, 100, 1, []),
        (3, 100, 4, [0.1, 0.2, 0.4]),  # exponential: the base doubled for each retry
        (3, 900, 4, [0.9, 1.8, 2.0]),  # capped at 2 s
    ],
)
async def test_retries_and_backoff_per_provider(  # type: ignore[no-untyped-def]
    transport, clock, sleeps, upstream, retries, backoff_ms, requests, waits
) -> None:
    fake = await upstream()
    fake.queue(*[Reply(503, "busy")] * retries, Reply(503, "busy"))
    entry = {"id": "ddg", "kind": "duckduckgo", "base_url": fake.base_url, "allow_private": True,
             "retries": retries, "backoff_ms": backoff_ms}  # fmt: skip
    retry = RetryPolicy(jitter=lambda: 1.0)
    engine = build_engine({"providers": [entry]}, transport, clock, sleep=sleeps, retry=retry)
    with pytest.raises(UpstreamError, match=r"ddg: \[server_error\] HTTP 503"):
        await engine.search(Q)
    assert len(fake.requests) == requests and sleeps.waits == waits


async def test_missing_keys_are_warned_at_start_and_shown_in_status(  # type: ignore[no-untyped-def]
    transport, clock, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.search")
    engine = build_engine(
        {"providers": [{"id": "ddg", "kind": "duckduckgo"},
                       {"id": "tav", "kind": "tavily", "api_key_env": "NOPE_KEY"}]},
        transport, clock, environ={},
    )  # fmt: skip
    assert "search provider tav (tavily): no API key in NOPE_KEY" in caplog.text
    providers = {p["id"]: p for p in (await engine.status())["providers"]}
    assert providers["tav"]["key_missing"] == ["NOPE_KEY"]
    assert "key_missing" not in providers["ddg"]


class Barrier:
    """A fake Brave that answers nobody until `parties` requests are waiting at once: only
    phrasings sent in parallel get through (sent one by one, the first would time out)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.waiting = 0
        self.all_here = asyncio.Event()
        self.queries: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        query = request.query["q"]
        self.queries.append(query)
        self.waiting += 1
        if self.waiting >= self.parties:
            self.all_here.set()
        try:
            await asyncio.wait_for(self.all_here.wait(), 3)
        except TimeoutError:
            return web.json_response({"error": "alone"}, status=500)
        hits = {"first": ["https://a.example/", "https://shared.example/"],
                "second": ["https://shared.example/", "https://b.example/"],
                "third": ["http://shared.example/?utm_source=x", "https://c.example/"]}[query]  # fmt: skip
        return web.json_response(brave(*hits))


async def test_phrasings_are_searched_in_parallel_and_fused(  # type: ignore[no-untyped-def]
    transport, clock, aiohttp_server
) -> None:
    barrier = Barrier(3)
    app = web.Application()
    app.router.add_get("/res/v1/web/search", barrier.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    entry = {"id": "brave", "kind": "brave", "api_key_env": "BRAVE_API_KEY",
             "base_url": str(server.make_url("")).rstrip("/"), "allow_private": True}  # fmt: skip
    engine = build_engine(
        {"providers": [entry], "timeout": 5, "deadline": 10, "cache_ttl": 60},
        transport, clock, environ={"BRAVE_API_KEY": KEY},
    )  # fmt: skip
    queries = [SearchQuery(q, max_results=5) for q in ("first", "second", "third")]
    outcome = await engine.search_many(queries)
    assert sorted(barrier.queries) == ["first", "second", "third"]
    assert [r.url for r in outcome.results] == [
        "https://shared.example/", "https://a.example/", "https://b.example/",
        "https://c.example/",
    ]  # fmt: skip
    assert outcome.queries == ("first", "second", "third") and outcome.query == "first"
    assert outcome.deduped == 2  # the shared page, found twice more
    assert outcome.provider == "brave" and outcome.providers_tried == ("brave",)
    # Each phrasing was cached on its own: asked again, nothing is sent.
    again = await engine.search_many(queries)
    assert again.cached and len(barrier.queries) == 3 and again.results == outcome.results


async def test_a_failed_phrasing_is_a_warning_all_failed_an_error(make) -> None:
    engine, (brv,) = await make("brave")
    brv.queue(Reply(200, brave("https://a.example/")), Reply(400, brave_error(400, "X", "bad")))
    outcome = await engine.search_many([SearchQuery("one"), SearchQuery("two")])
    assert [r.url for r in outcome.results] == ["https://a.example/"]
    assert any("'two': every search provider failed" in w for w in outcome.warnings)
    brv.queue(Reply(400, brave_error(400, "X", "bad")), Reply(400, brave_error(400, "X", "bad")))
    with pytest.raises(UpstreamError, match="for every phrasing"):
        await engine.search_many([SearchQuery("three"), SearchQuery("four")])


async def test_a_key_pair_with_a_missing_half_is_not_asked(transport, clock) -> None:  # type: ignore[no-untyped-def]
    entry = {"id": "wsa", "kind": "tencent_wsa", "secret_id_env": "TC_ID",
             "secret_key_env": "TC_KEY"}  # fmt: skip
    engine = build_engine({"providers": [entry]}, transport, clock, environ={"TC_KEY": "k" * 20})
    with pytest.raises(
        UpstreamError, match=r"wsa: \[http_4xx\] no API key configured \(set TC_ID\)"
    ):
        await engine.search(Q)
    assert transport.calls == []
    (status,) = (await engine.status())["providers"]
    assert status["key_missing"] == ["TC_ID"]


BAIDU_JSON = {"feed": {"entry": [{"title": "百度 结果", "url": "https://baidu.example.cn/1",
                                  "abs": "摘要"}]}}  # fmt: skip


async def test_region_providers_put_that_regions_engines_first(make) -> None:
    engine, (ddg, baidu) = await make(
        "duckduckgo", "baidu", region_providers={"cn": ["baidu", "bocha"]}
    )
    baidu.default = Reply(200, BAIDU_JSON)
    ddg.default = Reply(200, DDG_PAGE.format(n=1))
    chinese = SearchQuery("大模型 评测", region="cn-zh")
    assert engine.chain_for(chinese) == ("baidu", "duckd")  # bocha is not in this chain
    outcome = await engine.search(chinese)
    assert (outcome.provider, outcome.providers_tried) == ("baidu", ("baidu",))
    assert ddg.requests == []
    # Another region, or none, keeps the chain's own order.
    for query in (
        SearchQuery("q", region="us-en"),
        SearchQuery("q"),
        SearchQuery("q", region="cn"),
    ):
        expected = ("baidu", "duckd") if query.country == "cn" else ("duckd", "baidu")
        assert engine.chain_for(query) == expected
    other = await engine.search(SearchQuery("large models", region="us-en"))
    assert other.provider == "duckd" and len(baidu.requests) == 1


async def test_region_first_provider_failing_hands_over_to_the_rest(make) -> None:
    engine, (ddg, baidu) = await make("duckduckgo", "baidu", region_providers={"cn": ["baidu"]})
    baidu.queue(Reply(403, "captcha"))
    ddg.queue(Reply(200, DDG_PAGE.format(n=1)))
    outcome = await engine.search(SearchQuery("大模型", region="cn-zh"))
    assert outcome.providers_tried == ("baidu", "duckd") and outcome.provider == "duckd"


async def test_time_range_applied_is_what_the_answering_provider_filtered_by(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    ddg.default = Reply(200, DDG_PAGE.format(n=1))
    brv.default = Reply(200, brave("https://b.example/1"))
    # DuckDuckGo applies a freshness bucket: the week back from the clock's day (2027-01-15).
    week = await engine.search(SearchQuery("q", freshness="week"))
    assert (week.provider, week.time_range_applied) == ("duckd", ("2027-01-08", "2027-01-15"))
    # It cannot apply a date range, so it reports none; Brave can and does.
    ranged = SearchQuery("q", time_range=(date(2025, 1, 1), date(2025, 6, 30)))
    assert (await engine.search(ranged)).time_range_applied is None
    pinned = await engine.search(ranged, provider_id="brave")
    assert pinned.time_range_applied == ("2025-01-01", "2025-06-30")
    assert (await engine.search(SearchQuery("plain"))).time_range_applied is None


async def test_provider_switched_says_a_later_provider_answered(make) -> None:
    engine, (ddg, brv) = await make("duckduckgo", "brave")
    ddg.queue(Reply(200, DDG_PAGE.format(n=1)), Reply(202, DDG_ANOMALY))
    brv.default = Reply(200, brave("https://b.example/1"))
    first = await engine.search(SearchQuery("one"))
    assert (first.provider, first.provider_switched) == ("duckd", False)
    second = await engine.search(SearchQuery("two"))
    assert (second.provider, second.provider_switched) == ("brave", True)
    # Pinned, the one provider asked is the first.
    assert (await engine.search(SearchQuery("three"), provider_id="brave")).provider_switched is False


async def test_fused_results_carry_their_fused_score(make) -> None:
    engine, (brv,) = await make("brave")
    brv.queue(
        Reply(200, brave("https://a.example/1", "https://b.example/2")),
        Reply(200, brave("https://b.example/2", "https://c.example/3")),
        Reply(200, brave("https://a.example/1")),
    )
    fused = await engine.search_many([SearchQuery("one"), SearchQuery("two")])
    scores = {r.url: r.score for r in fused.results}
    # b is in both answers: 1/62 + 1/61; a and c in one each.
    assert scores == {
        "https://b.example/2": round(1 / 62 + 1 / 61, 6),
        "https://a.example/1": round(1 / 61, 6),
        "https://c.example/3": round(1 / 62, 6),
    }
    single = await engine.search(SearchQuery("one"))
    assert all(r.score is None for r in single.results)  # Brave gives none


# The Chinese-year rewrite, per provider: (applies the year as a date range, what in the
# request shows the range). The year leaves the text exactly where a range replaces it.
YEAR_BY_PROVIDER = {
    "duckduckgo": (False, None),
    "bing": (False, 'ex1:"ez5_20454_20818"'),  # sent as a courtesy, never claimed
    "baidu": (True, "stf=1767225600,1798761599"),
    "brave": (True, "2026-01-01to2026-12-31"),
    "tavily": (True, '"start_date":"2026-01-01","end_date":"2026-12-31"'),
    "serper": (True, "cdr:1,cd_min:01/01/2026,cd_max:12/31/2026"),
    "bocha": (True, '"freshness":"2026-01-01..2026-12-31"'),
    "searxng": (False, None),
    "tencent_wsa": (True, '"FromTime":1767225600'),
    "openai": (False, "2026-01-01"),  # asked in the prompt
    "anthropic": (False, "2026-01-01"),
}


def test_the_year_table_covers_every_provider() -> None:
    assert set(YEAR_BY_PROVIDER) == set(ADAPTERS)


@pytest.mark.parametrize("kind", sorted(YEAR_BY_PROVIDER))
async def test_chinese_year_per_provider(upstream, transport: LoopbackTransport, kind) -> None:  # type: ignore[no-untyped-def]
    applies, marker = YEAR_BY_PROVIDER[kind]
    adapter = ADAPTERS[kind]
    query = SearchQuery("2026年 大模型")
    sent = query_for(adapter, query, rewrite_chinese_year(query))
    assert sent.time_range == (date(2026, 1, 1), date(2026, 12, 31))
    assert adapter.applies_time_filter(sent) is applies
    fake = await upstream()
    fake.queue(Reply(200, {}))
    settings = ProviderSettings(fake.base_url, "k", "id", now=1_800_000_000.0)
    await transport.send(adapter.request(sent, settings), timeout=5, allow_private=True)
    received = fake.requests[0]
    pairs = "&".join(f"{k}={v}" for k, v in received.query.items())
    seen = unquote_plus(f"{received.path}?{pairs} {received.body.decode()}")
    assert ("2026年" in seen) is not applies  # the year stays in the text where no range is
    assert "大模型" in seen
    if marker is not None:
        assert marker in seen


async def test_chinese_year_answered_by_each_keyless_engine(make) -> None:
    engine, (ddg, bing, baidu) = await make("duckduckgo", "bing", "baidu")
    ddg.queue(Reply(200, DDG_EMPTY))
    bing.queue(Reply(200, '<html><body><ol id="b_results"></ol></body></html>'))
    baidu.queue(Reply(200, BAIDU_JSON))
    outcome = await engine.search(SearchQuery("2026年 大模型"))
    # DuckDuckGo and Bing kept the year in the text; Baidu answered with it as its range.
    assert "2026" in ddg.requests[0].body.decode()
    assert "2026" in bing.requests[0].query["q"]
    assert baidu.requests[0].query["wd"] == "大模型"
    assert (outcome.provider, outcome.sent_query) == ("baidu", "大模型")
    assert outcome.time_range_applied == ("2026-01-01", "2026-12-31")
    assert outcome.query_rewritten and outcome.provider_switched


async def test_chinese_year_kept_in_the_text_reports_no_window(make) -> None:
    engine, (ddg,) = await make("duckduckgo")
    ddg.queue(Reply(200, DDG_PAGE.format(n=1)))
    outcome = await engine.search(SearchQuery("2026年 大模型"))
    assert (outcome.sent_query, outcome.time_range_applied) == ("2026年 大模型", None)


def test_full_jitter_draws_below_the_exponential_step() -> None:
    draws = iter([0.5, 0.0, 0.999, 0.25])
    policy = RetryPolicy(backoff=0.25, jitter=lambda: next(draws))
    assert [policy.wait(0.25, n) for n in range(4)] == [0.125, 0.0, 0.999 * 1.0, 0.25 * 2.0]
    assert RetryPolicy().backoff == 0.25 and RetryPolicy().cap == 2.0
    seeded = RetryPolicy(jitter=__import__("random").Random(7).random)
    assert all(0 <= seeded.wait(0.25, n) < min(2.0, 0.25 * 2**n) for n in range(10))


@pytest.mark.parametrize(
    ("kind", "limited"),
    [
        pytest.param("brave", Reply(429, brave_error(429, "RATE_LIMITED", "slow")), id="brave"),
        pytest.param("duckduckgo", Reply(429, "<html>slow down</html>"), id="duckduckgo"),
    ],
)
async def test_a_429_without_retry_after_is_retried_once_then_cools(  # type: ignore[no-untyped-def]
    make, sleeps: Sleeps, kind, limited
) -> None:
    engine, (fake,) = await make(kind, backoff=0.3)
    fake.queue(limited, Reply(200, brave("https://b.example/1") if kind == "brave" else
                                DDG_PAGE.format(n=1)))  # fmt: skip
    outcome = await engine.search(Q)
    assert outcome.warnings == () and len(fake.requests) == 2
    assert sleeps.waits == [0.3]  # after the backoff


async def test_a_bare_429_is_retried_once_however_many_retries(  # type: ignore[no-untyped-def]
    transport, clock, sleeps, upstream
) -> None:
    fake = await upstream()
    fake.default = Reply(429, "<html>slow down</html>")
    entry = {"id": "ddg", "kind": "duckduckgo", "base_url": fake.base_url, "allow_private": True,
             "retries": 3, "backoff_ms": 200}  # fmt: skip
    retry = RetryPolicy(jitter=lambda: 0.5)
    engine = build_engine({"providers": [entry]}, transport, clock, sleep=sleeps, retry=retry)
    with pytest.raises(UpstreamError, match=r"\[rate_limited\]"):
        await engine.search(Q)
    assert len(fake.requests) == 2 and sleeps.waits == [0.1]  # half of the 0.2 s step
    assert (await engine.status())["providers"][0]["state"] == "cooling"


async def test_a_spent_quota_429_is_not_retried(make, sleeps: Sleeps) -> None:
    engine, (brv,) = await make("brave")
    brv.queue(Reply(429, brave_error(429, "QUOTA_LIMITED", "monthly quota spent")))
    with pytest.raises(UpstreamError):
        await engine.search(Q)
    assert len(brv.requests) == 1 and sleeps.waits == []
