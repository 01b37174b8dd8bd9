from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.provenance.dsse import (
    CHECKPOINT_PAYLOAD_TYPE,
    ENVELOPE_PAYLOAD_TYPE,
    DSSEError,
    Signer,
    check_dsse,
    generate_keypair,
    keyid_of,
    load_public_key,
    pae,
    public_key_entry,
    sign_many,
    verify_dsse,
)

PAYLOAD = b'{"v":1,"id":"abc","tool":"WebFetch"}'


@pytest.fixture
def signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def test_pae_matches_the_dsse_v1_specification() -> None:
    # The worked example of the DSSE protocol document.
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("t/é", "ü".encode()) == "DSSEv1 4 t/é 2 ü".encode()


def test_keyid_is_hex_sha256_of_the_raw_public_key(signer: Signer) -> None:
    raw = signer.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32
    assert keyid_of(signer.public_key) == hashlib.sha256(raw).hexdigest() == signer.keyid


def test_public_key_entry_shape(signer: Signer) -> None:
    entry = public_key_entry(signer.public_key, not_before="2026-01-01T00:00:00Z")
    assert entry["keyid"] == signer.keyid
    assert entry["alg"] == "ed25519"
    assert base64.b64decode(entry["public_key"]) == signer.public_key.public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert (entry["status"], entry["not_before"], entry["not_after"]) == (
        "active",
        "2026-01-01T00:00:00Z",
        None,
    )


def test_sign_produces_a_dsse_envelope_checkable_with_cryptography_directly(
    signer: Signer,
) -> None:
    envelope = signer.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE)
    assert set(envelope) == {"payloadType", "payload", "signatures"}
    assert envelope["payloadType"] == ENVELOPE_PAYLOAD_TYPE
    assert base64.b64decode(envelope["payload"]) == PAYLOAD
    [signature] = envelope["signatures"]
    assert signature["keyid"] == signer.keyid
    signer.public_key.verify(
        base64.b64decode(signature["sig"]), pae(ENVELOPE_PAYLOAD_TYPE, PAYLOAD)
    )
    assert verify_dsse(envelope, [signer.public_key], ENVELOPE_PAYLOAD_TYPE) == PAYLOAD


def test_verify_accepts_url_safe_unpadded_base64(signer: Signer) -> None:
    payload = b"\xfb\xff\xfe binary?"
    envelope = signer.sign(payload, CHECKPOINT_PAYLOAD_TYPE)
    envelope["payload"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    envelope["signatures"][0]["sig"] = envelope["signatures"][0]["sig"].rstrip("=")
    assert verify_dsse(envelope, [signer.public_key], CHECKPOINT_PAYLOAD_TYPE) == payload


def test_sign_many_signs_once_per_key_and_either_key_verifies(signer: Signer) -> None:
    new = Signer(Ed25519PrivateKey.generate())
    envelope = sign_many([signer, new], PAYLOAD, CHECKPOINT_PAYLOAD_TYPE)
    assert [s["keyid"] for s in envelope["signatures"]] == [signer.keyid, new.keyid]
    for key in (signer.public_key, new.public_key):
        assert verify_dsse(envelope, [key], CHECKPOINT_PAYLOAD_TYPE) == PAYLOAD
    both = check_dsse(envelope, [new.public_key, signer.public_key], CHECKPOINT_PAYLOAD_TYPE)
    assert set(both.keyids) == {signer.keyid, new.keyid}


def test_sign_many_refuses_no_signers() -> None:
    with pytest.raises(DSSEError, match="at least one signer"):
        sign_many([], PAYLOAD, ENVELOPE_PAYLOAD_TYPE)


def test_an_empty_keyid_is_a_hint_only(signer: Signer) -> None:
    envelope = signer.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE)
    del envelope["signatures"][0]["keyid"]
    assert verify_dsse(envelope, [signer.public_key], ENVELOPE_PAYLOAD_TYPE) == PAYLOAD


def _edit_payload(envelope: dict) -> None:
    envelope["payload"] = base64.b64encode(PAYLOAD.replace(b"abc", b"abd")).decode()


def _flip_signature_bit(envelope: dict) -> None:
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[10] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


def _truncate_signature(envelope: dict) -> None:
    sig = base64.b64decode(envelope["signatures"][0]["sig"])
    envelope["signatures"][0]["sig"] = base64.b64encode(sig[:63]).decode()


def _set(key: str, value: object):  # type: ignore[no-untyped-def]
    def edit(envelope: dict) -> None:
        envelope[key] = value

    return edit


def _set_sig(key: str, value: object):  # type: ignore[no-untyped-def]
    def edit(envelope: dict) -> None:
        envelope["signatures"][0][key] = value

    return edit


def _drop(key: str):  # type: ignore[no-untyped-def]
    def edit(envelope: dict) -> None:
        del envelope[key]

    return edit


TAMPERING = [
    pytest.param(_edit_payload, "bad signature", id="edited-payload"),
    pytest.param(_flip_signature_bit, "bad signature", id="flipped-signature-bit"),
    pytest.param(_truncate_signature, "bad signature", id="short-signature"),
    pytest.param(_set("payloadType", CHECKPOINT_PAYLOAD_TYPE), "wrong payload type", id="type"),
    pytest.param(_set("payloadType", 7), "payloadType", id="type-not-string"),
    pytest.param(_drop("payloadType"), "payloadType", id="type-missing"),
    pytest.param(_drop("payload"), "payload is missing", id="payload-missing"),
    pytest.param(_set("payload", "not base64!"), "payload is not base64", id="payload-garbage"),
    pytest.param(_set("payload", 12), "payload is not a string", id="payload-number"),
    pytest.param(_set("payload", "QQ=x"), "not base64", id="payload-bad-padding"),
    pytest.param(_set("signatures", []), "no signatures", id="signatures-empty"),
    pytest.param(_drop("signatures"), "no signatures", id="signatures-missing"),
    pytest.param(_set("signatures", "sig"), "no signatures", id="signatures-string"),
    pytest.param(_set("signatures", ["x"]), r"signatures\[0\] is not an object", id="sig-str"),
    pytest.param(_set_sig("sig", "@@@"), r"signatures\[0\].sig is not base64", id="sig-garbage"),
    pytest.param(_set_sig("sig", None), r"signatures\[0\].sig is not a string", id="sig-null"),
    pytest.param(_set_sig("keyid", 5), "keyid is not a string", id="keyid-number"),
    pytest.param(_set_sig("keyid", "ab" * 32), "no valid signature by any given key", id="keyid"),
]


@pytest.mark.parametrize(("tamper", "reason"), TAMPERING)
def test_tampering_is_refused_with_a_reason(signer: Signer, tamper, reason: str) -> None:  # type: ignore[no-untyped-def]
    envelope = signer.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE)
    tamper(envelope)
    with pytest.raises(DSSEError, match=reason):
        verify_dsse(envelope, [signer.public_key], ENVELOPE_PAYLOAD_TYPE)


def test_a_signature_by_another_key_is_refused(signer: Signer) -> None:
    other = Signer(Ed25519PrivateKey.generate())
    envelope = other.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE)
    with pytest.raises(DSSEError, match="no valid signature by any given key") as info:
        verify_dsse(envelope, [signer.public_key], ENVELOPE_PAYLOAD_TYPE)
    assert other.keyid in str(info.value) and signer.keyid in str(info.value)


def test_a_forged_keyid_claiming_the_trusted_key_is_a_bad_signature(signer: Signer) -> None:
    other = Signer(Ed25519PrivateKey.generate())
    envelope = other.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE)
    envelope["signatures"][0]["keyid"] = signer.keyid
    with pytest.raises(DSSEError, match=f"bad signature by key {signer.keyid}"):
        verify_dsse(envelope, [signer.public_key], ENVELOPE_PAYLOAD_TYPE)


def test_hostile_keyids_are_not_echoed(signer: Signer) -> None:
    other = Signer(Ed25519PrivateKey.generate())
    envelope = other.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE)
    envelope["signatures"][0]["keyid"] = "\x1b[31mred\x1b[0m"
    with pytest.raises(DSSEError) as info:
        verify_dsse(envelope, [signer.public_key], ENVELOPE_PAYLOAD_TYPE)
    assert "\x1b" not in str(info.value) and "(unprintable keyid)" in str(info.value)


@pytest.mark.parametrize("envelope", [None, [], "x", 3], ids=["null", "list", "str", "int"])
def test_a_non_object_envelope_is_malformed(signer: Signer, envelope: object) -> None:
    with pytest.raises(DSSEError, match="not a JSON object"):
        verify_dsse(envelope, [signer.public_key], ENVELOPE_PAYLOAD_TYPE)


def test_verifying_without_keys_is_refused(signer: Signer) -> None:
    with pytest.raises(DSSEError, match="no public key"):
        verify_dsse(signer.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE), [], ENVELOPE_PAYLOAD_TYPE)


# --- key files ---------------------------------------------------------------------------


def test_generate_keypair_writes_pem_files_with_safe_modes(tmp_path: Path) -> None:
    key_dir = tmp_path / "keys"
    private_path, public_path, keyid = generate_keypair(key_dir)
    assert (private_path, public_path) == (key_dir / "signing.key", key_dir / "signing.pub")
    assert stat.S_IMODE(private_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(public_path.stat().st_mode) == 0o644
    assert private_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_path.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    signer = Signer.from_pem_file(private_path)
    public_key = load_public_key(public_path)
    assert signer.keyid == keyid == keyid_of(public_key)
    envelope = signer.sign(PAYLOAD, ENVELOPE_PAYLOAD_TYPE)
    assert verify_dsse(envelope, [public_key], ENVELOPE_PAYLOAD_TYPE) == PAYLOAD


def test_generate_keypair_ignores_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        private_path, _, _ = generate_keypair(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(private_path.stat().st_mode) == 0o600


@pytest.mark.parametrize("existing", ["signing.key", "signing.pub"])
def test_generate_keypair_refuses_to_overwrite(tmp_path: Path, existing: str) -> None:
    (tmp_path / existing).write_bytes(b"precious")
    with pytest.raises(DSSEError, match="already exists"):
        generate_keypair(tmp_path)
    assert (tmp_path / existing).read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]


def test_generate_keypair_refuses_a_dangling_symlink(tmp_path: Path) -> None:
    (tmp_path / "signing.key").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DSSEError, match="already exists"):
        generate_keypair(tmp_path)
    assert not (tmp_path / "elsewhere").exists()


def _pem_private(key) -> bytes:  # type: ignore[no-untyped-def]
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


BAD_PRIVATE_KEYS = [
    pytest.param(b"", "not a PEM private key", id="empty"),
    pytest.param(b"hello", "not a PEM private key", id="text"),
    pytest.param(_pem_private(generate_private_key(SECP256R1())), "not an Ed25519 key", id="ecdsa"),
    pytest.param(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        ),
        "encrypted",
        id="encrypted",
    ),
    pytest.param(b"x" * 70_000, "too large", id="huge"),
]


@pytest.mark.parametrize(("content", "reason"), BAD_PRIVATE_KEYS)
def test_from_pem_file_refuses_bad_keys(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "k.pem"
    path.write_bytes(content)
    with pytest.raises(DSSEError, match=reason):
        Signer.from_pem_file(path)


def test_from_pem_file_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DSSEError, match="cannot read signing key"):
        Signer.from_pem_file(tmp_path / "absent.key")


def test_load_public_key_refuses_a_private_key(tmp_path: Path) -> None:
    private_path, _, _ = generate_keypair(tmp_path)
    with pytest.raises(DSSEError, match="holds a private key"):
        load_public_key(private_path)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(b"nope", "not a PEM public key", id="text"),
        pytest.param(
            generate_private_key(SECP256R1())
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            "not an Ed25519 key",
            id="ecdsa",
        ),
    ],
)
def test_load_public_key_refuses_bad_files(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "k.pub"
    path.write_bytes(content)
    with pytest.raises(DSSEError, match=reason):
        load_public_key(path)
