"""The signed provenance envelope of a tool response: its exact bytes, its `dsse`, and checks.

Signs the very bytes the HTTP layer returns (orjson, no options) and verifies that a response's
`envelope` and its wrapped content still match what was signed. Builds no envelope itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway.provenance.dsse import (
    ENVELOPE_PAYLOAD_TYPE,
    DSSEError,
    Signer,
    VerifiedPayload,
    check_dsse,
    sign_many,
)
from gateway.provenance.markers import MarkerError, unwrap

_MAX_REPORTED_PATHS = 5


def envelope_bytes(envelope: Mapping[str, Any]) -> bytes:
    """The exact bytes that are signed and returned: orjson without options."""
    return orjson.dumps(envelope)


def attach_dsse(body: dict[str, Any], signer: Signer | Sequence[Signer] | None) -> dict[str, Any]:
    """Add `body["dsse"]` over `body["envelope"]`'s exact bytes; no signer, no `dsse`.

    Several signers (a key rotation) give one signature each. Returns `body`.
    """
    if signer is None:
        return body
    signers = [signer] if isinstance(signer, Signer) else list(signer)
    if not signers:
        return body
    body["dsse"] = sign_many(signers, envelope_bytes(body["envelope"]), ENVELOPE_PAYLOAD_TYPE)
    return body


def signed_body(document: object) -> Mapping[str, Any]:
    """The tool response inside `document`: an HTTP body, an MCP tool result (its
    `structuredContent`) or a JSON-RPC response carrying one."""
    current = document
    for _ in range(3):
        if not isinstance(current, Mapping):
            break
        if "envelope" in current or "pages" in current:
            return current
        if isinstance(current.get("structuredContent"), Mapping):
            current = current["structuredContent"]
        elif isinstance(current.get("result"), Mapping):
            current = current["result"]
        else:
            break
    raise DSSEError("not a tool response: no envelope (nor MCP structuredContent holding one)")


def verify_response(
    response: Mapping[str, Any], public_keys: Sequence[Ed25519PublicKey]
) -> VerifiedPayload:
    """Check `dsse` with the given keys, that `envelope` is exactly the signed payload, and that
    the wrapped content matches the envelope's `content_sha256`. Raises DSSEError naming the
    first thing that differs. A `Research` response is checked part by part (its own
    envelope, when it has passages, too)."""
    if isinstance(response.get("pages"), list) and "results" not in response:
        return _verify_research(response, public_keys)
    return _verify_part(response, public_keys)


def _verify_part(
    response: Mapping[str, Any], public_keys: Sequence[Ed25519PublicKey]
) -> VerifiedPayload:
    if "envelope" not in response:
        raise DSSEError("the response has no envelope")
    if "dsse" not in response:
        raise DSSEError("the response has no dsse signature")
    verified = check_dsse(response["dsse"], public_keys, ENVELOPE_PAYLOAD_TYPE)
    envelope = response["envelope"]
    try:
        signed = orjson.loads(verified.payload)
    except orjson.JSONDecodeError as exc:
        raise DSSEError("the signed payload is not JSON") from exc
    differences = _differences(signed, envelope, "envelope")
    if differences:
        raise DSSEError(f"envelope differs from the signed payload at {_listed(differences)}")
    if orjson.dumps(envelope) != verified.payload:
        raise DSSEError("envelope differs from the signed payload in key order or encoding")
    _check_content(response, envelope)
    return verified


def _verify_research(
    response: Mapping[str, Any], public_keys: Sequence[Ed25519PublicKey]
) -> VerifiedPayload:
    keyids: list[str] = []
    parts: list[tuple[str, Mapping[str, Any]]] = []
    if "envelope" in response:
        parts.append(("the research envelope", response))
    if isinstance(response.get("search"), Mapping):
        parts.append(("search", response["search"]))
    for index, page in enumerate(response["pages"]):
        if isinstance(page, Mapping) and "error" not in page:
            parts.append((f"pages[{index}]", page))
    if not parts:
        raise DSSEError("the research response holds no signed part")
    for name, part in parts:
        try:
            verified = (
                _verify_part(part, public_keys)
                if part is response
                else (verify_response(part, public_keys))
            )
        except DSSEError as exc:
            raise DSSEError(f"{name}: {exc}") from exc
        keyids.extend(k for k in verified.keyids if k not in keyids)
    return VerifiedPayload(b"", tuple(keyids))


def _check_content(response: Mapping[str, Any], envelope: object) -> None:
    """The content is not signed itself, only its digest in the envelope: compare them."""
    if not isinstance(envelope, Mapping):
        raise DSSEError("envelope is not a JSON object")
    expected = envelope.get("content_sha256")
    nonce = envelope.get("marker")
    if not isinstance(expected, str) or not isinstance(nonce, str):
        return
    if isinstance(response.get("results"), list):
        actual = _results_digest(response["results"], nonce)
        what = "results"
    elif isinstance(response.get("passages"), list):
        actual = _items_digest(
            response["passages"], nonce, "passages", ("text", "title", "heading")
        )
        what = "passages"
    else:
        field = "content" if "content" in response else "text" if "text" in response else None
        if field is None:
            return
        text = _unwrapped(response[field], nonce, field)
        actual = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        what = field
    if actual != expected:
        raise DSSEError(f"{what} does not match the envelope's content_sha256")


def _results_digest(results: list[Any], nonce: str) -> str:
    return _items_digest(results, nonce, "results", ("title", "snippet"))


def _items_digest(items: list[Any], nonce: str, name: str, wrapped: tuple[str, ...]) -> str:
    """The digest of a list of objects whose `wrapped` fields (when strings) are unwrapped."""
    plain: list[Any] = []
    for index, entry in enumerate(items):
        if not isinstance(entry, Mapping):
            raise DSSEError(f"{name}[{index}] is not an object")
        item = dict(entry)
        for key in wrapped:
            if isinstance(item.get(key), str):
                item[key] = _unwrapped(item[key], nonce, f"{name}[{index}].{key}")
        plain.append(item)
    return hashlib.sha256(orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _unwrapped(value: object, nonce: str, where: str) -> str:
    if not isinstance(value, str):
        raise DSSEError(f"{where} is not a string")
    try:
        return unwrap(value, nonce)
    except MarkerError as exc:
        raise DSSEError(f"{where}: {exc}") from exc


def _differences(signed: object, shown: object, path: str) -> list[str]:
    """Paths where the two JSON values differ, types included (JSON `1` is not `true`)."""
    if isinstance(signed, Mapping) and isinstance(shown, Mapping):
        found: list[str] = []
        for key in list(signed) + [k for k in shown if k not in signed]:
            if key not in signed or key not in shown:
                found.append(f"{path}.{key}")
            else:
                found.extend(_differences(signed[key], shown[key], f"{path}.{key}"))
            if len(found) > _MAX_REPORTED_PATHS:
                break
        return found
    if isinstance(signed, list) and isinstance(shown, list):
        if len(signed) != len(shown):
            return [path]
        found = []
        for index, (left, right) in enumerate(zip(signed, shown, strict=True)):
            found.extend(_differences(left, right, f"{path}[{index}]"))
            if len(found) > _MAX_REPORTED_PATHS:
                break
        return found
    same = type(signed) is type(shown) and signed == shown
    return [] if same else [path]


def _listed(paths: list[str]) -> str:
    shown = [_printable(path) for path in paths[:_MAX_REPORTED_PATHS]]
    more = " …" if len(paths) > _MAX_REPORTED_PATHS else ""
    return ", ".join(shown) + more


def _printable(path: str) -> str:
    # Keys come from the file being checked: keep terminal escapes and huge keys out.
    cleaned = "".join(char if char.isprintable() else "?" for char in path)
    return cleaned if len(cleaned) <= 120 else cleaned[:117] + "..."
