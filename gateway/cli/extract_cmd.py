"""`gateway extract FILE... [--mode auto|text] [--content-type T] [--json]`: extraction alone.

Offline and local: each saved page (a `.gz` file is decompressed first, `-` reads standard
input) goes through the same extractor WebFetch uses, without fetching, policy or audit.
The type is `--content-type`, else guessed from the file name, else HTML when the bytes look
like it, else plain text. Without `--json` the text of each file is printed (after a
`==> FILE <==` line when there are several); with `--json`, one JSON object per file and
line: `file`, `title`, `description`, `text`. A file that is not text (its type is not one
WebFetch extracts, such as image/png or application/pdf, or its bytes are binary: NUL bytes or
mostly control characters) is refused, never dumped. Exit 1 when a file cannot be read, is
not text or cannot be extracted (the others are still printed).
"""

from __future__ import annotations

import argparse
import fnmatch
import mimetypes
import sys
import zlib
from typing import Any

import orjson

from gateway.cli.readfile import ReadError, read_capped
from gateway.extract import Document, ExtractError, extract
from gateway.extract.charset import looks_like_html

MAX_PAGE_BYTES = 32 << 20
# The media types WebFetch turns into text (the default `limits.content_types`); anything else
# has no text to extract, whatever its bytes.
TEXT_TYPES = ("text/*", "application/json", "application/*+json", "application/xml",
              "application/*+xml", "application/xhtml+xml")  # fmt: skip
SNIFF_BYTES = 8192
# Past this share of control bytes (other than tab, newline, carriage return, form feed and
# escape) in the first SNIFF_BYTES, a file is binary, whatever its name says.
MAX_CONTROL_SHARE = 0.1
_TEXT_CONTROLS = frozenset(b"\t\n\r\f\x1b")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "extract", help="extract saved pages offline, as WebFetch would", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="saved pages (.gz read decompressed; - is stdin)"
    )
    parser.add_argument(
        "--mode",
        choices=("auto", "text"),
        default="auto",
        help="auto: Markdown of the main content (the WebFetch default); text: plain text",
    )
    parser.add_argument("--content-type", metavar="T", help="the pages' Content-Type")
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    parser.set_defaults(run=run_extract)


def extract_page(body: bytes, content_type: str, mode: str = "auto") -> Document:
    """What WebFetch's extraction makes of one page (the function the benchmarks score)."""
    return extract(body, content_type, mode)


def run_extract(args: argparse.Namespace) -> int:
    status = 0
    several = len(args.files) > 1
    for number, name in enumerate(args.files):
        try:
            body = _read(name)
            content_type = args.content_type or guess_content_type(name, body)
            problem = not_text(body, content_type)
            if problem is not None:
                raise ExtractError(f"not text ({problem}); nothing to extract")
            document = extract_page(body, content_type, args.mode)
        except ReadError as exc:
            print(f"gateway extract: {exc}", file=sys.stderr)
            status = 1
            continue
        except ExtractError as exc:
            print(f"gateway extract: {name}: {exc}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            record = {
                "file": name,
                "title": document.title,
                "description": document.description,
                "text": document.text,
            }
            sys.stdout.write(orjson.dumps(record).decode() + "\n")
            continue
        if several:
            sys.stdout.write(("\n" if number else "") + f"==> {name} <==\n")
        sys.stdout.write(document.text + ("\n" if document.text else ""))
    return status


def not_text(body: bytes, content_type: str) -> str | None:
    """Why `body` has no text to extract (its media type, or binary bytes), or None."""
    media = content_type.split(";", 1)[0].strip().lower()
    if not any(fnmatch.fnmatchcase(media, pattern) for pattern in TEXT_TYPES):
        return f"the content type is {media[:80] or 'empty'}"
    head = body[:SNIFF_BYTES]
    if head.startswith(_UTF16_BOMS):
        return None  # UTF-16 text is full of NUL bytes
    if b"\0" in head:
        return "it holds NUL bytes"
    controls = sum(1 for byte in head if byte < 0x20 and byte not in _TEXT_CONTROLS)
    if head and controls / len(head) > MAX_CONTROL_SHARE:
        return f"{controls} of its first {len(head)} bytes are control characters"
    return None


def guess_content_type(name: str, body: bytes) -> str:
    """The type a file's name says (without a `.gz`), else HTML by its look, else text."""
    guessed, _ = mimetypes.guess_type(name.removesuffix(".gz"), strict=False)
    if guessed:
        return guessed
    return "text/html" if looks_like_html(body[:1024]) else "text/plain"


def _read(name: str) -> bytes:
    data = read_capped(name, MAX_PAGE_BYTES)
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, name)
        if len(data) > MAX_PAGE_BYTES:
            raise ReadError(f"{name} is larger than {MAX_PAGE_BYTES >> 20} MiB once decompressed")
    return data


def _gunzip(data: bytes, name: str) -> bytes:
    """Decompressed, at most MAX_PAGE_BYTES + 1 bytes of it (a gzip bomb stops there)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return inflater.decompress(data, MAX_PAGE_BYTES + 1)
    except zlib.error as exc:
        raise ReadError(f"{name}: broken gzip data: {exc}") from exc

