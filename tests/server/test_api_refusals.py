"""One audit record per tool call, also for calls refused before the tool decided
anything: a schema error, a body that is not JSON, an unknown `id:`, an unknown provider. Each
is a denial with the error's reason, written before the answer, and a log that cannot be
written turns the answer into 503 (fail closed)."""

from __future__ import annotations

import os

import pytest

from tests.server.conftest import LIMITED_BODY_BYTES, audit_records

# (id, path, body, reason in the record, url.original in the record)
REFUSED = [
    ("fetch url not a string", "/v1/fetch", {"url": 5}, "invalid_request", None),
    (
        "fetch unknown field",
        "/v1/fetch",
        {"url": "https://a.example.com/", "x": 1},
        "invalid_request",
        "https://a.example.com/",
    ),
    (
        "fetch unknown id",
        "/v1/fetch",
        {"url": "id:0123456789abcdef"},
        "unknown_id",
        "id:0123456789abcdef",
    ),
    (
        "search max_results",
        "/v1/search",
        {"query": "q", "max_results": 50},
        "invalid_request",
        None,
    ),
    (
        "search unknown provider",
        "/v1/search",
        {"query": "q", "provider": "nope"},
        "invalid_request",
        None,
    ),
    (
        "x_search both handle lists",
        "/v1/x_search",
        {"query": "q", "allowed_x_handles": ["a"], "excluded_x_handles": ["b"]},
        "invalid_request",
        None,
    ),
    (
        "research fetch_top_n",
        "/v1/research",
        {"query": "q", "fetch_top_n": 9},
        "invalid_request",
        None,
    ),
    (
        "research unknown provider",
        "/v1/research",
        {"query": "q", "provider": "nope"},
        "invalid_request",
        None,
    ),
]
ACTIONS = {
    "/v1/fetch": "WebFetch",
    "/v1/search": "WebSearch",
    "/v1/x_search": "XSearch",
    "/v1/research": "Research",
}


@pytest.mark.parametrize(
    ("path", "body", "reason", "url"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
async def test_refused_call_has_one_denial_record(
    client, services, path, body, reason, url
) -> None:
    before = len(audit_records(services))
    response = await client.post(path, json=body)
    answer = await response.json()
    assert response.status == 400 and answer["error"]["code"] == "invalid_request"
    new = audit_records(services)[before:]
    assert len(new) == 1, new
    (record,) = new
    assert record["event"]["action"] == ACTIONS[path]
    assert (record["event"]["outcome"], record["event"]["type"]) == ("failure", ["denied"])
    assert (record["policy"]["decision"], record["policy"]["reason"]) == ("deny", reason)
    assert record["policy"]["name"] == "loopback-test"
    assert record["error"]["code"] == "invalid_request"
    assert record["trace"]["id"] == response.headers["X-Request-Id"]
    assert record.get("url", {}).get("original") == url
    if "query" in body:
        assert record["search"]["query"] == "q"


@pytest.mark.parametrize(
    "raw", [b"{not json", b"[1, 2]", b""], ids=["malformed", "a list", "empty"]
)
async def test_body_that_is_not_a_json_object_is_recorded(client, services, raw) -> None:
    before = len(audit_records(services))
    response = await client.post("/v1/fetch", data=raw)
    assert response.status == 400
    (record,) = audit_records(services)[before:]
    assert (record["event"]["action"], record["policy"]["decision"]) == ("WebFetch", "deny")
    assert record["policy"]["reason"] == "invalid_request"


# Refusals the tools already record must not get a second record.
RECORDED_BY_THE_TOOL = [
    ("bad scheme", {"url": "ftp://a.example.com/"}, "scheme_not_allowed"),
    ("not a url", {"url": "http://exa mple.com/"}, "invalid_url"),
    ("denied host", {"url": "https://blocked.example.com/"}, "domain_denied"),
]


@pytest.mark.parametrize(
    ("body", "reason"),
    [r[1:] for r in RECORDED_BY_THE_TOOL],
    ids=[r[0] for r in RECORDED_BY_THE_TOOL],
)
async def test_refusals_a_tool_records_are_recorded_once(client, services, body, reason) -> None:
    before = len(audit_records(services))
    response = await client.post("/v1/fetch", json=body)
    assert response.status in (400, 403)
    (record,) = audit_records(services)[before:]
    assert record["policy"]["reason"] == reason


async def test_mcp_bad_argument_is_recorded(client, services) -> None:
    before = len(audit_records(services))
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "WebFetch", "arguments": {"url": "id:feedface"}},
    }
    response = await client.post("/mcp", json=message)
    result = (await response.json())["result"]
    assert result["isError"] is True
    (record,) = audit_records(services)[before:]
    assert (record["event"]["action"], record["policy"]["reason"]) == ("WebFetch", "unknown_id")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/fetch", {"url": 5}),
        ("/v1/fetch", {"url": "id:0123456789abcdef"}),
        ("/v1/search", {"query": "q", "provider": "nope"}),
    ],
    ids=["schema", "unknown id", "unknown provider"],
)
async def test_refusal_fails_closed_when_the_log_cannot_be_written(
    client, services, path, body
) -> None:
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, services.audit._fd)  # the disk is now "full" under the open log
        response = await client.post(path, json=body)
    finally:
        os.close(full)
    answer = await response.json()
    assert response.status == 503 and answer["error"]["code"] == "unavailable"


SLOW = {"Authorization": "Bearer tok-slow"}


async def test_rate_limited_call_has_one_record(limited) -> None:
    client, services = limited
    first = await client.post("/v1/fetch", json={"url": 5}, headers=SLOW)
    assert first.status == 400
    before = len(audit_records(services))
    url = "https://a.example.com/"
    response = await client.post("/v1/fetch", json={"url": url}, headers=SLOW)
    assert response.status == 429
    (record,) = audit_records(services)[before:]
    assert record["event"]["action"] == "WebFetch"
    assert record["event"]["outcome"] == "failure"
    assert record["error"]["code"] == "rate_limited"
    assert record["client"]["id"] == "slow-agent"
    assert record["trace"]["id"] == response.headers["X-Request-Id"]


async def test_rate_limited_explain_is_not_a_tool_call(limited) -> None:
    client, services = limited
    await client.post("/v1/policy/explain", json={"url": "http://a.example.com/"}, headers=SLOW)
    before = len(audit_records(services))
    response = await client.post(
        "/v1/policy/explain", json={"url": "http://a.example.com/"}, headers=SLOW
    )
    assert response.status == 429
    assert audit_records(services)[before:] == []


async def test_body_over_the_limit_is_recorded(limited) -> None:
    client, services = limited
    before = len(audit_records(services))
    response = await client.post(
        "/v1/search", json={"query": "q" * LIMITED_BODY_BYTES}, headers=SLOW
    )
    answer = await response.json()
    assert response.status == 413 and answer["error"]["code"] == "request_too_large"
    assert f"server.max_body_bytes ({LIMITED_BODY_BYTES})" in answer["error"]["message"]
    (record,) = audit_records(services)[before:]
    assert record["event"]["action"] == "WebSearch"
    assert record["error"]["code"] == "request_too_large"


async def test_call_refused_while_draining_is_recorded(client, services) -> None:
    services.draining = True
    before = len(audit_records(services))
    response = await client.post("/v1/fetch", json={"url": "https://a.example.com/"})
    assert response.status == 503
    (record,) = audit_records(services)[before:]
    assert (record["event"]["action"], record["error"]["code"]) == ("WebFetch", "unavailable")
