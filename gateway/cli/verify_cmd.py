"""`gateway verify RESPONSE.json --key PUB [--key PUB…]`: check a tool response's signature.

Accepts an HTTP response body, an MCP tool result or its `structuredContent` (`-` reads
standard input). Prints `valid: keyid ID[, ID]` and exits 0 when `dsse` is signed by one of
the keys, `envelope` is exactly the signed payload and the wrapped content matches the
envelope's digest; otherwise prints `INVALID: REASON` and exits 1. Exit 2: a key or the
response file cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from gateway.cli.readfile import ReadError, read_capped
from gateway.provenance.dsse import DSSEError, load_public_key
from gateway.provenance.envelope import signed_body, verify_response

MAX_RESPONSE_BYTES = 64 << 20


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify", help="verify a tool response's DSSE signature", description=__doc__
    )
    parser.add_argument(
        "response",
        metavar="RESPONSE.json",
        help="an HTTP response body, an MCP tool result or its structuredContent; - for stdin",
    )
    parser.add_argument(
        "--key",
        dest="keys",
        action="append",
        required=True,
        metavar="PUB",
        help="a trusted public key (PEM); repeat for several",
    )
    parser.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    try:
        keys = [load_public_key(path) for path in args.keys]
    except DSSEError as exc:
        print(f"gateway verify: {exc}", file=sys.stderr)
        return 2
    try:
        document = orjson.loads(_read(args.response))
    except orjson.JSONDecodeError as exc:
        return _invalid(f"{args.response} is not JSON ({exc})")
    except ReadError as exc:
        print(f"gateway verify: {exc}", file=sys.stderr)
        return 2
    try:
        verified = verify_response(signed_body(document), keys)
    except DSSEError as exc:
        return _invalid(str(exc))
    print(f"valid: keyid {', '.join(verified.keyids)}")
    return 0


def _read(path: str) -> bytes:
    return read_capped(path, MAX_RESPONSE_BYTES)


def _invalid(reason: str) -> int:
    print(f"INVALID: {reason}")
    return 1
