"""A gateway app on loopback, with its services and its audit file, per test; search gateways
with fake providers (tests/tools/searchgateway.py), closed after the test."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config import ClientConfig, ClientLimits, ServerConfig
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy
from tests.tools.searchgateway import client_policy, start_search_gateway


@pytest.fixture
async def services(upstream, write_policy, make_config):
    config = make_config(write_policy(loopback_policy(upstream.port)))
    svc = Services(config)
    svc.open()
    yield svc
    await svc.close()


@pytest.fixture
async def client(services, aiohttp_client):
    return await aiohttp_client(make_app(services))


LIMITED_BODY_BYTES = 2048


@pytest.fixture
async def limited(upstream, write_policy, make_config, aiohttp_client):
    """(client, services) of a gateway whose one client, `slow-agent` (token `tok-slow`), may
    make one request a minute, with a body limit of LIMITED_BODY_BYTES."""
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        clients=(
            ClientConfig(
                id="slow-agent",
                token_sha256=hashlib.sha256(b"tok-slow").hexdigest(),
                limits=ClientLimits(requests_per_minute=1),
            ),
        ),
        server=ServerConfig(max_body_bytes=LIMITED_BODY_BYTES),
    )
    services = Services(config)
    services.open()
    client = await aiohttp_client(make_app(services))
    yield client, services
    await services.close()


@pytest.fixture
async def search_gateways(
    aiohttp_server, aiohttp_client, make_config, write_policy, monkeypatch, upstream
):
    """`await search_gateways(policies={client id: policy text}, **options)` starts a gateway
    (start_search_gateway's options; `site_port` defaults to the `upstream` fixture's); every
    one started is closed after the test."""
    started = []

    async def run(*, policies, site_port=None, **options):
        gateway = await start_search_gateway(
            aiohttp_server=aiohttp_server,
            aiohttp_client=aiohttp_client,
            make_config=make_config,
            write_policy=write_policy,
            monkeypatch=monkeypatch,
            site_port=site_port if site_port is not None else upstream.port,
            policies=policies,
            **options,
        )
        started.append(gateway)
        return gateway

    yield run
    for gateway in started:
        await gateway.services.close()


def policies_for(port: int, **clients: dict) -> dict[str, str]:
    """Client id -> the policy `client_policy` writes for it (`<id>-policy`, with options)."""
    return {
        name: client_policy(port, f"{name}-policy", **options) for name, options in clients.items()
    }


def audit_records(services) -> list[dict]:
    import orjson

    with open(services.audit.path, "rb") as handle:
        return [orjson.loads(line) for line in handle if line.strip()]
