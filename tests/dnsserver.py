"""A scripted DNS server on loopback (UDP) for tests that go through the system resolver.

Each name has a list of steps, used in turn by the queries for it (per query type; the last
step repeats): addresses (A and AAAA), a CNAME to follow, an error code, or silence. The
encoder and decoder cover what a stub resolver asks: one question, class IN, answers of
type A, AAAA and CNAME. Names not in the script are NXDOMAIN. Every query is logged.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

A, AAAA, CNAME = 1, 28, 5
IN = 1
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3


@dataclass(frozen=True)
class Step:
    """One answer for a name. `addresses` of both families (each query type gets its own);
    `cname`: the name answers with a CNAME to this one (its steps follow in the answer)."""

    addresses: tuple[str, ...] = ()
    cname: str | None = None
    rcode: int = NOERROR
    silent: bool = False  # no answer at all: the resolver waits for its timeout


@dataclass(frozen=True)
class Query:
    id: int
    name: str  # lower case, no trailing dot
    qtype: int
    flags: int
    question: bytes  # the question section as sent


class DnsFormatError(ValueError):
    pass


def encode_name(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode("idna") if label else b""
        if not 0 < len(raw) < 64:
            raise DnsFormatError(f"bad label in {name!r}")
        out += bytes([len(raw)]) + raw
    return out + b"\x00"


def decode_query(packet: bytes) -> Query:
    if len(packet) < 12:
        raise DnsFormatError("short header")
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if flags & 0x8000 or qdcount != 1:
        raise DnsFormatError("not a query with one question")
    pos, labels = 12, []
    while True:
        if pos >= len(packet):
            raise DnsFormatError("name runs past the packet")
        length = packet[pos]
        pos += 1
        if length == 0:
            break
        if length & 0xC0:
            raise DnsFormatError("compression in a question")
        labels.append(packet[pos : pos + length].decode("ascii").lower())
        pos += length
    if pos + 4 > len(packet):
        raise DnsFormatError("question without type and class")
    qtype, qclass = struct.unpack("!HH", packet[pos : pos + 4])
    if qclass != IN:
        raise DnsFormatError("not class IN")
    return Query(ident, ".".join(labels), qtype, flags, packet[12 : pos + 4])


def encode_response(query: Query, rcode: int, answers: Sequence[tuple[str, int, bytes]]) -> bytes:
    """A response to `query`: QR, AA and RA set, RD echoed; answers (owner, type, rdata)."""
    flags = 0x8000 | 0x0400 | 0x0080 | (query.flags & 0x0100) | rcode
    out = struct.pack("!HHHHHH", query.id, flags, 1, len(answers), 0, 0) + query.question
    for owner, rtype, rdata in answers:
        out += encode_name(owner) + struct.pack("!HHIH", rtype, IN, 0, len(rdata)) + rdata
    return out


class ScriptedDns(asyncio.DatagramProtocol):
    def __init__(self, script: Mapping[str, Sequence[Step]]) -> None:
        self.script = {name.lower().rstrip("."): list(steps) for name, steps in script.items()}
        self.queries: list[tuple[str, int]] = []
        self._used: Counter[tuple[str, int]] = Counter()
        self.transport: asyncio.DatagramTransport | None = None

    async def start(self, host: str) -> None:
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, local_addr=(host, 53))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            query = decode_query(data)
        except DnsFormatError:
            return
        self.queries.append((query.name, query.qtype))
        reply = self.answer(query)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)

    def count(self, name: str, qtype: int = A) -> int:
        return self.queries.count((name, qtype))

    def _step(self, name: str, qtype: int) -> Step | None:
        steps = self.script.get(name)
        if not steps:
            return None
        index = min(self._used[(name, qtype)], len(steps) - 1)
        self._used[(name, qtype)] += 1
        return steps[index]

    def answer(self, query: Query) -> bytes | None:
        answers: list[tuple[str, int, bytes]] = []
        name = query.name
        for _ in range(8):  # a CNAME chain, followed (a loop ends here)
            step = self._step(name, query.qtype)
            if step is None:
                return encode_response(query, NXDOMAIN, answers)
            if step.silent:
                return None
            if step.rcode != NOERROR:
                return encode_response(query, step.rcode, answers)
            if step.cname is None:
                break
            target = step.cname.lower().rstrip(".")
            answers.append((name, CNAME, encode_name(target)))
            name = target
        for text in step.addresses:
            address = ipaddress.ip_address(text)
            if (address.version, query.qtype) in ((4, A), (6, AAAA)):
                answers.append((name, query.qtype, address.packed))
        return encode_response(query, NOERROR, answers)
