"""POST /v1/search end to end over the keyless chain and the new providers: the gateway, fake
engines on loopback replaying their real pages and errors, the audit file."""

from __future__ import annotations

import functools
import hashlib

import orjson
import pytest

from gateway.config import SearchConfig
from gateway.provenance.markers import unwrap
from gateway.search.assembly import chain_entries
from gateway.tools.responses import SEARCH_RESPONSE
from gateway.tools.websearch import REMOVED_LINK
from tests.conformance import assert_conforms
from tests.search.conftest import Reply
from tests.server.conftest import policies_for
from tests.tools.searchgateway import KEYS

KEYLESS = (("ddg", "duckduckgo"), ("bing", "bing"), ("baidu", "baidu"))
DDG_ANOMALY = (
    "<html><body><div class='anomaly-modal__modal'><form id='challenge-form'>"
    "Unfortunately, bots use DuckDuckGo too.</form></div></body></html>"
)
BING_CHALLENGE = "<html><body><div id='challenge-container'><iframe id='iframe-challenge'>"
BAIDU_CAPTCHA_URL = "https://wappass.baidu.com/static/captcha/tuxing_v2.html?&logid=1&ak=ab"


@pytest.fixture
def start(search_gateways, upstream):
    return functools.partial(search_gateways, policies=policies_for(upstream.port, agent={}))


def urls(body) -> list[str]:
    return [result["url"] for result in body["results"]]


def test_the_default_chain_is_duckduckgo_bing_baidu() -> None:
    chain = chain_entries(SearchConfig(), {})
    assert [(p.id, p.kind) for p in chain] == list(KEYLESS)


async def test_duckduckgo_and_bing_blocked_baidu_answers(start, upstream) -> None:
    gateway = await start(providers=KEYLESS)
    gateway.fakes["ddg"].queue(Reply(202, DDG_ANOMALY))
    gateway.fakes["bing"].queue(Reply(200, BING_CHALLENGE))
    status, body = await gateway.search("agent", query="asyncio 教程")
    assert status == 200, body
    assert body["provider"] == "baidu"
    assert body["providers_tried"] == ["ddg", "bing", "baidu"]
    assert [w.split(" ", 2)[:2] for w in body["warnings"]] == [
        ["ddg:", "[rate_limited]"],
        ["bing:", "[rate_limited]"],
    ]
    assert urls(body)[0] == f"http://site.example.com:{upstream.port}/page"
    assert gateway.fakes["baidu"].requests[0].query["tn"] == "json"
    _, status_body = await gateway.get("/v1/status", "agent")
    health = {p["id"]: p["state"] for p in status_body["search"]["providers"]}
    assert health == {"ddg": "cooling", "bing": "cooling", "baidu": "healthy"}


async def test_baidu_captcha_is_blocked_and_cools(start) -> None:
    gateway = await start(providers=KEYLESS)
    gateway.fakes["ddg"].queue(Reply(202, DDG_ANOMALY))
    gateway.fakes["bing"].queue(Reply(200, BING_CHALLENGE))
    gateway.fakes["baidu"].queue(Reply(302, b"", {"Location": BAIDU_CAPTCHA_URL}))
    status, body = await gateway.search("agent", query="everything blocks")
    assert status == 502
    assert "baidu: [blocked] captcha" in body["error"]["message"]
    _, status_body = await gateway.get("/v1/status", "agent")
    baidu = next(p for p in status_body["search"]["providers"] if p["id"] == "baidu")
    assert (baidu["state"], baidu["last_error"]) == ("cooling", "blocked")


async def test_queries_are_fused_and_echoed(start, upstream) -> None:
    port = upstream.port
    gateway = await start(providers=(("brave", "brave"),))
    status, body = await gateway.search("agent", queries=["gateway tests", "gateway  tests", "x"])
    assert status == 200, body
    assert body["query"] == "gateway tests" and body["queries"] == ["gateway tests", "x"]
    # Both phrasings got the same standard answer: every page once, the repeats counted.
    assert body["results"][0]["url"] == f"http://site.example.com:{port}/page"
    assert len({r["url"] for r in body["results"]}) == len(body["results"])
    assert body["deduped"] == 1 + 1 + 8  # a repeat in each answer, then all 8 pages again
    assert body["filtered"]["policy"] == 4
    assert len(gateway.fakes["brave"].requests) == 2


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        pytest.param({"query": "a", "queries": ["b"]}, "not both", id="both"),
        pytest.param({"queries": []}, "at least 1", id="empty"),
        pytest.param({"queries": ["a"] * 6}, "at most 5", id="six"),
        pytest.param({"queries": ["a", " "]}, "queries[1]", id="blank-phrasing"),
        pytest.param({"max_results": 3}, "query: is required (or queries", id="neither"),
    ],
)
async def test_bad_queries(start, fields, fragment) -> None:
    gateway = await start(providers=(("brave", "brave"),))
    status, body = await gateway.search("agent", **fields)
    assert status == 400 and fragment in body["error"]["message"], body


async def test_weights_reorder_results(start, upstream) -> None:
    port = upstream.port
    gateway = await start(
        providers=(("brave", "brave"),), search={"weights": {"other.example.com": 3.0}}
    )
    status, body = await gateway.search("agent", query="weighted")
    assert status == 200
    assert body["results"][0]["url"] == f"http://other.example.com:{port}/page"


DENIED = ("blocked.example.com", "10.0.0.1", "169.254.169.254", "outside.test")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_model_native_denied_urls_never_reach_the_agent(start, upstream, kind) -> None:
    gateway = await start(providers=((kind, kind),))
    response = await gateway.client.post(
        "/v1/search",
        json={"query": "model search"},
        headers={"Authorization": "Bearer token-agent"},
    )
    raw = await response.read()
    assert response.status == 200, raw
    body = orjson.loads(raw)
    assert_conforms(SEARCH_RESPONSE, body)
    port = upstream.port
    assert body["provider"] == kind
    assert urls(body) == [
        f"http://site.example.com:{port}/page",
        f"http://other.example.com:{port}/page",
        f"http://internal.example.com:{port}/page",
        f"http://site.example.com:{port}/text?body=forged",
    ]
    assert body["filtered"]["policy"] == 4
    for denied in DENIED:
        assert denied.encode() not in raw  # not in results, not in the answer, nowhere
    nonce = body["envelope"]["marker"]
    answer = unwrap(body["answer"], nonce)
    assert REMOVED_LINK in answer and f"http://site.example.com:{port}/page" in answer
    assert body["envelope"]["answer_sha256"] == hashlib.sha256(answer.encode()).hexdigest()
    assert 'source="web_search_answer"' in body["answer"].split("\n", 1)[0]
    assert KEYS[kind].encode() not in raw
    sent = gateway.fakes[kind].requests[0]
    assert KEYS[kind] in (sent.headers.get("Authorization", "") + sent.headers.get("x-api-key", ""))


async def test_a_missing_key_shows_in_status_and_the_provider_is_skipped(start) -> None:
    from gateway.tools.responses import STATUS_RESPONSE

    gateway = await start(providers=(("gpt", "openai"), ("brave", "brave")), without_keys=["gpt"])
    status, body = await gateway.get("/v1/status", "agent")
    assert status == 200
    assert_conforms(STATUS_RESPONSE, body)
    gpt = body["search"]["providers"][0]
    assert (gpt["id"], gpt["key_missing"]) == ("gpt", ["GW_TEST_OPENAI_KEY"])
    status, answer = await gateway.search("agent", query="skips the one without a key")
    assert status == 200 and answer["provider"] == "brave"
    assert answer["warnings"] == [
        "gpt: [http_4xx] no API key configured (set GW_TEST_OPENAI_KEY); not asked"
    ]
    assert gateway.requests_to("gpt") == 0


async def test_near_duplicates_merge_and_also_at_keeps_only_allowed_urls(start, upstream) -> None:
    port = upstream.port
    snippet = "The one page about asyncio timeouts, copied around the web."
    hits = [
        ("Asyncio timeouts explained", f"http://site.example.com:{port}/a", snippet),
        ("Asyncio timeouts explained", f"http://site.example.com:{port}/a?print=1", "other"),
        ("Asyncio timeouts explained", "https://blocked.example.com/copy", snippet),
        ("Asyncio timeouts explained", f"http://other.example.com:{port}/copy", snippet),
        ("Something else", f"http://other.example.com:{port}/page", "another page"),
    ]
    gateway = await start(providers=(("brave", "brave"),), hits=hits)
    status, body = await gateway.search("agent", query="asyncio timeouts")
    assert status == 200
    assert urls(body) == [
        f"http://site.example.com:{port}/a",
        f"http://other.example.com:{port}/page",
    ]
    assert body["deduped"] == 3
    assert body["results"][0]["also_at"] == [
        f"http://site.example.com:{port}/a?print=1",
        f"http://other.example.com:{port}/copy",
    ]
    assert "also_at" not in body["results"][1]


async def test_tavily_answer_scores_and_a_switch_are_in_the_response(start, upstream) -> None:
    port = upstream.port
    gateway = await start(providers=(("brave", "brave"), ("tavily", "tavily")))
    gateway.fakes["brave"].queue(Reply(500, {"error": "down"}), Reply(500, {"error": "down"}))
    answer = (
        f"Mostly yes; see http://site.example.com:{port}/page and "
        "https://blocked.example.com/secret for details."
    )
    hits = [("Test page", f"http://site.example.com:{port}/page", "The first result.")]
    gateway.fakes["tavily"].default = Reply(
        200,
        {"query": "q", "answer": answer, "response_time": "0.4",
         "results": [{"title": t, "url": u, "content": s, "score": 0.8137} for t, u, s in hits]},
    )  # fmt: skip
    status, body = await gateway.search("agent", query="does it work", freshness="month")
    assert status == 200, body
    assert_conforms(SEARCH_RESPONSE, body)
    assert (body["provider"], body["provider_switched"]) == ("tavily", True)
    assert body["query_sent"] == "does it work" and body["total"] is None
    [result] = body["results"]
    assert result["score"] == 0.8137
    nonce = body["envelope"]["marker"]
    text = unwrap(body["answer"], nonce)
    assert f"http://site.example.com:{port}/page" in text
    assert "blocked.example.com" not in text and REMOVED_LINK in text
    window = body["time_range_applied"]
    assert set(window) == {"start", "end"} and window["start"] < window["end"]
    assert gateway.fakes["tavily"].requests[0].json()["include_answer"] is True
