"""Class: the gateway's own listener through 0.0.0.0. Linux connects a socket dialled to
0.0.0.0:PORT (or [::]:PORT) to this host's listener on PORT, so 0.0.0.0/8 and :: are the
gateway's own addresses for the own-listener check on every bound port, also where a
policy lets 0.0.0.0 through (`networks.allow: [0.0.0.0/0]`, or a name that answers 0.0.0.0
with `block_private: false`)."""

from __future__ import annotations

import pytest

from gateway.config import ResolverConfig
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import STATIC_HOSTS
from tests.server.conftest import audit_records

POLICIES = {
    "networks-allow-everything": """\
        name: open-networks
        default: allow
        ports: [{port}]
        networks: {{allow: ["0.0.0.0/0", "::/0"]}}
        """,
    "no-block-private": """\
        name: no-private-block
        default: deny
        ports: [{port}]
        domains: {{allow: [".example.com"]}}
        networks: {{block_private: false}}
        """,
}
URLS = {
    "networks-allow-everything": [
        "http://0.0.0.0:{port}/review/",
        "http://0.0.0.1:{port}/healthz",
        "http://0:{port}/healthz",
        "http://[::]:{port}/healthz",
        "http://[::ffff:0.0.0.0]:{port}/healthz",
    ],
    "no-block-private": ["http://zero.example.com:{port}/review/"],
}
CASES = [(policy, url) for policy, urls in URLS.items() for url in urls]


@pytest.mark.parametrize(("policy", "url"), CASES, ids=[f"{p}-{u[7:22]}" for p, u in CASES])
async def test_the_gateways_own_port_through_0_0_0_0_is_refused(
    aiohttp_server, aiohttp_client, write_policy, make_config, policy, url
) -> None:
    # The gateway's app listens first (its port is in the policy), the policy comes after.
    hosts = {**STATIC_HOSTS, "zero.example.com": ("0.0.0.0",)}
    services = Services(make_config(None, resolver=ResolverConfig(hosts=hosts)))
    services.open()
    server = await aiohttp_server(make_app(services), host="127.0.0.1")
    try:
        port = server.port
        services.reload(
            make_config(
                write_policy(POLICIES[policy].format(port=port)),
                resolver=ResolverConfig(hosts=hosts),
            )
        )
        await services.listen_on([("127.0.0.1", port)])
        client = await aiohttp_client(server)
        response = await client.post("/v1/fetch", json={"url": url.format(port=port)})
        body = await response.json()
        assert response.status == 403, body
        assert (body["error"]["reason"], body["error"]["rule"]) == (
            "own_address",
            "networks.own_address",
        )
        (record,) = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
        assert record["policy"]["reason"] == "own_address"
    finally:
        await services.close()
