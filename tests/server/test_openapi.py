"""/openapi.json: generated from the registry, and a bounded schemathesis run against it.

The run finds no 500, no status the document does not list, and no body that breaks its
schema. The gateway runs in a thread on a real loopback port; every provider points at a
closed loopback port, so upstream calls fail fast with the documented 502/504.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.config import (
    AuditConfig,
    GatewayConfig,
    ProviderConfig,
    ResolverConfig,
    SearchConfig,
    XSearchConfig,
)
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.tools.responses import TOOL_RESPONSES
from tests.conftest import STATIC_HOSTS, loopback_policy


@schemathesis.check
def no_internal_error(ctx, response, case) -> bool | None:
    """A 500 is a bug; the documented 502/503/504 are what an unreachable provider gives."""
    if response.status_code == 500:
        raise AssertionError(f"500 from {case.method} {case.path}: {response.text[:300]}")
    return None


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def gateway_config(tmp_path_factory) -> GatewayConfig:
    """Every tool enabled; every provider on a closed loopback port."""
    root: Path = tmp_path_factory.mktemp("openapi")
    dead = f"http://127.0.0.1:{closed_port()}"
    policy = root / "policy.yaml"
    policy.write_text(loopback_policy(80, "tools:\n  XSearch: {enabled: true}\n"))
    return GatewayConfig(
        policy=str(policy),
        instance_id="openapi-test",
        audit=AuditConfig(path=str(root / "audit-{instance}.jsonl")),
        resolver=ResolverConfig(hosts=STATIC_HOSTS),
        search=SearchConfig(
            providers=(
                ProviderConfig(id="local", kind="searxng", base_url=dead, allow_private=True),
            ),
            timeout=2,
            deadline=3,
        ),
        x_search=XSearchConfig(
            base_url=dead, allow_private=True, timeout=2, api_key_env="GATEWAY_TEST_UNSET_XAI_KEY"
        ),
    )


@pytest.fixture(scope="module")
def live_gateway(gateway_config) -> Iterator[str]:
    """A gateway on a real port, its loop in a thread, so schemathesis can call it."""
    config = gateway_config
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict = {}

    async def start() -> None:
        services = Services(config)
        services.open()
        runner = web.AppRunner(make_app(services))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state.update(services=services, runner=runner, port=runner.addresses[0][1])

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    yield f"http://127.0.0.1:{state['port']}"

    async def stop() -> None:
        await state["runner"].cleanup()
        await state["services"].close()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@pytest.fixture
def api_schema(live_gateway):
    return schemathesis.openapi.from_url(f"{live_gateway}/openapi.json")


async def app_routes(config: GatewayConfig) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, read from its router. HEAD is left
    out: aiohttp adds it to every GET route, and it answers as the GET does, bodiless."""
    services = Services(replace(config, instance_id="openapi-routes"))
    services.open()
    try:
        app = make_app(services)
        found = set()
        for route in app.router.routes():
            path = route.resource.canonical if route.resource is not None else None
            assert path is not None, f"a route without a resource: {route!r}"
            if route.method != "HEAD":
                found.add((route.method, path))
        return found
    finally:
        await services.close()


def documented(document: dict) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }


async def test_document_covers_every_route_of_the_app(api_schema, gateway_config) -> None:
    """Every route the router serves is documented with a response schema, and nothing the
    router does not serve is: a new route without a schema fails here."""
    document = api_schema.raw_schema
    routes = await app_routes(gateway_config)
    assert documented(document) == routes
    assert set(OPERATIONS) == routes  # so the conformance run below calls every one
    for method, path in routes:
        operation = document["paths"][path][method.lower()]
        bodies = [
            media["schema"]
            for response in operation["responses"].values()
            for media in response.get("content", {}).values()
        ]
        assert bodies, f"{method} {path} documents no response body"
        ok = operation["responses"].get("200", {}).get("content", {})
        schema = ok.get("application/json", {}).get("schema")
        if schema is not None and path != "/openapi.json":
            # A bare {"type": "object"} is what a route gets when nobody wrote its schema.
            assert schema != {"type": "object"}, f"{method} {path}: 200 has no real schema"


def test_document_basics(api_schema) -> None:
    document = api_schema.raw_schema
    assert document["openapi"] == "3.1.0"
    from gateway.tools.schema import FETCH_REQUEST, X_SEARCH_REQUEST

    fetch = document["paths"]["/v1/fetch"]["post"]
    assert fetch["requestBody"]["content"]["application/json"]["schema"] == FETCH_REQUEST
    assert (
        fetch["responses"]["200"]["content"]["application/json"]["schema"]
        == (TOOL_RESPONSES["WebFetch"])
    )
    xsearch = document["paths"]["/v1/x_search"]["post"]
    assert xsearch["requestBody"]["content"]["application/json"]["schema"] == X_SEARCH_REQUEST
    for status in ("400", "401", "403", "413", "429", "502", "503", "504"):
        assert status in fetch["responses"]
    for status in ("404", "405"):
        assert f"E{status}" in document["components"]["responses"]
    error = document["components"]["schemas"]["Error"]["properties"]["error"]
    assert error["required"] == ["code", "message", "reason", "rule", "request_id"]


OPERATIONS = (
    [
        ("POST", path)
        for path in (
            "/v1/fetch",
            "/v1/search",
            "/v1/research",
            "/v1/x_search",
            "/v1/policy/explain",
            "/mcp",
        )
    ]
    + [
        ("GET", path)
        for path in (
            "/v1/status",
            "/v1/keys",
            "/healthz",
            "/readyz",
            "/metrics",
            "/openapi.json",
            "/mcp",
        )
    ]
    + [("DELETE", "/mcp")]
)


# Negative data (bodies that break the schema) only where there is a body to break.
CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or method == "POST"
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_api_conforms_to_its_document(api_schema, live_gateway, method, path, mode) -> None:
    operation = api_schema[path][method]

    @settings(
        max_examples=6,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def conforms(case) -> None:
        case.call_and_validate(
            base_url=live_gateway,
            checks=[
                no_internal_error,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
            ],
            timeout=15,
        )

    conforms()


def test_search_response_schema_requires_every_field_of_the_contract() -> None:
    """Every WebSearch answer has these fields; the schema must require them
    so the conformance run above fails when one goes missing."""
    schema = TOOL_RESPONSES["WebSearch"]
    assert set(schema["required"]) == {
        "query", "provider", "providers_tried", "warnings", "cached", "freshness_applied",
        "query_rewritten", "query_year", "freshness_auto_inferred", "deduped", "filtered",
        "results", "envelope", "answer", "query_sent", "time_range_applied", "total",
        "provider_switched",
    }  # fmt: skip
    result = schema["properties"]["results"]["items"]
    assert set(result["required"]) == {
        "id", "title", "url", "snippet", "domain", "published_at", "score"
    }  # fmt: skip
