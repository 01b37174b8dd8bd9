"""Pinning never weakens TLS: the connection goes to the checked address, and the certificate
is still verified against the requested host name (SNI and hostname check)."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamUnreachableError
from gateway.fetch.client import Fetcher
from gateway.fetch.resolver import parse_static_hosts
from gateway.policy.engine import decide_url
from tests.policy.conftest import make_policy
from tests.testca import CertificateAuthority
from tests.upstream import make_upstream

HOSTS = {"site.example.com": ["127.0.0.1"], "impostor.example.com": ["127.0.0.1"]}


@pytest.fixture
def ca(tmp_path):
    return CertificateAuthority(tmp_path)


@pytest.fixture
async def tls_upstream(aiohttp_server, ca):
    return await aiohttp_server(make_upstream(), host="127.0.0.1", ssl=ca.server_context("site.example.com"))


def policy_for(port: int):
    return make_policy(allow=[".example.com"], ports=(port,), net_allow=["127.0.0.0/8"])


async def get(fetcher, port: int, host: str):
    policy = policy_for(port)
    decision, target = decide_url(policy, f"https://{host}:{port}/page")
    assert decision.allowed
    return await fetcher.fetch(policy, target)


async def test_pinned_connection_verifies_the_certificate_against_the_name(ca, tls_upstream) -> None:
    fetcher = Fetcher(static_hosts=parse_static_hosts(HOSTS), ca_file=str(ca.ca_file))
    try:
        result = await get(fetcher, tls_upstream.port, "site.example.com")
        assert result.status == 200 and result.ip == "127.0.0.1"
    finally:
        await fetcher.close()


async def test_a_certificate_for_another_name_is_refused(ca, tls_upstream) -> None:
    # impostor.example.com resolves to the same address, but the server's certificate only
    # names site.example.com: pinning the address must not skip the hostname check.
    fetcher = Fetcher(static_hosts=parse_static_hosts(HOSTS), ca_file=str(ca.ca_file))
    try:
        with pytest.raises(UpstreamUnreachableError, match="TLS"):
            await get(fetcher, tls_upstream.port, "impostor.example.com")
    finally:
        await fetcher.close()


async def test_an_untrusted_ca_is_refused(tls_upstream) -> None:
    fetcher = Fetcher(static_hosts=parse_static_hosts(HOSTS))
    try:
        with pytest.raises(UpstreamUnreachableError, match="TLS"):
            await get(fetcher, tls_upstream.port, "site.example.com")
    finally:
        await fetcher.close()


async def test_pinned_tls_connections_are_kept_and_reused(ca, tls_upstream) -> None:
    fetcher = Fetcher(static_hosts=parse_static_hosts(HOSTS), ca_file=str(ca.ca_file))
    try:
        for _ in range(3):
            result = await get(fetcher, tls_upstream.port, "site.example.com")
            assert result.status == 200 and result.ip == "127.0.0.1"
        pool = fetcher.pool(policy_for(tls_upstream.port))
        assert pool is not None and pool.idle_count() == 1
    finally:
        await fetcher.close()
