"""WebFetch's arguments from other agents' own WebFetch tools (Claude Code sends `prompt`):
accepted, ignored and said so, over MCP and the HTTP API alike; and a truncated answer names
the `start_index` that reads on."""

from __future__ import annotations

import orjson
import pytest

from gateway.provenance.markers import unwrap
from gateway.server.app import make_app
from gateway.tools import responses
from gateway.tools.schema import IGNORED_FETCH_ARGUMENTS
from tests.conformance import assert_conforms
from tests.server.conftest import audit_records
from tests.server.test_mcp import Session

PROMPT = "Summarise the page in three bullet points (a secret-looking word: sk-not-a-key)"
TEXT = "0123456789" * 5  # 50 characters of text/plain


@pytest.fixture
async def mcp_endpoint(services, aiohttp_server) -> str:
    server = await aiohttp_server(make_app(services), host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}/mcp"


def text_url(port: int) -> str:
    return f"http://site.example.com:{port}/text?body={TEXT}"


async def test_mcp_webfetch_accepts_a_prompt_ignores_it_and_says_so(
    mcp_endpoint, upstream, services
) -> None:
    async with Session(mcp_endpoint) as session:
        result = await session.call_tool(
            "WebFetch", {"url": text_url(upstream.port), "prompt": PROMPT, "max_chars": 20}
        )
    assert result.is_error is False, result.content
    body = result.structured_content
    assert body["notes"] == [IGNORED_FETCH_ARGUMENTS["prompt"]]
    assert body["envelope"]["truncated"] is True and body["next_start_index"] == 20
    [item] = result.content
    assert f"note: {IGNORED_FETCH_ARGUMENTS['prompt']}" in item.text
    assert "truncated=yes next_start_index=20" in item.text
    assert unwrap(body["content"], body["envelope"]["marker"]) == TEXT[:20]
    # The prompt is never sent anywhere, nor written down.
    [record] = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
    assert record["event"]["outcome"] == "success"
    assert b"Summarise" not in orjson.dumps(audit_records(services))


async def test_reading_on_from_next_start_index_gets_the_rest(client, upstream) -> None:
    pieces, start = [], 0
    while True:
        response = await client.post(
            "/v1/fetch",
            json={"url": text_url(upstream.port), "max_chars": 20, "start_index": start},
        )
        body = await response.json()
        assert response.status == 200 and "notes" not in body
        assert_conforms(responses.FETCH_RESPONSE, body)
        pieces.append(unwrap(body["content"], body["envelope"]["marker"]))
        if not body["envelope"]["truncated"]:
            assert "next_start_index" not in body
            break
        assert body["next_start_index"] == start + body["envelope"]["chars"]
        start = body["next_start_index"]
    assert "".join(pieces) == TEXT and len(pieces) == 3


async def test_http_fetch_with_a_prompt_conforms_and_a_wrong_prompt_is_refused(
    client, upstream
) -> None:
    ok = await client.post("/v1/fetch", json={"url": text_url(upstream.port), "prompt": PROMPT})
    body = await ok.json()
    assert ok.status == 200 and body["notes"] == [IGNORED_FETCH_ARGUMENTS["prompt"]]
    assert_conforms(responses.FETCH_RESPONSE, body)
    assert "next_start_index" not in body  # 50 characters fit
    wrong = await client.post("/v1/fetch", json={"url": text_url(upstream.port), "prompt": 7})
    assert wrong.status == 400
    error = (await wrong.json())["error"]
    assert (error["code"], error["message"]) == ("invalid_request", "prompt: must be a string")
    unknown = await client.post("/v1/fetch", json={"url": text_url(upstream.port), "format": "x"})
    assert unknown.status == 400  # only the documented extras are accepted
    assert "unknown field" in (await unknown.json())["error"]["message"]
