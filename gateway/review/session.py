"""Reviewer sessions without server-side state: a cookie value naming the client and its
expiry, with an HMAC keyed by that client's token hash. Every worker can check it, and a
reload that removes the client, changes its token or takes away its reviewer role ends its
sessions. Whoever can read the configuration's token hashes could mint one; the same people
can read the audit folder itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable

SESSION_SECONDS = 8 * 3600
_CONTEXT = b"gateway review session v1\x00"


def _mac(key: bytes, client_id: str, expires: int) -> str:
    message = _CONTEXT + client_id.encode() + b"\x00" + str(expires).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def issue_session(client_id: str, token_sha256: bytes, *, now: float) -> str:
    expires = int(now) + SESSION_SECONDS
    name = base64.urlsafe_b64encode(client_id.encode()).decode().rstrip("=")
    return f"{name}.{expires}.{_mac(token_sha256, client_id, expires)}"


def check_session(value: str, reviewers: Iterable[tuple[str, bytes]], *, now: float) -> str | None:
    """The client id the session belongs to, if it is unexpired and still signed by one of
    `reviewers` (id, token hash); None otherwise."""
    name, _, rest = value.partition(".")
    expires_text, _, mac = rest.partition(".")
    if not expires_text.isdigit() or len(mac) != 64:
        return None
    try:
        client_id = base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    expires = int(expires_text)
    if expires <= now or expires > now + SESSION_SECONDS + 60:
        return None
    for reviewer_id, key in reviewers:
        if reviewer_id == client_id and hmac.compare_digest(mac, _mac(key, client_id, expires)):
            return client_id
    return None
