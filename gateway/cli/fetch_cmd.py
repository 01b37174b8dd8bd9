"""`gateway fetch URL`: one WebFetch through the full path (policy, pinning, audit), no server.

The result JSON goes to standard output; the audit records to the configured audit file, which
standard error names. Every run appends to one chain of its own, the instance id with `-cli`
added (without a configuration: ./audit/gateway-HOST-cli.jsonl), so it never takes the lock of
a server's chain and `gateway audit verify audit/` sees one CLI chain, not one per run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from typing import Any

import orjson

from gateway.errors import GatewayError


def register(subparsers: Any) -> None:
    from gateway.cli.config_cmd import add_config_flag

    parser = subparsers.add_parser(
        "fetch",
        help="fetch one URL as WebFetch would, print the JSON",
        description="One WebFetch through the full path (policy, pinned connection, audit) "
        "without a server. The result JSON goes to standard output; the audit record to the "
        "configured audit file, which standard error names. Exit 1 on a refusal or error.",
    )
    parser.add_argument("url", metavar="URL", help="the http(s) URL to fetch")
    add_config_flag(parser)
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="policy file (default: the configuration's, else the embedded default)",
    )
    parser.add_argument(
        "--max-chars",
        type=int,
        metavar="N",
        help="characters of text returned (the policy's limits.default_max_chars by default)",
    )
    parser.add_argument(
        "--start-index",
        type=int,
        metavar="N",
        help="the character to start from, to page through a long text (default 0)",
    )
    parser.add_argument(
        "--extract-mode",
        choices=("auto", "markdown", "text", "raw"),
        help="how the body becomes text (default auto)",
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from gateway.configload import ConfigError, apply_overrides, builtin_config, load_config_file
    from gateway.runtime import PolicyValidationError, default_instance_id

    try:
        config = load_config_file(args.config) if args.config else builtin_config()
        config = apply_overrides(config, policy=args.policy)
    except (ConfigError, PolicyValidationError) as exc:
        print(f"gateway fetch: {exc}", file=sys.stderr)
        return 2
    instance = cli_instance_id(config.instance_id or default_instance_id())
    config = replace(config, instance_id=instance)
    if config.audit.path == "-":
        config = replace(config, audit=replace(config.audit, path="/dev/stderr"))
    body: dict[str, Any] = {"url": args.url}
    for key in ("max_chars", "start_index", "extract_mode"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    try:
        result = asyncio.run(_fetch(config, body))
    except (ConfigError, PolicyValidationError) as exc:
        print(f"gateway fetch: {exc}", file=sys.stderr)
        return 2
    except GatewayError as error:
        _print_json({"error": error.to_dict()})
        return 1
    _print_json(result)
    return 0


def cli_instance_id(instance_id: str) -> str:
    """The chain `gateway fetch` appends to: the configured (or default) instance id with
    `-cli`, so runs share one chain and never clash with a server's lock on its own."""
    return f"{instance_id}-cli"


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


async def _fetch(config: Any, body: dict[str, Any]) -> dict[str, Any]:
    from gateway.runtime import Services
    from gateway.tools.context import CallContext

    services = Services(config)
    services.open()
    try:
        ctx = CallContext(policy=services.state.default_policy)
        result: dict[str, Any] = await services.webfetch.call(ctx, body)
        return result
    finally:
        await services.close()
        # The record never goes to standard output (that is the result's); say where it went.
        where = "standard error" if services.audit.path == "/dev/stderr" else services.audit.path
        print(f"gateway fetch: audit records in {where}", file=sys.stderr)
