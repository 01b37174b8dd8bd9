"""`gateway keys generate DIR`: an Ed25519 signing key pair for envelopes and checkpoints.

Writes DIR/signing.key (PKCS8 PEM, mode 0600) and DIR/signing.pub (SPKI PEM), prints the key id
and both paths. Exit 1, changing nothing, when either file already exists or cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gateway.provenance.dsse import DSSEError, generate_keypair


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("keys", help="generate signing keys", description=__doc__)
    sub = parser.add_subparsers(dest="keys_command", metavar="SUBCOMMAND")
    sub.required = True
    generate = sub.add_parser(
        "generate", help="write DIR/signing.key and DIR/signing.pub (refuses to overwrite)"
    )
    generate.add_argument("directory", metavar="DIR", help="the folder for the two files")
    generate.set_defaults(run=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    try:
        private_path, public_path, keyid = generate_keypair(args.directory)
    except DSSEError as exc:
        print(f"gateway keys generate: {exc}", file=sys.stderr)
        return 1
    print(f"keyid: {keyid}")
    print(f"private key: {private_path} (keep it secret; mode 0600)")
    print(f"public key: {public_path}")
    return 0
