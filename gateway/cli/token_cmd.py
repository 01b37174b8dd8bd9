"""`gateway token new CLIENT [--role R] [--policy FILE]`: a fresh bearer token for a client,
printed once, and the line that configures it (only the token's SHA-256 is ever stored). The
role is one `clients[].role` accepts (agent, the default; reviewer: the review page only).
Exit 2 for an invalid id or role.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("token", help="make client tokens", description=__doc__)
    sub = parser.add_subparsers(dest="token_command", metavar="SUBCOMMAND")
    sub.required = True
    new = sub.add_parser(
        "new", help="print a fresh token and its clients entry", description=__doc__
    )
    new.add_argument(
        "client", metavar="CLIENT", help="the client's id (letters, digits, '.', '_', '-')"
    )
    new.add_argument(
        "--policy", metavar="FILE", help="the client's policy file, written into the entry"
    )
    new.add_argument(
        "--role",
        default="agent",
        metavar="R",
        help="the client's role, as clients[].role takes it (default agent; reviewer: its "
        "token opens the review page and nothing else)",
    )
    new.set_defaults(run=run_new)


def run_new(args: argparse.Namespace) -> int:
    from gateway.configload import client_entry, is_valid_id, new_token
    from gateway.configload.clients import CLIENT_ROLES

    if not is_valid_id(args.client):
        print(
            f"gateway token new: {args.client[:70]!r} is not a client id: use 1 to 64 letters, "
            "digits, '.', '_' or '-'",
            file=sys.stderr,
        )
        return 2
    if args.role not in CLIENT_ROLES:
        print(
            f"gateway token new: {args.role[:40]!r} is not a role the configuration accepts "
            f"(clients[].role: {', '.join(CLIENT_ROLES)})",
            file=sys.stderr,
        )
        return 2
    token, digest = new_token()
    print(f"token: {token}")
    print("  (shown once: the client sends it as 'Authorization: Bearer <token>'; keep it secret)")
    print("add to the clients list of the configuration:")
    print(f"  {client_entry(args.client, digest, args.policy, args.role)}")
    return 0
