"""The ClientHello reader: real hellos from the ssl module, split at every byte, and
arbitrary bytes (hypothesis) that may only ever be INCOMPLETE, a hello, or NotTLSError."""

from __future__ import annotations

import functools
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.server.proxy.tls_hello import (
    INCOMPLETE,
    ClientHello,
    NotTLSError,
    parse_client_hello,
)


@functools.cache
def real_hello(server_hostname: str | None, *, tls13_only: bool = False) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = server_hostname is not None
    if server_hostname is None:
        context.verify_mode = ssl.CERT_NONE
    if tls13_only:
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("site.example.com", "site.example.com"),
        ("Site.Example.COM", "site.example.com"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        (None, None),
    ],
    ids=["plain", "case", "idna", "no-sni"],
)
def test_real_client_hellos(name, expected) -> None:
    data = real_hello(name)
    hello = parse_client_hello(data)
    assert isinstance(hello, ClientHello)
    assert hello.server_name == expected and hello.length == len(data)


def test_every_prefix_is_incomplete_and_never_an_error() -> None:
    data = real_hello("site.example.com", tls13_only=True)
    for cut in range(len(data)):
        assert parse_client_hello(data[:cut]) is INCOMPLETE
    assert isinstance(parse_client_hello(data + b"trailing application bytes"), ClientHello)


def test_a_hello_split_over_two_records() -> None:
    data = real_hello("site.example.com")
    body = data[5:]
    half = len(body) // 2
    split = (
        b"\x16\x03\x01"
        + half.to_bytes(2, "big")
        + body[:half]
        + b"\x16\x03\x01"
        + (len(body) - half).to_bytes(2, "big")
        + body[half:]
    )
    hello = parse_client_hello(split)
    assert isinstance(hello, ClientHello) and hello.server_name == "site.example.com"


@pytest.mark.parametrize(
    "data",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"GET / HTTP/1.1\r\n",
        b"\x16\x02\x00\x00\x05hello",
        b"\x16\x03\x01\x00\x00",
        b"\x16\x03\x01\x00\x04\x02\x00\x00\x00",  # a ServerHello
        b"\x17\x03\x03\x00\x10" + b"\0" * 16,  # application data first
        b"\x16\x03\x01\xff\xff",  # a record over the size limit
    ],
    ids=["ssh", "http", "sslv2-ish", "empty-record", "server-hello", "app-data", "oversize"],
)
def test_not_tls_is_refused(data) -> None:
    with pytest.raises(NotTLSError):
        parse_client_hello(data)


def test_ssh_is_refused_from_its_first_byte() -> None:
    with pytest.raises(NotTLSError):
        parse_client_hello(b"S")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_raise_anything_else(data: bytes) -> None:
    try:
        result = parse_client_hello(data)
    except NotTLSError:
        return
    assert result is INCOMPLETE or isinstance(result, ClientHello)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=4000), st.binary(min_size=1, max_size=8))
def test_corrupted_real_hellos_never_raise_anything_else(position: int, junk: bytes) -> None:
    data = bytearray(real_hello("site.example.com"))
    position %= len(data)
    data[position : position + len(junk)] = junk
    try:
        result = parse_client_hello(bytes(data))
    except NotTLSError:
        return
    assert result is INCOMPLETE or isinstance(result, ClientHello)
