"""POST /v1/search end to end: the gateway, fake providers on loopback, the audit file.

Provider traffic goes through the gateway's own pinned client (tests/tools/searchgateway.py);
results are decided by each client's policy, after the shared cache.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from pathlib import Path

import orjson
import pytest

from gateway.provenance.dsse import DSSEError, generate_keypair, load_public_key
from gateway.provenance.envelope import verify_response
from gateway.provenance.markers import unwrap
from gateway.tools.responses import SEARCH_RESPONSE
from tests.conformance import assert_conforms
from tests.search.conftest import Reply
from tests.server.conftest import audit_records, policies_for
from tests.tools.searchgateway import KEYS

ALL_FOUR = (
    ("brave", "brave"),
    ("tavily", "tavily"),
    ("searx", "searxng"),
    ("ddg", "duckduckgo"),
)


@pytest.fixture
def start(search_gateways, upstream):
    """Start a gateway; every one started is closed after the test."""
    policies = policies_for(
        upstream.port,
        dropper={},
        marker={"default": "allow", "results": "mark"},
        nosearch={"search": False},
    )
    return functools.partial(search_gateways, policies=policies)


def urls(body) -> list[str]:
    return [result["url"] for result in body["results"]]


def search_records(gateway, action: str = "WebSearch") -> list[dict]:
    return [r for r in audit_records(gateway.services) if r["event"]["action"] == action]


async def test_search_response_fields_and_wrapping(start, upstream) -> None:
    gateway = await start()
    status, body = await gateway.search("dropper", query="gateway tests", max_results=10)
    assert status == 200, body
    assert_conforms(SEARCH_RESPONSE, body)
    port = upstream.port
    assert urls(body) == [
        f"http://site.example.com:{port}/page",
        f"http://other.example.com:{port}/page",
        f"http://internal.example.com:{port}/page",
        f"http://site.example.com:{port}/text?body=forged",
    ]
    assert set(body) == {
        "query", "provider", "providers_tried", "warnings", "cached", "freshness_applied",
        "query_rewritten", "query_year", "freshness_auto_inferred", "deduped", "filtered",
        "results", "envelope", "answer", "query_sent", "time_range_applied", "total",
        "provider_switched",
    }  # fmt: skip
    assert (body["answer"], body["query_sent"], body["time_range_applied"]) == (
        None, "gateway tests", None)  # fmt: skip
    assert (body["total"], body["provider_switched"]) == (None, False)
    assert (body["query"], body["provider"], body["providers_tried"]) == (
        "gateway tests",
        "brave",
        ["brave"],
    )
    assert body["warnings"] == [] and body["cached"] is False
    assert body["freshness_applied"] is False and body["query_rewritten"] is False
    assert body["deduped"] == 1
    assert body["filtered"] == {"policy": 4, "domains": 0}
    env = body["envelope"]
    nonce = env["marker"]
    assert re.fullmatch(r"[0-9a-f]{32}", nonce)
    assert (env["tool"], env["v"], env["trust"], env["client"]) == (
        "WebSearch",
        1,
        "untrusted",
        "dropper",
    )
    assert env["policy"]["name"] == "dropper-policy"
    assert env["policy"]["rule"] == "tools.WebSearch.enabled"
    plain = []
    for result in body["results"]:
        assert set(result) == {"id", "title", "url", "snippet", "domain", "published_at", "score"}
        assert result["score"] is None  # Brave gives no score
        for key in ("title", "snippet"):
            first = result[key].split("\n", 1)[0]
            assert first == (f'<<<UNTRUSTED_WEB_CONTENT nonce={nonce} source="{result["url"]}">>>')
        plain.append(
            {
                **result,
                "title": unwrap(result["title"], nonce),
                "snippet": unwrap(result["snippet"], nonce),
            }
        )
        assert result["id"] == hashlib.sha256(result["url"].encode()).hexdigest()[:16]
    assert plain[0]["title"] == "Test page one" and plain[0]["domain"] == "site.example.com"
    digest = hashlib.sha256(orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert env["content_sha256"] == digest
    # The fullwidth forged end marker is neutralised and counted.
    assert "END·UNTRUSTED" in plain[3]["title"] and "＜＜＜" not in plain[3]["title"]
    assert env["sanitized"]["marker_lookalikes"] == 1
    # The provider was asked through the gateway's client, with the operator's key.
    sent = gateway.fakes["brave"].requests[0]
    assert sent.headers["X-Subscription-Token"] == KEYS["brave"]
    assert sent.query["q"] == "gateway tests"


async def test_one_audit_record_counts_what_was_filtered(start) -> None:
    gateway = await start()
    status, _ = await gateway.search("dropper", query="counted")
    assert status == 200
    records = search_records(gateway)
    assert len(records) == 1
    record = records[0]
    assert record["event"]["outcome"] == "success" and record["event"]["type"] == ["allowed"]
    assert record["client"] == {"id": "dropper"}
    assert record["search"] == {
        "query": "counted",
        "provider": "brave",
        "providers_tried": ["brave"],
        "results": 4,
        "filtered_policy": 4,
        "filtered_domains": 0,
        "cached": False,
    }
    assert record["policy"]["decision"] == "allow"
    assert record["policy"]["rule"] == "tools.WebSearch.enabled"


async def test_mark_keeps_denied_results_flagged(start, upstream) -> None:
    gateway = await start()
    status, body = await gateway.search("marker", query="marked")
    assert status == 200
    assert_conforms(SEARCH_RESPONSE, body)
    flags = {r["url"]: r.get("policy") for r in body["results"]}
    assert flags["https://blocked.example.com/secret"] == {
        "decision": "deny",
        "reason": "domain_denied",
        "rule": "domains.deny[0]",
    }
    assert flags["http://10.0.0.1/admin"] == {
        "decision": "deny",
        "reason": "private_address",
        "rule": "networks.block_private",
    }
    assert flags["http://169.254.169.254/latest/meta-data/"] == {
        "decision": "deny",
        "reason": "metadata_address",
        "rule": "networks.metadata",
    }
    assert flags["https://outside.test/x"] is None  # default: allow in this policy
    assert flags[f"http://site.example.com:{upstream.port}/page"] is None
    assert body["filtered"] == {"policy": 3, "domains": 0}
    assert len(body["results"]) == 8
    nonce = body["envelope"]["marker"]
    plain = [
        {**r, "title": unwrap(r["title"], nonce), "snippet": unwrap(r["snippet"], nonce)}
        for r in body["results"]
    ]
    digest = hashlib.sha256(orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert body["envelope"]["content_sha256"] == digest


@pytest.mark.parametrize(
    ("client_id", "url"),
    [
        pytest.param("marker", "http://10.0.0.1/admin", id="private-ip-marked"),
        pytest.param("marker", "http://169.254.169.254/latest/meta-data/", id="metadata-marked"),
        pytest.param("marker", "https://blocked.example.com/secret", id="denied-name-marked"),
    ],
)
async def test_denied_results_are_not_fetchable_by_id(start, client_id, url) -> None:
    gateway = await start()
    _, body = await gateway.search(client_id, query="ids")
    result = next(r for r in body["results"] if r["url"] == url)
    status, error = await gateway.post("/v1/fetch", client_id, url=f"id:{result['id']}")
    assert status == 400
    assert (error["error"]["code"], error["error"]["reason"]) == ("invalid_request", "unknown_id")


async def test_allowed_result_is_fetchable_by_id_by_its_client_only(start, upstream) -> None:
    gateway = await start()
    _, body = await gateway.search("dropper", query="fetch me")
    first = body["results"][0]
    status, page = await gateway.post("/v1/fetch", "dropper", url=f"id:{first['id']}")
    assert status == 200, page
    env = page["envelope"]
    assert env["requested_id"] == first["id"]
    assert env["requested_url"] == env["final_url"] == first["url"]
    assert "Hello" in unwrap(page["content"], env["marker"])
    # Ids belong to the client that searched.
    status, error = await gateway.post("/v1/fetch", "marker", url=f"id:{first['id']}")
    assert (status, error["error"]["reason"]) == (400, "unknown_id")
    status, error = await gateway.post("/v1/fetch", "dropper", url="id:0123456789abcdef")
    assert (status, error["error"]["reason"]) == (400, "unknown_id")


async def test_name_resolving_inside_is_refused_when_fetched(start, upstream) -> None:
    """Filtering never resolves names; the fetch that follows does and refuses the address."""
    gateway = await start()
    _, body = await gateway.search("dropper", query="internal")
    internal = next(r for r in body["results"] if r["domain"] == "internal.example.com")
    status, error = await gateway.post("/v1/fetch", "dropper", url=f"id:{internal['id']}")
    assert status == 403
    assert (error["error"]["code"], error["error"]["reason"]) == (
        "policy_denied",
        "private_address",
    )


async def test_fallback_names_each_failure(start) -> None:
    gateway = await start(providers=ALL_FOUR)
    limited = Reply(
        429, {"type": "ErrorResponse", "error": {"code": "RATE_LIMITED", "detail": "slow"}}
    )
    gateway.fakes["brave"].queue(limited, limited)  # a bare 429 is retried once, then cools
    gateway.fakes["tavily"].queue(Reply(200, b"{not json"))
    gateway.fakes["searx"].queue(Reply(403, "<html>Forbidden</html>"))
    status, body = await gateway.search("dropper", query="fallback")
    assert status == 200, body
    assert body["provider"] == "ddg"
    assert body["providers_tried"] == ["brave", "tavily", "searx", "ddg"]
    assert [w.split(" ", 2)[:2] for w in body["warnings"]] == [
        ["brave:", "[rate_limited]"],
        ["tavily:", "[invalid_response]"],
        ["searx:", "[http_4xx]"],
    ]
    assert len(body["results"]) == 4
    # The rate-limited provider now cools; /v1/status says so, with its deadline.
    status, state = await gateway.get("/v1/status", "dropper")
    assert status == 200
    providers = {p["id"]: p for p in state["search"]["providers"]}
    assert providers["brave"]["state"] == "cooling" and providers["brave"]["cooling_until"]
    assert providers["tavily"]["state"] == "degraded"
    assert providers["ddg"]["state"] == "healthy" and providers["ddg"]["cooling_until"] is None
    assert {p["kind"] for p in state["search"]["providers"]} == {
        "brave",
        "tavily",
        "searxng",
        "duckduckgo",
    }
    assert state["search"]["cache"] == {"hits": 0, "misses": 1, "entries": 1}


async def test_every_provider_failing_is_upstream_error_with_every_warning(start, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    gateway = await start(providers=ALL_FOUR)
    echo = f"key {KEYS['brave']} is not valid for this option"
    gateway.fakes["brave"].queue(
        Reply(
            422, {"type": "ErrorResponse", "error": {"code": "OPTION_NOT_IN_PLAN", "detail": echo}}
        )
    )
    gateway.fakes["tavily"].queue(
        Reply(401, {"detail": {"error": f"Unauthorized: key {KEYS['tavily']} invalid"}})
    )
    gateway.fakes["searx"].queue(Reply(403, "<html>Forbidden</html>"))
    gateway.fakes["ddg"].queue(Reply(202, "<html><div class='anomaly-modal__modal'></div></html>"))
    response = await gateway.client.post(
        "/v1/search",
        json={"query": "nothing works"},
        headers={"Authorization": "Bearer token-dropper"},
    )
    raw = await response.read()
    body = orjson.loads(raw)
    assert response.status == 502
    assert body["error"]["code"] == "upstream_error"
    message = body["error"]["message"]
    for fragment in (
        "brave: [http_4xx]",
        "tavily: [http_4xx]",
        "searx: [http_4xx]",
        "ddg: [rate_limited]",
    ):
        assert fragment in message
    records = search_records(gateway)
    assert len(records) == 1 and records[0]["event"]["outcome"] == "failure"
    assert records[0]["error"]["code"] == "upstream_error"
    audit_bytes = Path(gateway.services.audit.path).read_bytes()
    logs = "\n".join(record.getMessage() for record in caplog.records)
    for key in KEYS.values():
        assert key.encode() not in raw
        assert key.encode() not in audit_bytes
        assert key not in logs
    assert "[redacted]" in message


async def test_cached_answer_is_filtered_per_client(start, upstream) -> None:
    gateway = await start()
    status, first = await gateway.search("dropper", query="shared answer")
    assert status == 200 and first["cached"] is False
    status, again = await gateway.search("dropper", query="shared answer")
    assert status == 200 and again["cached"] is True and again["envelope"]["cached"] is True
    assert urls(again) == urls(first)
    assert again["envelope"]["marker"] != first["envelope"]["marker"]
    assert gateway.requests_to("brave") == 1
    status, marked = await gateway.search("marker", query="shared answer")
    assert status == 200 and marked["cached"] is True
    assert gateway.requests_to("brave") == 1
    assert len(marked["results"]) == 8 and marked["filtered"]["policy"] == 3
    assert len(first["results"]) == 4 and first["filtered"]["policy"] == 4
    # A cached answer still remembers ids for the client asking now.
    blocked_free = next(r for r in marked["results"] if r["domain"] == "site.example.com")
    status, _ = await gateway.post("/v1/fetch", "marker", url=f"id:{blocked_free['id']}")
    assert status == 200
    records = search_records(gateway)
    assert [r["search"]["cached"] for r in records] == [False, True, True]
    status, state = await gateway.get("/v1/status", "dropper")
    assert state["search"]["cache"]["hits"] == 2


async def test_chinese_year_is_rewritten_into_a_time_window(start) -> None:
    gateway = await start()
    status, body = await gateway.search("dropper", query="2026年 大模型 最新进展")
    assert status == 200, body
    assert body["query"] == "2026年 大模型 最新进展"
    assert body["query_rewritten"] is True and body["query_year"] == 2026
    assert body["freshness_auto_inferred"] is True and body["freshness_applied"] is True
    sent = gateway.fakes["brave"].requests[0].query
    assert sent["q"] == "大模型 最新进展"
    assert sent["freshness"] == "2026-01-01to2026-12-31"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        pytest.param(
            {"query": "x", "provider": "nope"}, "provider: unknown provider", id="provider"
        ),
        pytest.param({"query": "x", "max_results": 21}, "max_results", id="max-results"),
        pytest.param({"query": "x", "bogus": 1}, "bogus: unknown field", id="unknown-field"),
        pytest.param({"query": "x", "site": "a b"}, "site", id="bad-site"),
        pytest.param({"query": "   "}, "query", id="blank-query"),
    ],
)
async def test_bad_requests(start, body, fragment) -> None:
    gateway = await start()
    status, error = await gateway.search("dropper", **body)
    assert status == 400 and error["error"]["code"] == "invalid_request"
    assert fragment in error["error"]["message"]
    assert gateway.requests_to("brave") == 0


async def test_named_provider_is_the_only_one_asked(start) -> None:
    gateway = await start()
    gateway.fakes["tavily"].queue(Reply(500, {"detail": {"error": "down"}}))
    gateway.fakes["tavily"].queue(Reply(500, {"detail": {"error": "down"}}))
    status, body = await gateway.search("dropper", query="pinned", provider="tavily")
    assert status == 502 and body["error"]["code"] == "upstream_error"
    assert gateway.requests_to("brave") == 0 and gateway.requests_to("tavily") == 2


async def test_tool_disabled_is_refused_and_audited(start) -> None:
    gateway = await start()
    status, error = await gateway.search("nosearch", query="x")
    assert status == 403
    assert error["error"]["code"] == "tool_disabled"
    assert error["error"]["rule"] == "tools.WebSearch.enabled"
    assert gateway.requests_to("brave") == 0
    record = search_records(gateway)[-1]
    assert record["event"]["outcome"] == "failure" and record["event"]["type"] == ["denied"]
    assert record["policy"]["reason"] == "tool_disabled"


async def test_signed_search_response_verifies(start, tmp_path) -> None:
    private, public, _ = generate_keypair(tmp_path / "keys")
    gateway = await start(signing_key=str(private))
    status, body = await gateway.search("dropper", query="signed")
    assert status == 200
    assert_conforms(SEARCH_RESPONSE, body)
    key = load_public_key(public)
    verify_response(body, [key])
    tampered = dict(body, results=[dict(body["results"][0], url="https://evil.example.com/")])
    with pytest.raises(DSSEError, match="content_sha256"):
        verify_response(tampered, [key])


async def test_mcp_call_returns_the_api_body_and_readable_text(start) -> None:
    gateway = await start()
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "WebSearch", "arguments": {"query": "over mcp"}},
    }
    status, answer = await gateway.post("/mcp", "dropper", **message)
    assert status == 200, answer
    result = answer["result"]
    assert result.get("isError") is not True
    body = result["structuredContent"]
    assert body["envelope"]["tool"] == "WebSearch" and len(body["results"]) == 4
    [record] = search_records(gateway)
    assert record["event"]["id"] == body["envelope"]["id"]
    (content,) = result["content"]
    text = content["text"]
    assert text.startswith("[gateway provenance: written by the gateway, not by the pages]")
    for result_item in body["results"]:
        assert result_item["title"] in text and result_item["snippet"] in text
    listed = await gateway.post("/mcp", "nosearch", jsonrpc="2.0", id=2, method="tools/list")
    names = [tool["name"] for tool in listed[1]["result"]["tools"]]
    assert "WebSearch" not in names and "Research" not in names


async def test_status_shows_the_effective_search_configuration_never_a_key(start) -> None:
    gateway = await start(
        providers=ALL_FOUR,
        search={"weights": {".python.org": 1.3}, "region_providers": {"cn": ("ddg",)}},
    )
    status, body = await gateway.get("/v1/status", "dropper")
    assert status == 200
    search = body["search"]
    assert search["config"] == {
        "chain": "configured", "timeout": 15.0, "deadline": 10.0, "cache_ttl": 600.0,
        "weights": {".python.org": 1.3}, "region_providers": {"cn": ["ddg"]}, "prefer": None,
    }  # fmt: skip
    brave = next(p for p in search["providers"] if p["id"] == "brave")
    assert brave["host"].startswith("brave.provider.example:")
    assert (brave["kind"], brave["retries"], brave["backoff_ms"]) == ("brave", 1, 250)
    text = orjson.dumps(body).decode()
    assert all(key not in text for key in KEYS.values())
