"""Basic credentials on the proxy port: which configured client a `Proxy-Authorization`
header names, and which client id a failed one claimed (for its audit record). Pure: no
sockets, no asyncio, no audit writes.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Collection

from gateway.errors import UnauthorizedError
from gateway.runtime import ClientIdentity, PolicyState

REALM = 'Basic realm="gateway"'


def authenticate_basic(state: PolicyState, header: str | None) -> ClientIdentity | None:
    """The client a `Proxy-Authorization: Basic` credential names (user = client id, password
    = token); None when no clients are configured. The token is compared in constant time
    against every configured hash, then must belong to the named client."""
    if not state.auth_required:
        return None
    if header is None:
        raise UnauthorizedError(
            "proxy credentials required: send Proxy-Authorization: Basic with user = client id"
            " and password = token (curl -U id:token)"
        )
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise UnauthorizedError("the proxy accepts only Basic credentials (client id:token)")
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise UnauthorizedError("the Basic credential is not valid base64 of id:token") from None
    user, _, token = decoded.partition(":")
    client = state.client_for_token(token)
    if not hmac.compare_digest(client.id.encode("utf-8"), user.encode("utf-8", "replace")):
        raise UnauthorizedError("unknown client id or token")
    if client.is_reviewer:
        raise UnauthorizedError("a reviewer's token opens the review page only, not the proxy")
    return client


def claimed_user(header: str | None, known_ids: Collection[str]) -> str | None:
    """The client id a failed Basic credential claimed, for its audit record: only when it is
    a configured client id, since a user name field may carry a secret (`curl -U token:`)."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[0]
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user if user in known_ids else None
