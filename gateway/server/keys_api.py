"""`GET /v1/keys`: the public keys that verify this gateway's DSSE signatures.

The active key is the signing key's public half, valid from when it came into use (its key
file's modification time, the same across restarts). A key retired by a rotation at reload
is valid until that rotation; keys named in `retired_keys` until this process started (it
never signs with them). Public: it needs no token. Translates only.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.provenance.dsse import keyid_of, public_key_entry
from gateway.server.handles import SERVICES, json_response


def key_list(services: Any) -> list[dict[str, Any]]:
    keys = []
    if services.signer is not None:
        since = services.signer.in_use_since or services.started_at
        keys.append(public_key_entry(services.signer.public_key, status="active", not_before=since))
    active = {entry["keyid"] for entry in keys}
    for public_key in services.retired_keys:
        until = services.retired_at.get(keyid_of(public_key), services.started_at)
        entry = public_key_entry(public_key, status="retired", not_after=until)
        if entry["keyid"] not in active:
            keys.append(entry)
    return keys


async def keys(request: web.Request) -> web.Response:
    return json_response({"keys": key_list(request.app[SERVICES])})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/keys", keys)
