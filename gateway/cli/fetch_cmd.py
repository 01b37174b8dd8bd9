"""`gateway fetch`: not yet written."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("fetch", help="(not yet available)")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    print("gateway fetch: not yet available")
    return 2
