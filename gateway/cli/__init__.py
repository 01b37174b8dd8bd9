"""The `gateway` command: argparse adapters that translate arguments into calls and results into
exit codes. Each command group lives in its own module with a `register(subparsers)` function.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gateway import __version__

# Command-group modules, imported lazily so `gateway policy check` never loads aiohttp.
_GROUPS = (
    "serve",
    "fetch",
    "policy",
    "audit",
    "keys",
    "verify",
    "init",
    "config",
    "token",
    "completion",
    "extract",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="An egress gateway for AI agents")
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for group in _GROUPS:
        module = importlib.import_module(f"gateway.cli.{group}_cmd")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    finally:
        sys.stdout.flush()
