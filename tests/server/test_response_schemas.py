"""Real responses of every endpoint against the schemas /openapi.json documents for them.

The schemas are closed (tools/responses.py): each test below takes a body the gateway really
sent and checks it conforms, and the last ones check that a missing or an extra field, the
drift the schemas exist to catch, is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gateway.provenance.dsse import generate_keypair
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.tools import responses
from tests.conformance import assert_conforms, schema_errors
from tests.conftest import loopback_policy
from tests.server.conftest import policies_for


async def test_fetch_and_its_errors(client, upstream) -> None:
    page = f"http://site.example.com:{upstream.port}/page"
    ok = await client.post("/v1/fetch", json={"url": page, "max_chars": 10})
    assert ok.status == 200
    assert_conforms(responses.FETCH_RESPONSE, await ok.json())
    for path, body, status in [
        ("/v1/fetch", {"url": "https://denied.invalid/"}, 403),
        ("/v1/fetch", {"url": page, "surprise": 1}, 400),
        ("/v1/nothing", {}, 404),
    ]:
        refused = await client.post(path, json=body)
        assert refused.status == status
        assert_conforms(responses.ERROR, await refused.json())


async def test_fetch_by_id_and_signed(search_gateways, upstream, tmp_path) -> None:
    private, _, _ = generate_keypair(tmp_path / "keys")
    gateway = await search_gateways(
        policies=policies_for(upstream.port, agent={}), signing_key=str(private)
    )
    status, search = await gateway.search("agent", query="q")
    assert status == 200 and "dsse" in search
    assert_conforms(responses.SEARCH_RESPONSE, search)
    status, fetched = await gateway.post(
        "/v1/fetch", "agent", url="id:" + search["results"][0]["id"]
    )
    assert status == 200, fetched
    assert "requested_id" in fetched["envelope"] and "dsse" in fetched
    assert_conforms(responses.FETCH_RESPONSE, fetched)


@pytest.mark.parametrize(
    ("body", "with_addresses"),
    [
        pytest.param({"url": "http://site.example.com/"}, False, id="decision"),
        pytest.param({"url": "http://site.example.com/", "resolve": True}, True, id="resolved"),
        pytest.param({"url": "https://denied.invalid/"}, False, id="denied"),
    ],
)
async def test_explain(client, body: dict[str, Any], with_addresses: bool) -> None:
    response = await client.post("/v1/policy/explain", json=body)
    assert response.status == 200
    answer = await response.json()
    assert ("addresses" in answer) is with_addresses
    assert_conforms(responses.EXPLAIN_RESPONSE, answer)


@pytest.mark.parametrize(
    ("path", "schema"),
    [
        pytest.param("/v1/status", responses.STATUS_RESPONSE, id="status"),
        pytest.param("/v1/keys", responses.KEYS_RESPONSE, id="keys"),
        pytest.param("/healthz", responses.HEALTH_RESPONSE, id="healthz"),
        pytest.param("/readyz", responses.READY_RESPONSE, id="readyz"),
    ],
)
async def test_gateway_endpoints(signed_client, path: str, schema: dict[str, Any]) -> None:
    response = await signed_client.get(path)
    assert response.status == 200
    assert_conforms(schema, await response.json())


@pytest.fixture
async def signed_client(upstream, write_policy, make_config, aiohttp_client, tmp_path):
    """A gateway with a signing key and a retired key, so /v1/keys lists both kinds."""
    private, _, _ = generate_keypair(tmp_path / "active")
    _, retired, _ = generate_keypair(tmp_path / "retired")
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        signing_key=str(private),
        retired_keys=(str(retired),),
    )
    services = Services(config)
    services.open()
    client = await aiohttp_client(make_app(services))
    keys = await (await client.get("/v1/keys")).json()
    assert {k["status"] for k in keys["keys"]} == {"active", "retired"}
    yield client
    await services.close()


def _drop(path: tuple[str | int, ...]) -> Callable[[Any], None]:
    def change(body: Any) -> None:
        for step in path[:-1]:
            body = body[step]
        del body[path[-1]]

    return change


def _add(path: tuple[str | int, ...]) -> Callable[[Any], None]:
    def change(body: Any) -> None:
        for step in path:
            body = body[step]
        body["surprise"] = 1

    return change


@pytest.mark.parametrize(
    ("tool", "change"),
    [
        pytest.param("search", _drop(("deduped",)), id="search-missing-field"),
        pytest.param("search", _add(()), id="search-extra-field"),
        pytest.param("search", _add(("results", 0)), id="search-result-extra-field"),
        pytest.param("search", _drop(("envelope", "cached")), id="search-envelope-missing"),
        pytest.param("search", _drop(("filtered", "domains")), id="search-filtered-missing"),
        pytest.param("research", _add(("pages", 0)), id="research-page-extra-field"),
        pytest.param("research", _drop(("pages", 2, "error", "reason")),
                     id="research-error-without-reason"),
        pytest.param("research", _add(("pages", 2, "error")), id="research-error-extra-field"),
        pytest.param("research", _drop(("pages", 0, "rank")), id="research-page-without-rank"),
    ],
)  # fmt: skip
async def test_schemas_refuse_drift(search_gateways, upstream, tool: str, change) -> None:  # type: ignore[no-untyped-def]
    gateway = await search_gateways(policies=policies_for(upstream.port, agent={}))
    if tool == "search":
        schema = responses.SEARCH_RESPONSE
        status, body = await gateway.search("agent", query="drift")
    else:
        schema = responses.RESEARCH_RESPONSE
        status, body = await gateway.post("/v1/research", "agent", query="drift", fetch_top_n=3)
        assert "error" in body["pages"][2]  # the third page is refused at fetch time
    assert status == 200
    assert_conforms(schema, body)
    changed = copy.deepcopy(body)
    change(changed)
    assert schema_errors(schema, changed)


XSEARCH_BODY = {
    "envelope": {
        "v": 1, "id": "e", "client": None, "fetched_at": "2026-11-30T06:00:00.000Z",
        "content_sha256": "0" * 64,
        "policy": {"name": "p", "sha256": "s", "mode": "enforce", "rule": "r"},
        "trust": "untrusted", "marker": "a" * 32,
        "sanitized": {"marker_lookalikes": 0, "invisible_chars": 0},
        "tool": "XSearch", "provider": "xai", "backend": "x_search", "model": "m", "chars": 0,
        "citations": 0, "citations_sha256": "0" * 64, "filtered": {"policy": 0},
    },
    "text": "t", "citations": [], "provider": "xai", "backend": "x_search", "model": "m",
    "diagnostics": {
        "request_id": None, "latency_ms": 1, "status": None, "server_side_tool_calls": {},
        "server_side_tools_used": 0, "offset_unit": None, "unsourced": True,
    },
}  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_drop(("diagnostics", "unsourced")), id="diagnostics-missing"),
        pytest.param(_add(("diagnostics",)), id="diagnostics-extra"),
        pytest.param(_drop(("envelope", "citations_sha256")), id="envelope-missing"),
        pytest.param(_add(("envelope",)), id="envelope-extra"),
    ],
)
def test_xsearch_schema_refuses_drift(change) -> None:  # type: ignore[no-untyped-def]
    # The body's shape is checked against real XSearch answers in tests/tools/test_xsearch.py.
    assert_conforms(responses.X_SEARCH_RESPONSE, XSEARCH_BODY)
    changed = copy.deepcopy(XSEARCH_BODY)
    change(changed)
    assert schema_errors(responses.X_SEARCH_RESPONSE, changed)


def test_every_tool_has_a_closed_schema() -> None:
    def open_objects(schema: Any, where: str) -> list[str]:
        found = []
        if isinstance(schema, dict):
            closed = schema.get("additionalProperties") is False
            if schema.get("type") == "object" and "properties" in schema and not closed:
                found.append(where)
            for key, value in schema.items():
                found += open_objects(value, f"{where}/{key}")
        elif isinstance(schema, list):
            for index, value in enumerate(schema):
                found += open_objects(value, f"{where}/{index}")
        return found

    for name, schema in responses.TOOL_RESPONSES.items():
        assert open_objects(schema, name) == []
