from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.provenance.dsse import (
    CHECKPOINT_PAYLOAD_TYPE,
    ENVELOPE_PAYLOAD_TYPE,
    DSSEError,
    Signer,
    verify_dsse,
)
from gateway.provenance.envelope import (
    attach_dsse,
    envelope_bytes,
    signed_body,
    verify_response,
)
from gateway.provenance.markers import wrap

from .responses import fetch_response, search_response


@pytest.fixture
def signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def test_envelope_bytes_are_orjson_bytes() -> None:
    envelope = {"v": 1, "tool": "WebFetch", "title": "ünïcode", "truncated": False}
    assert envelope_bytes(envelope) == orjson.dumps(envelope)
    assert (
        envelope_bytes(envelope)
        == '{"v":1,"tool":"WebFetch","title":"ünïcode","truncated":false}'.encode()
    )


def test_attach_dsse_signs_the_exact_envelope_bytes(signer: Signer) -> None:
    body: dict[str, Any] = {"envelope": {"v": 1, "id": "x"}, "content": "c"}
    assert attach_dsse(body, signer) is body
    assert body["dsse"]["payloadType"] == ENVELOPE_PAYLOAD_TYPE
    assert base64.b64decode(body["dsse"]["payload"]) == orjson.dumps(body["envelope"])
    payload = verify_dsse(body["dsse"], [signer.public_key], ENVELOPE_PAYLOAD_TYPE)
    # The whole body, serialised by the HTTP layer, carries the envelope as the same bytes.
    assert payload in orjson.dumps(body)


def test_attach_dsse_without_a_signer_adds_nothing() -> None:
    body: dict[str, Any] = {"envelope": {"v": 1}}
    assert attach_dsse(body, None) == {"envelope": {"v": 1}}
    assert attach_dsse(body, []) == {"envelope": {"v": 1}}


def test_attach_dsse_with_two_signers_for_a_rotation(signer: Signer) -> None:
    new = Signer(Ed25519PrivateKey.generate())
    body = attach_dsse({"envelope": {"v": 1}}, [signer, new])
    assert [s["keyid"] for s in body["dsse"]["signatures"]] == [signer.keyid, new.keyid]
    assert verify_response(body, [new.public_key]).keyids == (new.keyid,)


def test_a_signed_fetch_response_verifies(signer: Signer) -> None:
    response = fetch_response(signer)
    verified = verify_response(response, [signer.public_key])
    assert verified.keyids == (signer.keyid,)
    assert orjson.loads(verified.payload) == response["envelope"]


def test_a_signed_search_response_verifies(signer: Signer) -> None:
    verify_response(search_response(signer), [signer.public_key])


def _set(path: tuple[str, ...], value: object) -> Callable[[dict], None]:
    def edit(response: dict) -> None:
        target = response
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _delete(path: tuple[str, ...]) -> Callable[[dict], None]:
    def edit(response: dict) -> None:
        target = response
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return edit


def _reorder(response: dict) -> None:
    response["envelope"] = dict(reversed(list(response["envelope"].items())))


def _resign_edited_payload(response: dict) -> None:
    envelope = dict(response["envelope"], status=404)
    response["dsse"]["payload"] = base64.b64encode(orjson.dumps(envelope)).decode()
    response["envelope"] = envelope


def _rewrap_content(response: dict) -> None:
    nonce = response["envelope"]["marker"]
    digest = response["envelope"]["content_sha256"]
    response["content"] = wrap("forged text", nonce=nonce, source="s", sha256=digest)


FETCH_TAMPERING = [
    pytest.param(_set(("envelope", "status"), 404), "at envelope.status", id="edit-field"),
    pytest.param(
        _set(("envelope", "policy", "rule"), "domains.allow[9]"),
        r"at envelope.policy.rule",
        id="edit-nested",
    ),
    pytest.param(_set(("envelope", "truncated"), 0), "at envelope.truncated", id="false-to-0"),
    pytest.param(_set(("envelope", "chars"), 1.0 * 10), "at envelope.chars", id="int-to-float"),
    pytest.param(_set(("envelope", "extra"), 1), "at envelope.extra", id="added-field"),
    pytest.param(_delete(("envelope", "final_url")), "at envelope.final_url", id="dropped"),
    pytest.param(
        _set(("envelope", "redirects"), []), r"at envelope.redirects", id="dropped-redirect"
    ),
    pytest.param(_reorder, "key order", id="reordered-keys"),
    pytest.param(_resign_edited_payload, "bad signature", id="edited-payload"),
    pytest.param(
        _set(("dsse", "payloadType"), CHECKPOINT_PAYLOAD_TYPE), "wrong payload type", id="type"
    ),
    pytest.param(_set(("dsse", "signatures"), []), "no signatures", id="stripped-signature"),
    pytest.param(_delete(("dsse",)), "no dsse", id="no-dsse"),
    pytest.param(_delete(("envelope",)), "no envelope", id="no-envelope"),
    pytest.param(_set(("dsse",), "x"), "not a JSON object", id="dsse-not-object"),
    pytest.param(_set(("envelope",), "x"), r"at envelope\b", id="envelope-not-object"),
    pytest.param(_rewrap_content, "content does not match", id="edited-content"),
    pytest.param(_set(("content",), "plain text"), "content: not a wrapped", id="unwrapped"),
    pytest.param(
        _set(("content",), wrap("Guide", nonce="a" * 32, source="s")),
        "expected nonce",
        id="other-nonce",
    ),
]


@pytest.mark.parametrize(("tamper", "reason"), FETCH_TAMPERING)
def test_tampered_fetch_responses_are_refused(
    signer: Signer, tamper: Callable[[dict], None], reason: str
) -> None:
    response = fetch_response(signer)
    tamper(response)
    with pytest.raises(DSSEError, match=reason):
        verify_response(response, [signer.public_key])


def test_a_response_signed_by_another_key_is_refused(signer: Signer) -> None:
    other = Signer(Ed25519PrivateKey.generate())
    with pytest.raises(DSSEError, match="no valid signature by any given key"):
        verify_response(fetch_response(other), [signer.public_key])


def test_an_edited_search_snippet_is_refused(signer: Signer) -> None:
    response = search_response(signer)
    nonce = response["envelope"]["marker"]
    response["results"][1]["snippet"] = wrap("Evil", nonce=nonce, source="https://e.example/")
    with pytest.raises(DSSEError, match="results does not match"):
        verify_response(response, [signer.public_key])


def test_research_responses_are_checked_part_by_part(signer: Signer) -> None:
    pages = [fetch_response(signer), {"url": "u", "rank": 2, "error": {"code": "x"}}]
    research = {"search": search_response(signer), "pages": pages}
    assert verify_response(research, [signer.public_key]).keyids == (signer.keyid,)
    pages[0]["envelope"]["status"] = 500
    with pytest.raises(DSSEError, match=r"pages\[0\]: envelope differs"):
        verify_response(research, [signer.public_key])


def test_an_unsigned_research_response_is_refused(signer: Signer) -> None:
    with pytest.raises(DSSEError, match="no signed part"):
        verify_response({"pages": []}, [signer.public_key])


def test_hostile_keys_are_not_echoed(signer: Signer) -> None:
    response = fetch_response(signer)
    response["envelope"]["\x1b[2J" + "k" * 500] = 1
    with pytest.raises(DSSEError) as info:
        verify_response(response, [signer.public_key])
    assert "\x1b" not in str(info.value) and len(str(info.value)) < 300


SHAPES = [
    pytest.param(lambda body: body, id="http-body"),
    pytest.param(
        lambda body: {"content": [{"type": "text", "text": "…"}], "structuredContent": body},
        id="mcp-tool-result",
    ),
    pytest.param(
        lambda body: {"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": body}},
        id="json-rpc-response",
    ),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_signed_body_finds_the_response(signer: Signer, shape: Callable[[dict], object]) -> None:
    body = fetch_response(signer)
    assert signed_body(shape(body)) is body


@pytest.mark.parametrize(
    "document", [None, [], {"content": []}, {"result": {"x": 1}}], ids=["null", "list", "o", "rpc"]
)
def test_signed_body_refuses_other_documents(document: object) -> None:
    with pytest.raises(DSSEError, match="not a tool response"):
        signed_body(document)
