"""`clients`: who may use the gateway, by the SHA-256 of their bearer token, with their own
policy and limits. Whatever sits in `token_sha256` may be a clear-text token pasted in by
mistake: no message ever repeats it.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from yaml.nodes import Node, ScalarNode

from gateway.config import ClientConfig, ClientLimits
from gateway.configload.values import claim_unique, path_field, read_id
from gateway.yamlstrict.source import STR_TAG
from gateway.yamlstrict.walk import (
    Field,
    Walker,
    choice_field,
    integer_field,
    section_field,
)

# SHA-256 of the empty string: a client whose token is "" must never be configured.
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
HASH_HOW_TO = (
    'store its SHA-256 instead (printf %s "$TOKEN" | sha256sum), or make a new token and its '
    "line with: gateway token new CLIENT"
)

# A reviewer's token opens the audit review page and nothing else (no tool, no proxy).
CLIENT_ROLES = ("agent", "reviewer")

_HEX64_RE = re.compile(r"[0-9a-fA-F]{64}\Z")
TOKEN_PREFIX = "gwt_"  # lets secret scanners recognise a leaked token


def new_token() -> tuple[str, str]:
    """A fresh bearer token (256 random bits) and its SHA-256, the only form stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()


def client_entry(
    client_id: str, token_sha256: str, policy: str | None = None, role: str | None = None
) -> str:
    """The client's line for the `clients` list of a configuration file (`role` written
    only when it is not the default)."""
    extra = f", policy: {policy}" if policy else ""
    if role is not None and role != CLIENT_ROLES[0]:
        extra += f", role: {role}"
    return f'- {{id: {client_id}, token_sha256: "{token_sha256}"{extra}}}'


def _read_token_hash(w: Walker, node: Node, path: str) -> str | None:
    if not (isinstance(node, ScalarNode) and node.tag == STR_TAG):
        if not w.is_reported(node):
            w.error(
                node,
                "wrong_type",
                f"{path} must be 64 hex digits (the SHA-256 of the token) in quotes; {HASH_HOW_TO}",
            )
        return None
    text = str(node.value).strip()
    if text.lower().startswith("sha256:") and _HEX64_RE.match(text[7:]):
        w.error(node, "bad_token_hash", f"{path}: remove the 'sha256:' prefix")
        return None
    if not _HEX64_RE.match(text):
        w.error(
            node,
            "bad_token_hash",
            f"{path} must be exactly 64 hex digits; this looks like a clear-text token "
            f"({len(text)} characters), which is never stored: {HASH_HOW_TO}",
        )
        return None
    digest = text.lower()
    if digest == EMPTY_SHA256:
        w.error(node, "bad_token_hash", f"{path} is the SHA-256 of an empty token")
        return None
    return digest


_LIMIT_FIELDS = {
    "requests_per_minute": integer_field(None, minimum=1, maximum=1_000_000_000),
    "concurrent": integer_field(None, minimum=1, maximum=1_000_000),
}

_CLIENT_FIELDS = {
    "id": Field(read_id, None, required=True),
    "token_sha256": Field(_read_token_hash, None, required=True),
    "policy": path_field(),
    "limits": section_field(_LIMIT_FIELDS),
    "role": choice_field(CLIENT_ROLES[0], CLIENT_ROLES),
}


def read_clients(w: Walker, node: Node, path: str) -> tuple[ClientConfig, ...] | None:
    entries = w.entries(node, path, _CLIENT_FIELDS, expected="a mapping with id and token_sha256")
    if entries is None:
        return None
    clients: list[ClientConfig] = []
    ids: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        claim_unique(w, entry, "id", ids, where)
        claim_unique(
            w,
            entry,
            "token_sha256",
            tokens,
            where,
            code="duplicate_token",
            secret=True,
            advice="; every client needs its own token",
        )
        if entry.invalid or entry["limits"].invalid:
            continue
        limits = entry["limits"]
        clients.append(
            ClientConfig(
                id=entry["id"],
                token_sha256=entry["token_sha256"],
                policy=entry["policy"],
                limits=ClientLimits(limits["requests_per_minute"], limits["concurrent"]),
                role=entry["role"],
            )
        )
    return tuple(clients) if len(clients) == len(entries) else None
