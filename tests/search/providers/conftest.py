"""`ask`: send one provider request to a loopback fake that replays a reply, and parse it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.search.providers.adapter import ProviderAdapter
from gateway.search.query import RawResult, SearchQuery
from tests.search.conftest import FakeUpstream, LoopbackTransport, Reply

Ask = Callable[..., Awaitable[tuple[list[RawResult], FakeUpstream]]]


@pytest.fixture
def ask(upstream: Any, transport: LoopbackTransport) -> Ask:
    async def run(
        adapter: ProviderAdapter,
        reply: Reply,
        query: SearchQuery | None = None,
        api_key: str | None = "test-key-123456",
    ) -> tuple[list[RawResult], FakeUpstream]:
        fake = await upstream()
        fake.queue(reply)
        request = adapter.build_request(query or SearchQuery("test"), fake.base_url, api_key)
        response = await transport.send(request, timeout=5, allow_private=True)
        return adapter.parse(response), fake

    return run
