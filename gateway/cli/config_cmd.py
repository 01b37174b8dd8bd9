"""`gateway config check [FILE]`: a configuration and the policies it names, checked as
`gateway serve` would load them. One `FILE:LINE:COL: code: message` line per problem (warnings
written `warning[code]`), then `FILE: ok (…)` per usable file. Exit 0 when `serve` would start
with it, 1 on any error, 2 when no file is given. FILE defaults to $GATEWAY_CONFIG.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

CONFIG_ENV = "GATEWAY_CONFIG"


def config_from_env() -> str | None:
    """The configuration file named by $GATEWAY_CONFIG (unset or empty: none)."""
    return os.environ.get(CONFIG_ENV) or None


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """`--config FILE`, defaulting to $GATEWAY_CONFIG, for every command that reads one."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=config_from_env(),
        help=f"gateway configuration (YAML); default ${CONFIG_ENV}, else the built-in defaults",
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config", help="check a gateway configuration", description=__doc__
    )
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    sub.required = True
    check = sub.add_parser(
        "check",
        help="validate a configuration and the policies it names, printing every problem",
        description=__doc__,
    )
    check.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        default=config_from_env(),
        help=f"the configuration file (default ${CONFIG_ENV})",
    )
    check.set_defaults(run=run_check)


def run_check(args: argparse.Namespace) -> int:
    from gateway.configload import check_config

    if not args.file:
        print(f"gateway config check: give a FILE or set {CONFIG_ENV}", file=sys.stderr)
        return 2
    result = check_config(args.file)
    for line in result.lines():
        print(line)
    return 0 if result.valid else 1
