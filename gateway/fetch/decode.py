"""Content decoding with a hard cap on the decoded size, whatever the compression ratio.

Only identity and one of gzip, deflate or br are accepted; stacked or unknown codings are an
upstream error. Each compressed chunk is inflated in slices of at most `SLICE` bytes, so a
bomb costs at most the cap plus one slice of memory before it is cut off.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import brotli

from gateway.errors import ResponseTooLargeError, UpstreamError
from gateway.wire.http1 import MAX_GZIP_MEMBERS
from gateway.wire.representable import representable

SLICE = 64 * 1024
SUPPORTED = ("gzip", "x-gzip", "deflate", "br")
ACCEPT_ENCODING = "gzip, deflate, br"


def parse_content_encoding(values: list[str]) -> str | None:
    """The single coding to undo (None for identity); UpstreamError for stacked/unknown."""
    codings = [c.strip().lower() for v in values for c in v.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        shown = representable(", ".join(codings), limit=100)  # the upstream's bytes
        raise UpstreamError(f"the upstream stacked content codings: {shown}")
    if codings[0] not in SUPPORTED:
        shown = representable(codings[0], limit=40)
        raise UpstreamError(f"the upstream used an unsupported content coding: {shown}")
    return "gzip" if codings[0] == "x-gzip" else codings[0]


class BoundedDecoder:
    """Feed raw chunks, get decoded chunks; raises ResponseTooLargeError past `limit`."""

    def __init__(self, coding: str | None, limit: int) -> None:
        self._coding = coding
        self._limit = limit
        self.decoded = 0
        self._members = 1
        self._zlib: zlib._Decompress | None = None
        self._brotli: brotli.Decompressor | None = None
        self._deflate_started = False
        if coding == "gzip":
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "br":
            self._brotli = brotli.Decompressor()

    def _count(self, data: bytes) -> bytes:
        self.decoded += len(data)
        if self.decoded > self._limit:
            raise ResponseTooLargeError(
                f"the response body exceeded max_response_bytes ({self._limit} bytes)"
            )
        return data

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        try:
            if self._coding is None:
                yield self._count(chunk)
            elif self._coding == "br":
                yield from self._feed_brotli(chunk)
            else:
                yield from self._feed_zlib(chunk)
        except (zlib.error, brotli.error) as exc:
            raise UpstreamError(f"the upstream sent a corrupt {self._coding} body: {exc}") from exc

    def _feed_zlib(self, chunk: bytes) -> Iterator[bytes]:
        if self._zlib is None:  # deflate: a zlib stream, or raw deflate from broken servers
            if not chunk:
                return
            raw = (chunk[0] & 0x0F) != 8
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
        data = chunk
        while data:
            out = self._zlib.decompress(data, SLICE)
            if out:
                yield self._count(out)
            data = self._zlib.unconsumed_tail
            if self._zlib.eof:
                rest = self._zlib.unused_data
                if self._coding != "gzip" or not rest.strip(b"\x00"):
                    return
                self._members += 1
                if self._members > MAX_GZIP_MEMBERS:
                    raise UpstreamError("the upstream sent too many gzip members")
                self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data = rest

    def _feed_brotli(self, chunk: bytes) -> Iterator[bytes]:
        assert self._brotli is not None
        out = self._brotli.process(chunk, output_buffer_limit=SLICE)
        if out:
            yield self._count(out)
        while not self._brotli.can_accept_more_data():
            out = self._brotli.process(b"", output_buffer_limit=SLICE)
            if not out:
                break
            yield self._count(out)

    def finish(self) -> Iterator[bytes]:
        """Whatever the decompressor still holds; checks the stream really ended."""
        if self._zlib is not None:
            try:
                out = self._zlib.flush()
            except zlib.error as exc:
                raise UpstreamError(f"the upstream sent a corrupt {self._coding} body") from exc
            if out:
                yield self._count(out)
            if not self._zlib.eof:
                raise UpstreamError(f"the upstream's {self._coding} body ended early")
        if self._brotli is not None and not self._brotli.is_finished():
            raise UpstreamError("the upstream's br body ended early")
