"""What serving does with a loaded configuration: command-line flags that win over the file,
the non-loopback bind rule, what a reload may change live and which files it watches.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket

from gateway.config import GatewayConfig
from gateway.configload.load import ConfigError
from gateway.configload.values import file_problem, listen_host
from gateway.yamlstrict.issues import Issue

COMMAND_LINE = "<command line>"
LOOPBACK_NAMES = frozenset({"localhost"})
# Keys whose changes a reload applies live (docs/design.md, reloads); anything else needs a restart.
LIVE_KEYS = frozenset({"policy", "clients"})


def apply_overrides(
    config: GatewayConfig,
    *,
    policy: str | None = None,
    host: str | None = None,
    port: int | None = None,
    proxy_port: int | None = None,
) -> GatewayConfig:
    """The command-line flags, which win over the file. A relative `--policy` is relative to
    the working directory (where the command was typed). Raises ConfigError."""
    issues: list[Issue] = []

    def refuse(code: str, message: str) -> None:
        issues.append(Issue(COMMAND_LINE, 1, 1, code, message))

    listen = config.listen
    if host is not None:
        normalised, problem = listen_host(host)
        if problem:
            refuse("bad_value", f"--host: {problem}")
        else:
            listen = dataclasses.replace(listen, host=normalised)
    for flag, value in (("--port", port), ("--proxy-port", proxy_port)):
        if value is not None and not (
            isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535
        ):
            refuse("out_of_range", f"{flag} must be a port from 1 to 65535, got {value!r}")
    if not issues:
        if port is not None:
            listen = dataclasses.replace(listen, port=port)
        if proxy_port is not None:
            listen = dataclasses.replace(listen, proxy_port=proxy_port)
        if listen.proxy_port is not None and listen.proxy_port == listen.port:
            refuse(
                "port_conflict",
                f"the proxy port and the API port are both {listen.port}; give them different "
                "ports",
            )
    resolved_policy = config.policy
    if policy is not None:
        resolved_policy = os.path.abspath(policy)
        problem = file_problem(resolved_policy)
        if problem:
            refuse("missing_file", f"--policy: {problem}")
    if issues:
        raise ConfigError(issues)
    return dataclasses.replace(config, listen=listen, policy=resolved_policy)


def default_instance_id() -> str:
    """`instance_id` when the configuration sets none: the host name (each worker adds its
    slot, `-w0`, `-w1`…). Stable across restarts, so a restarted gateway appends to its own
    chain file instead of starting one under a new name; two gateways sharing an audit folder
    on one host need an instance_id each (the chain's lock refuses the second)."""
    name = "".join(
        c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in socket.gethostname()
    )
    return name[:48] or "gateway"


def check_bind_safety(config: GatewayConfig) -> None:
    """Refuse a non-loopback listen address (wildcards included) without client tokens: the
    gateway would be an open proxy into whatever its network reaches."""
    if config.clients or is_loopback_host(config.listen.host):
        return
    ports = f"port {config.listen.port}"
    if config.listen.proxy_port is not None:
        ports += f" and proxy port {config.listen.proxy_port}"
    raise ConfigError(
        [
            Issue(
                config.source or COMMAND_LINE,
                1,
                1,
                "unsafe_bind",
                f"refusing to listen on {config.listen.host} ({ports}) without client tokens: "
                "anyone who can reach it could use the gateway. Add at least one entry under "
                "clients (id and token_sha256) in the configuration, or listen on 127.0.0.1",
            )
        ]
    )


def is_loopback_host(host: str) -> bool:
    """True for `localhost` and loopback literals (127.0.0.0/8, ::1, their IPv4-mapped form);
    any other name could resolve anywhere, and wildcards bind every interface."""
    text = host.strip().rstrip(".").lower()
    if text in LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(text.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def restart_needed(old: GatewayConfig, new: GatewayConfig) -> tuple[str, ...]:
    """The keys (`listen.port`, `search`, …) whose change a reload cannot apply live; empty
    when only policies, clients, tokens and limits changed."""
    changed: list[str] = []
    for item in dataclasses.fields(GatewayConfig):
        name = item.name
        if name in LIVE_KEYS or name == "source":
            continue
        before, after = getattr(old, name), getattr(new, name)
        if before == after:
            continue
        if dataclasses.is_dataclass(before) and dataclasses.is_dataclass(after):
            for inner in dataclasses.fields(before):
                if getattr(before, inner.name) != getattr(after, inner.name):
                    changed.append(f"{name}.{inner.name}")
        else:
            changed.append(name)
    return tuple(changed)


def watched_files(config: GatewayConfig) -> tuple[str, ...]:
    """The files whose change triggers a reload: the configuration and every policy it names."""
    paths = [config.source, config.policy, *(c.policy for c in config.clients)]
    return tuple(dict.fromkeys(p for p in paths if p is not None))
