"""`resolver.hosts`: the static table of host names to IP addresses, checked as strictly as
the names and addresses the gateway would otherwise resolve.
"""

from __future__ import annotations

import ipaddress
from types import MappingProxyType
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode

from gateway.policy.urls import InvalidURLError, parse_host
from gateway.yamlstrict.issues import Severity
from gateway.yamlstrict.source import STR_TAG
from gateway.yamlstrict.walk import Walker


def read_static_hosts(w: Walker, node: Node, path: str) -> Any:
    if not isinstance(node, MappingNode):
        w.wrong_type(node, path, "a mapping of host name to a list of IP addresses")
        return None
    table: dict[str, tuple[str, ...]] = {}
    first_at: dict[str, str] = {}
    ok = True
    for key, value in node.value:
        if not isinstance(key, ScalarNode) or w.is_reported(key):
            ok = False
            continue
        host = _static_host_name(w, key, path)
        if host is not None and host in first_at:
            if first_at[host] != key.value:  # an exact repeat is the composer's duplicate_key
                w.error(
                    key,
                    "duplicate_key",
                    f"{path}: {key.value!r} is the same host as {first_at[host]!r}; merge them",
                )
            host = None
        elif host is not None:
            first_at[host] = key.value
        addresses = w.unique_items(
            value,
            f"{path}.{key.value}",
            lambda item, where: _address(w, item, where),
            duplicates=Severity.ERROR,
            shown=lambda address, _: address,
            at_least_one="IP address",
        )
        if host is None or addresses is None:
            ok = False
            continue
        table[host] = addresses
    return MappingProxyType(table) if ok else None


def _static_host_name(w: Walker, key: ScalarNode, path: str) -> str | None:
    if key.tag != STR_TAG:
        w.error(key, "bad_host", f"{path}: {key.value!r} is not a host name")
        return None
    try:
        host, ip = parse_host(key.value)
    except InvalidURLError as exc:
        w.error(key, "bad_host", f"{path}: {exc}")
        return None
    if ip is not None:
        w.error(
            key,
            "bad_host",
            f"{path}: {key.value!r} is an IP address, which is never resolved; list host names",
        )
        return None
    return host


def _address(w: Walker, node: Node, where: str) -> str | None:
    """An IP address in its compressed form (zone identifiers refused)."""
    text = w.string(node, where)
    if text is None:
        return None
    try:
        ip = ipaddress.ip_address(text)
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            raise ValueError("zone identifiers are not supported")
    except ValueError:
        w.error(node, "bad_address", f"{where}: {text[:70]!r} is not an IP address")
        return None
    return ip.compressed
