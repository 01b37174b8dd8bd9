"""`GET /v1/keys`: the public keys that verify this gateway's DSSE signatures (CONTRACT 5.4).

The active key is the signing key's public half, valid from this process's start; retired
keys (`retired_keys`) still verify older signatures and are published as valid until then.
Public: it needs no token. Translates only.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.provenance.dsse import public_key_entry
from gateway.server.app import SERVICES, json_response


def key_list(services: Any) -> list[dict[str, Any]]:
    keys = []
    if services.signer is not None:
        keys.append(
            public_key_entry(
                services.signer.public_key, status="active", not_before=services.started_at
            )
        )
    active = {entry["keyid"] for entry in keys}
    for public_key in services.retired_keys:
        entry = public_key_entry(public_key, status="retired", not_after=services.started_at)
        if entry["keyid"] not in active:
            keys.append(entry)
    return keys


async def keys(request: web.Request) -> web.Response:
    return json_response({"keys": key_list(request.app[SERVICES])})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/keys", keys)
