"""Reading a TLS ClientHello for its server name (SNI), without terminating TLS.

Pure and total: any byte string yields a `ClientHello`, `INCOMPLETE` (send more bytes) or
`NotTLSError`, never another exception, and never reads past `MAX_HELLO_BYTES`. The forward
proxy uses it to refuse tunnels whose first bytes are not TLS (SSH, plain HTTP) or that name
another host than the CONNECT target (domain fronting). RFC 8446 4.1.2 / RFC 6066 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

RECORD_HANDSHAKE = 0x16
HANDSHAKE_CLIENT_HELLO = 0x01
EXTENSION_SERVER_NAME = 0x0000
NAME_TYPE_HOST = 0x00
MAX_RECORD_PAYLOAD = 16384 + 2048  # RFC 8446 5.2: TLSCiphertext may exceed 2^14 by 2048
MAX_HELLO_BYTES = 64 * 1024  # a hello (incl. record headers) larger than this is refused
MAX_NAME_LENGTH = 253


class NotTLSError(ValueError):
    """The bytes are not the start of a TLS handshake; the message says why."""


class _Incomplete:
    __slots__ = ()

    def __repr__(self) -> str:
        return "INCOMPLETE"


INCOMPLETE: Final = _Incomplete()


@dataclass(frozen=True, slots=True)
class ClientHello:
    legacy_version: int
    server_name: str | None  # lower case, no trailing dot; None when the hello sends no SNI
    length: int  # bytes of records the hello took


def parse_client_hello(data: bytes) -> ClientHello | _Incomplete:
    """The ClientHello at the start of `data`, possibly spread over several records."""
    message = bytearray()
    offset = 0
    needed: int | None = None
    while needed is None or len(message) < needed:
        if offset >= MAX_HELLO_BYTES:
            raise NotTLSError("the ClientHello is larger than the proxy accepts")
        if len(data) - offset < 5:
            _check_partial_header(data[offset:])
            return INCOMPLETE
        kind, major, minor = data[offset], data[offset + 1], data[offset + 2]
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if kind != RECORD_HANDSHAKE:
            raise NotTLSError(f"the first record is not a TLS handshake (type {kind:#04x})")
        if major != 3 or minor > 4:
            raise NotTLSError(f"unknown TLS record version {major}.{minor}")
        if length == 0 or length > MAX_RECORD_PAYLOAD:
            raise NotTLSError(f"a TLS record of {length} bytes is not valid")
        if len(data) - offset - 5 < length:
            return INCOMPLETE
        message += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
        if needed is None and len(message) >= 4:
            if message[0] != HANDSHAKE_CLIENT_HELLO:
                raise NotTLSError(
                    f"the first handshake message is not a ClientHello ({message[0]})"
                )
            needed = 4 + int.from_bytes(message[1:4], "big")
            if needed > MAX_HELLO_BYTES:
                raise NotTLSError("the ClientHello is larger than the proxy accepts")
    return ClientHello(*_read_hello(bytes(message[4:needed])), length=offset)


def _check_partial_header(head: bytes) -> None:
    """Refuse as early as the first byte: SSH or HTTP never has to send more to be caught."""
    if head and head[0] != RECORD_HANDSHAKE:
        raise NotTLSError(f"the first record is not a TLS handshake (type {head[0]:#04x})")
    if len(head) >= 2 and head[1] != 3:
        raise NotTLSError("unknown TLS record version")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise NotTLSError("the ClientHello is truncated or malformed")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> _Reader:
        return _Reader(self.take(self.number(length_bytes)))

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


def _read_hello(body: bytes) -> tuple[int, str | None]:
    reader = _Reader(body)
    version = reader.number(2)
    reader.take(32)  # random
    session = reader.vector(1)
    if session.left > 32:
        raise NotTLSError("the ClientHello's session id is too long")
    suites = reader.vector(2)
    if suites.left == 0 or suites.left % 2:
        raise NotTLSError("the ClientHello's cipher suites are malformed")
    if reader.vector(1).left == 0:
        raise NotTLSError("the ClientHello offers no compression method")
    if reader.left == 0:
        return version, None  # no extensions at all: no SNI
    extensions = reader.vector(2)
    if reader.left:
        raise NotTLSError("bytes after the ClientHello's extensions")
    name: str | None = None
    seen: set[int] = set()
    while extensions.left:
        kind = extensions.number(2)
        payload = extensions.vector(2)
        if kind in seen:
            raise NotTLSError(f"the ClientHello repeats extension {kind}")
        seen.add(kind)
        if kind == EXTENSION_SERVER_NAME:
            name = _read_server_name(payload)
    return version, name


def _read_server_name(payload: _Reader) -> str | None:
    names = payload.vector(2)
    if payload.left:
        raise NotTLSError("bytes after the server_name list")
    found: str | None = None
    while names.left:
        name_type = names.number(1)
        raw = names.vector(2).data
        if name_type != NAME_TYPE_HOST:
            continue
        if found is not None:
            raise NotTLSError("the ClientHello names more than one host")  # RFC 6066 3
        if not raw or len(raw) > MAX_NAME_LENGTH + 1:
            raise NotTLSError("the ClientHello's server name has a bad length")
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise NotTLSError("the ClientHello's server name is not ASCII") from None
        if not all(c.isalnum() or c in "-._" for c in text):
            raise NotTLSError("the ClientHello's server name has characters a host cannot")
        found = text.lower().removesuffix(".")
    return found
