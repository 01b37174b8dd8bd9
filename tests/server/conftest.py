"""A gateway app on loopback, with its services and its audit file, per test."""

from __future__ import annotations

import pytest

from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy


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


def audit_records(services) -> list[dict]:
    import orjson

    with open(services.audit.path, "rb") as handle:
        return [orjson.loads(line) for line in handle if line.strip()]
