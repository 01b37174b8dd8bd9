"""GET /v1/keys: the active signing key and retired keys, public even when tokens are required."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import replace

from gateway.config import ClientConfig
from gateway.provenance.dsse import generate_keypair, load_public_key, raw_public_key, utc_iso
from gateway.provenance.envelope import verify_response
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.server.keys_api import key_list
from gateway.tools.context import CallContext
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
        assert keys[0]["not_before"] == utc_iso(os.stat(active_key).st_mtime)
        assert keys[0]["not_after"] is None
        assert keys[1]["not_after"] == services.started_at  # never used by this process
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


# 2026-01-01T00:00:00Z and 2026-03-01T12:00:00.250Z: long before the process started.
WRITTEN_OLD, WRITTEN_NEW = 1767225600.0, 1772366400.25


async def test_validity_is_when_each_key_came_into_use(
    tmp_path, upstream, write_policy, make_config
) -> None:
    """A restart must not move not_before past signatures made before it, and a key retired
    at reload stays valid until that reload, not only until the process started."""
    old_key, old_pub, old_id = generate_keypair(tmp_path / "old")
    new_key, _, new_id = generate_keypair(tmp_path / "new")
    os.utime(old_key, (WRITTEN_OLD, WRITTEN_OLD))
    os.utime(new_key, (WRITTEN_NEW, WRITTEN_NEW))
    config = make_config(write_policy(loopback_policy(upstream.port)), signing_key=str(old_key))
    services = Services(config)
    services.open()
    try:
        assert [(k["keyid"], k["not_before"], k["not_after"]) for k in key_list(services)] == [
            (old_id, "2026-01-01T00:00:00.000Z", None)
        ]
        ctx = CallContext(policy=services.state.default_policy)
        signed = await services.webfetch.call(
            ctx, {"url": f"http://site.example.com:{upstream.port}/text"}
        )
        assert services.reload(replace(config, signing_key=str(new_key)))
        keys = {k["keyid"]: k for k in key_list(services)}
        assert (keys[new_id]["status"], keys[new_id]["not_before"]) == (
            "active",
            "2026-03-01T12:00:00.250Z",
        )
        assert keys[old_id]["status"] == "retired"
        # The response signed with the old key before the rotation lies inside its window.
        window = (keys[old_id]["not_before"], keys[old_id]["not_after"])
        assert window[0] is None and services.started_at <= window[1]
        assert signed["envelope"]["fetched_at"] <= window[1]
        verify_response(signed, [load_public_key(old_pub)])
    finally:
        await services.close()
