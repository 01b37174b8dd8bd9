"""`gateway serve`: load the configuration, refuse unsafe binds, run until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from typing import Any

from gateway.config import GatewayConfig

LOG_LEVELS = ("debug", "info", "warning", "error")


def register(subparsers: Any) -> None:
    from gateway.cli.config_cmd import add_config_flag

    parser = subparsers.add_parser(
        "serve",
        help="run the gateway (HTTP API, MCP, forward proxy)",
        description="Run the gateway until SIGTERM (which drains). Flags win over the "
        "configuration file; the operator log is JSON lines on standard error.",
    )
    add_config_flag(parser)
    parser.add_argument("--policy", metavar="FILE", help="policy file (default: embedded default)")
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="API port (default 8080)")
    parser.add_argument("--proxy-port", type=int, help="forward-proxy port (default: off)")
    add_log_level_flag(parser)
    parser.set_defaults(run=_run)


def add_log_level_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="the least severe operator log lines written to standard error (default info)",
    )


def log_level(args: argparse.Namespace) -> int:
    import logging

    return int(getattr(logging, str(getattr(args, "log_level", "info")).upper()))


def build_config(args: argparse.Namespace) -> GatewayConfig:
    """The config file (or the defaults) with the command-line flags applied on top."""
    from gateway.configload import (
        apply_overrides,
        builtin_config,
        check_bind_safety,
        load_config_file,
    )

    config = load_config_file(args.config) if args.config else builtin_config()
    config = apply_overrides(
        config,
        policy=getattr(args, "policy", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        proxy_port=getattr(args, "proxy_port", None),
    )
    check_bind_safety(config)
    return config


def _run(args: argparse.Namespace) -> int:
    from gateway.configload import ConfigError
    from gateway.errors import GatewayError
    from gateway.oplog import configure_logging
    from gateway.reload import fingerprint_config_source
    from gateway.runtime import PolicyValidationError
    from gateway.server.serve import serve

    configure_logging(log_level(args))
    try:
        config_seen = fingerprint_config_source(args.config)  # before reading it
        config = build_config(args)
        if config.listen.workers > 1:
            from gateway.server.workers import run_workers

            return run_workers(config, functools.partial(build_config, _flags(args)))
        return asyncio.run(
            serve(config, reload_config=lambda: build_config(args), config_seen=config_seen)
        )
    except (ConfigError, PolicyValidationError) as exc:
        print(f"gateway serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gateway serve: {exc}", file=sys.stderr)
        return 1
    except GatewayError as exc:  # the audit log cannot be opened: nothing is served
        print(f"gateway serve: {exc.message}", file=sys.stderr)
        return 1


def _flags(args: argparse.Namespace) -> argparse.Namespace:
    """Only the flags `build_config` reads: what a spawned worker gets to rebuild its config."""
    names = ("config", "policy", "host", "port", "proxy_port", "log_level")
    return argparse.Namespace(**{name: getattr(args, name, None) for name in names})
