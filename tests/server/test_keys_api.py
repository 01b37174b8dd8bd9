"""GET /v1/keys: the active signing key and retired keys, public even when tokens are required."""

from __future__ import annotations

import base64
import hashlib

from gateway.config import ClientConfig
from gateway.provenance.dsse import generate_keypair, load_public_key, raw_public_key
from gateway.provenance.envelope import verify_response
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy

TOKEN = "keys-test-token"


async def test_no_signing_key_publishes_no_keys(client) -> None:
    response = await client.get("/v1/keys")
    assert response.status == 200
    assert await response.json() == {"keys": []}


async def test_active_and_retired_keys_verify_responses(
    tmp_path, upstream, write_policy, make_config, aiohttp_client
) -> None:
    active_key, active_pub, active_id = generate_keypair(tmp_path / "new")
    _, retired_pub, retired_id = generate_keypair(tmp_path / "old")
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        signing_key=str(active_key),
        retired_keys=(str(retired_pub),),
        clients=(ClientConfig(id="a", token_sha256=hashlib.sha256(TOKEN.encode()).hexdigest()),),
    )
    services = Services(config)
    services.open()
    try:
        client = await aiohttp_client(make_app(services))
        response = await client.get("/v1/keys")  # public: no token
        assert response.status == 200
        keys = (await response.json())["keys"]
        assert [(k["keyid"], k["status"]) for k in keys] == [
            (active_id, "active"),
            (retired_id, "retired"),
        ]
        for entry, pub in zip(keys, (active_pub, retired_pub), strict=True):
            raw = raw_public_key(load_public_key(pub))
            assert base64.b64decode(entry["public_key"]) == raw
            assert entry["keyid"] == hashlib.sha256(raw).hexdigest()
            assert entry["alg"] == "ed25519"
        assert keys[0]["not_before"] == services.started_at and keys[0]["not_after"] is None
        assert keys[1]["not_after"] == services.started_at
        fetched = await client.post(
            "/v1/fetch",
            json={"url": f"http://site.example.com:{upstream.port}/text"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        body = await fetched.json()
        verified = verify_response(body, [load_public_key(active_pub)])
        assert verified.keyids == (keys[0]["keyid"],)
    finally:
        await services.close()
