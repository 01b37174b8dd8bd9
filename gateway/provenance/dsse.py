"""DSSE v1 envelopes signed with Ed25519: signing, verification, key files and key ids.

Owns the exact bytes that are signed (PAE) and the key-file formats (PEM PKCS8 / SPKI).
Must not parse or re-serialise payloads: it signs and returns bytes exactly as given.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

ENVELOPE_PAYLOAD_TYPE = "application/vnd.gateway.envelope.v1+json"
CHECKPOINT_PAYLOAD_TYPE = "application/vnd.gateway.checkpoint.v1+json"

PRIVATE_KEY_NAME = "signing.key"
PUBLIC_KEY_NAME = "signing.pub"

# A PEM Ed25519 key is ~120 bytes; anything far larger is not a key file.
_MAX_KEY_FILE_BYTES = 64 * 1024
_ED25519_SIGNATURE_BYTES = 64
_PRINTABLE_KEYID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
_BASE64_CHARS = re.compile(r"[A-Za-z0-9+/\-_]*={0,2}")


class DSSEError(Exception):
    """A key could not be loaded, or an envelope is malformed, unsigned or badly signed."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature actually covers."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def raw_public_key(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keyid_of(public_key: Ed25519PublicKey) -> str:
    """Hex SHA-256 of the raw 32-byte public key."""
    return hashlib.sha256(raw_public_key(public_key)).hexdigest()


def public_key_entry(
    public_key: Ed25519PublicKey,
    *,
    status: str = "active",
    not_before: str | None = None,
    not_after: str | None = None,
) -> dict[str, Any]:
    """One element of `GET /v1/keys`' `keys` list."""
    return {
        "keyid": keyid_of(public_key),
        "alg": "ed25519",
        "public_key": base64.b64encode(raw_public_key(public_key)).decode("ascii"),
        "status": status,
        "not_before": not_before,
        "not_after": not_after,
    }


def _read_key_file(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise DSSEError(f"cannot read {what} {os.fspath(path)!r}: {exc.strerror or exc}") from exc
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise DSSEError(f"{what} {os.fspath(path)!r} is too large to be a PEM key")
    return data


def utc_iso(seconds: float) -> str:
    """A POSIX time as UTC with milliseconds and a Z, as every timestamp the gateway writes."""
    whole = int(seconds)
    millis = int((seconds - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


class Signer:
    """An Ed25519 private key that signs DSSE envelopes.

    `in_use_since` is the earliest time a signature by it can bear: the key file's
    modification time (a key signs only once written), which stays the same across restarts
    and replicas; None for a key made in memory.
    """

    __slots__ = ("_private_key", "in_use_since", "keyid", "public_key")

    def __init__(self, private_key: Ed25519PrivateKey, *, in_use_since: str | None = None) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise DSSEError("the signing key must be an Ed25519 private key")
        self._private_key = private_key
        self.public_key: Ed25519PublicKey = private_key.public_key()
        self.keyid: str = keyid_of(self.public_key)
        self.in_use_since = in_use_since

    def __repr__(self) -> str:
        return f"Signer(keyid={self.keyid!r})"

    @classmethod
    def from_pem_file(cls, path: str | os.PathLike[str]) -> Signer:
        data = _read_key_file(path, "signing key")
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except TypeError as exc:  # raised for an encrypted key when no password is given
            raise DSSEError(
                f"signing key {os.fspath(path)!r} is encrypted; an unencrypted PEM key is needed"
            ) from exc
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise DSSEError(
                f"signing key {os.fspath(path)!r} is not a PEM private key ({exc})"
            ) from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise DSSEError(
                f"signing key {os.fspath(path)!r} is a {type(key).__name__}, not an Ed25519 key"
            )
        try:
            since: str | None = utc_iso(os.stat(path).st_mtime)
        except OSError:
            since = None  # read a moment ago, gone now: the caller falls back to its start
        return cls(key, in_use_since=since)

    def adopt(self, other: Signer) -> None:
        """Take over `other`'s key, so every holder of this signer signs with the new key
        from now on (a key rotation at reload)."""
        self._private_key = other._private_key
        self.public_key = other.public_key
        self.keyid = other.keyid
        self.in_use_since = other.in_use_since

    def signature(self, payload: bytes, payload_type: str) -> dict[str, str]:
        sig = self._private_key.sign(pae(payload_type, payload))
        return {"keyid": self.keyid, "sig": base64.b64encode(sig).decode("ascii")}

    def sign(self, payload: bytes, payload_type: str) -> dict[str, Any]:
        return sign_many([self], payload, payload_type)

    # The name docs/design.md first gave this method.
    sign_dsse = sign


def sign_many(signers: Sequence[Signer], payload: bytes, payload_type: str) -> dict[str, Any]:
    """One envelope, one signature per signer (a key rotation signs with old and new)."""
    if not signers:
        raise DSSEError("at least one signer is needed")
    if not isinstance(payload, bytes | bytearray):
        raise TypeError("the DSSE payload must be bytes")
    payload = bytes(payload)
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [signer.signature(payload, payload_type) for signer in signers],
    }


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM SubjectPublicKeyInfo file."""
    data = _read_key_file(path, "public key")
    if b"PRIVATE KEY" in data:
        raise DSSEError(
            f"{os.fspath(path)!r} holds a private key; pass the public key (signing.pub)"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise DSSEError(f"public key {os.fspath(path)!r} is not a PEM public key ({exc})") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise DSSEError(
            f"public key {os.fspath(path)!r} is a {type(key).__name__}, not an Ed25519 key"
        )
    return key


def _b64decode(value: object, what: str) -> bytes:
    """Standard or URL-safe base64, padded or not (DSSE allows either alphabet)."""
    if not isinstance(value, str):
        raise DSSEError(f"malformed envelope: {what} is not a string")
    if not _BASE64_CHARS.fullmatch(value):
        raise DSSEError(f"malformed envelope: {what} is not base64")
    unpadded = value.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(unpadded + "=" * (-len(unpadded) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DSSEError(f"malformed envelope: {what} is not base64") from exc


@dataclass(frozen=True, slots=True)
class VerifiedPayload:
    payload: bytes
    keyids: tuple[str, ...]  # the given keys whose signature checked out


def check_dsse(
    envelope: object, public_keys: Sequence[Ed25519PublicKey], payload_type: str
) -> VerifiedPayload:
    """Like `verify_dsse`, also naming which of the given keys signed."""
    if not public_keys:
        raise DSSEError("no public key given to verify with")
    if not isinstance(envelope, Mapping):
        raise DSSEError("malformed envelope: not a JSON object")
    actual_type = envelope.get("payloadType")
    if not isinstance(actual_type, str):
        raise DSSEError("malformed envelope: payloadType is missing or not a string")
    if actual_type != payload_type:
        raise DSSEError(f"wrong payload type {actual_type!r}, expected {payload_type!r}")
    if "payload" not in envelope:
        raise DSSEError("malformed envelope: payload is missing")
    payload = _b64decode(envelope["payload"], "payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise DSSEError("malformed envelope: no signatures")

    keys = {keyid_of(key): key for key in public_keys}
    message = pae(payload_type, payload)
    valid: list[str] = []
    bad: list[str] = []
    for index, entry in enumerate(signatures):
        if not isinstance(entry, Mapping):
            raise DSSEError(f"malformed envelope: signatures[{index}] is not an object")
        keyid = entry.get("keyid", "")
        if not isinstance(keyid, str):
            raise DSSEError(f"malformed envelope: signatures[{index}].keyid is not a string")
        sig = _b64decode(entry.get("sig"), f"signatures[{index}].sig")
        # keyid is only a hint: an empty one means "try every trusted key".
        candidates = [keyid] if keyid else list(keys)
        for candidate in candidates:
            key = keys.get(candidate)
            if key is None or candidate in valid:
                continue
            try:
                if len(sig) != _ED25519_SIGNATURE_BYTES:
                    raise InvalidSignature
                key.verify(sig, message)
            except InvalidSignature:
                if keyid:
                    bad.append(candidate)
                continue
            valid.append(candidate)
    if valid:
        return VerifiedPayload(payload, tuple(valid))
    if bad:
        raise DSSEError(f"bad signature by key {bad[0]}")
    listed = sorted({_printable_keyid(e.get("keyid")) for e in signatures})
    raise DSSEError(
        f"no valid signature by any given key (signed by: {', '.join(listed)}; "
        f"given: {', '.join(sorted(keys))})"
    )


def _printable_keyid(keyid: object) -> str:
    # keyids come from the envelope, i.e. from whoever handed it over: never echo them raw.
    if not keyid:
        return "(no keyid)"
    if isinstance(keyid, str) and _PRINTABLE_KEYID.fullmatch(keyid):
        return keyid
    return "(unprintable keyid)"


def verify_dsse(
    envelope: object, public_keys: Sequence[Ed25519PublicKey], payload_type: str
) -> bytes:
    """The verified payload bytes; raises DSSEError naming the reason otherwise."""
    return check_dsse(envelope, public_keys, payload_type).payload


def generate_keypair(directory: str | os.PathLike[str]) -> tuple[Path, Path, str]:
    """DIR/signing.key (PKCS8 PEM, 0600 from creation) and DIR/signing.pub (SPKI PEM).

    Refuses to overwrite either file. Returns (private path, public path, keyid).
    """
    target = Path(directory)
    private_path = target / PRIVATE_KEY_NAME
    public_path = target / PUBLIC_KEY_NAME
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise DSSEError(f"{path} already exists; refusing to overwrite a key")
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise DSSEError(f"cannot create {target}: {exc.strerror or exc}") from exc

    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write_new(private_path, private_pem, 0o600)
    try:
        _write_new(public_path, public_pem, 0o644)
    except DSSEError:
        private_path.unlink(missing_ok=True)
        raise
    return private_path, public_path, keyid_of(key.public_key())


def _write_new(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL closes the race with a file (or symlink) appearing after the exists() check; the
    # mode is given at creation so the private key is never readable by others, not even briefly.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError as exc:
        raise DSSEError(f"{path} already exists; refusing to overwrite a key") from exc
    except OSError as exc:
        raise DSSEError(f"cannot create {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, mode)  # the umask may have narrowed the public key's mode; set it exactly
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise DSSEError(f"cannot write {path}: {exc.strerror or exc}") from exc
