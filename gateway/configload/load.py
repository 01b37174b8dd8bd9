"""Configuration bytes or file -> `GatewayConfig`, or `ConfigError` with every problem.

Reads with `yamlstrict.source`, walks `schema.TOP_FIELDS`, then checks what no single key can
(ports that clash, workers without Redis, an audit path shared by workers, a search deadline
shorter than its timeout) and builds the frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from yaml.nodes import Node

from gateway.config import (
    AuditConfig,
    FetchConfig,
    GatewayConfig,
    ListenConfig,
    ProxyConfig,
    ResolverConfig,
    ReviewConfig,
    SearchConfig,
    ServerConfig,
    StateConfig,
    TLSConfig,
    XSearchConfig,
)
from gateway.configload.providers import AUTOMATIC_IDS, check_region_providers, check_url_address
from gateway.configload.schema import AUDIT, TOP_FIELDS
from gateway.configload.values import INSTANCE_PLACEHOLDER, STDOUT_PATH, ConfigWalker
from gateway.yamlstrict.issues import Issue, SourceError, sort_issues
from gateway.yamlstrict.source import compose, read_bounded
from gateway.yamlstrict.walk import Section, Walker

MAX_CONFIG_BYTES = 1 << 20
# The default of `audit.path` where the file sets none: a container image names its volume
# here, so that a configuration mounted read-only never has its audit log beside it.
AUDIT_PATH_ENV = "GATEWAY_AUDIT_PATH"


def default_audit_path(environ: Mapping[str, str] | None = None) -> str:
    """`audit.path` when the configuration (or its absence) sets none: $GATEWAY_AUDIT_PATH
    when set (a relative one is relative to the configuration's folder), else the built-in
    `audit/gateway-{instance}.jsonl`."""
    return (os.environ if environ is None else environ).get(AUDIT_PATH_ENV) or AUDIT.path


def builtin_config(environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """The configuration without a file: the defaults, with `default_audit_path` (relative to
    the working directory, as the built-in default always was)."""
    return GatewayConfig(audit=AuditConfig(path=default_audit_path(environ)))


class ConfigError(Exception):
    """A configuration that must not be used; `issues` holds every problem, sorted by
    position, and str() is their `FILE:LINE:COL: code: message` lines."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = sort_issues(list(issues))
        super().__init__("\n".join(str(i) for i in self.issues))


def load_config_file(
    path: str | os.PathLike[str], *, warnings: list[Issue] | None = None
) -> GatewayConfig:
    """Read and validate a configuration file; relative paths in it are resolved against
    the file's folder. Issues name the file as given; `source` is its absolute path, so that a
    reload finds it whatever the working directory. Raises ConfigError with every problem;
    the warnings of a usable file go to `warnings` when given."""
    source = os.fspath(path)
    try:
        data = read_bounded(path, max_bytes=MAX_CONFIG_BYTES)
    except SourceError as exc:
        raise ConfigError(exc.issues) from None
    absolute = os.path.abspath(source)
    config = load_config_bytes(
        data, source=source, base_dir=os.path.dirname(absolute), warnings=warnings
    )
    return dataclasses.replace(config, source=absolute)


def load_config_bytes(
    data: bytes, *, source: str, base_dir: str, warnings: list[Issue] | None = None
) -> GatewayConfig:
    """Validate one configuration document; paths resolve against `base_dir`. An empty
    document is the all-defaults configuration (its default audit path resolved too)."""
    try:
        document = compose(data, source=source, max_bytes=MAX_CONFIG_BYTES)
    except SourceError as exc:
        raise ConfigError(exc.issues) from None
    walker = ConfigWalker(document.source, document.issues, document.quiet)
    walker.base_dir = os.path.abspath(base_dir)
    top = walker.mapping(document.root, TOP_FIELDS, path="")
    _check_across(walker, top)
    if walker.has_errors:
        raise ConfigError([i for i in walker.issues if i.is_error])
    if warnings is not None:
        warnings.extend(sort_issues([i for i in walker.issues if not i.is_error]))
    return _build(top, source=source, base_dir=walker.base_dir, audit_path=default_audit_path())


def _first_node(section: Section, *keys: str) -> Node | None:
    for key in keys:
        if key in section.nodes:
            return section.nodes[key]
    return section.node if isinstance(section.node, Node) else None


def _check_across(w: Walker, top: Section) -> None:
    listen, audit, state, search = top["listen"], top["audit"], top["state"], top["search"]
    if (
        listen.valid("port", "proxy_port")
        and listen["proxy_port"] is not None
        and listen["proxy_port"] == listen["port"]
    ):
        w.error(
            _first_node(listen, "proxy_port"),
            "port_conflict",
            f"listen.proxy_port is the same as listen.port ({listen['port']}); give the forward "
            "proxy its own port",
        )
    if listen.valid("workers") and listen["workers"] > 1:
        if state.valid("redis") and state["redis"] is None:
            w.error(
                _first_node(listen, "workers"),
                "needs_redis",
                f"listen.workers is {listen['workers']}, but rate limits, caches and search ids "
                "are shared between workers only through state.redis; set state.redis or use "
                "1 worker",
            )
        path = audit["path"]
        if (
            audit.valid("path")
            and path not in (None, STDOUT_PATH)
            and (INSTANCE_PLACEHOLDER not in path)
        ):
            w.error(
                _first_node(audit, "path"),
                "shared_audit_path",
                f"audit.path has no {INSTANCE_PLACEHOLDER} but listen.workers is "
                f"{listen['workers']}; each worker writes its own chain, so put "
                f"{INSTANCE_PLACEHOLDER} in the file name",
            )
    x_search = top["x_search"]
    if x_search.valid("base_url", "allow_private"):
        check_url_address(w, x_search, "x_search")
    if search.valid("providers", "region_providers") and search["region_providers"]:
        providers = search["providers"]
        known = [p.id for p in providers] if providers is not None else list(AUTOMATIC_IDS)
        node = _first_node(search, "region_providers")
        check_region_providers(w, node, search["region_providers"], known)
    if search.valid("timeout", "deadline") and search["deadline"] < search["timeout"]:
        w.error(
            _first_node(search, "deadline", "timeout"),
            "inconsistent_values",
            f"search.deadline ({search['deadline']:g}) is less than search.timeout "
            f"({search['timeout']:g}); the deadline bounds the whole search, every provider "
            "request included",
        )


def _values(section: Section, cls: Callable[..., Any]) -> Any:
    return cls(**section.values)


def _build(top: Section, *, source: str, base_dir: str, audit_path: str) -> GatewayConfig:
    audit: dict[str, Any] = dict(top["audit"].values)
    if audit["path"] is None:
        audit["path"] = os.path.normpath(os.path.join(base_dir, audit_path))
    return GatewayConfig(
        listen=_values(top["listen"], ListenConfig),
        instance_id=top["instance_id"],
        policy=top["policy"],
        audit=AuditConfig(**audit),
        signing_key=top["signing_key"],
        retired_keys=tuple(top["retired_keys"]),
        dlp_fingerprint_key=top["dlp_fingerprint_key"],
        clients=tuple(top["clients"]),
        state=_values(top["state"], StateConfig),
        fetch=_values(top["fetch"], FetchConfig),
        search=_values(top["search"], SearchConfig),
        x_search=_values(top["x_search"], XSearchConfig),
        resolver=_values(top["resolver"], ResolverConfig),
        tls=_values(top["tls"], TLSConfig),
        proxy=_values(top["proxy"], ProxyConfig),
        server=_values(top["server"], ServerConfig),
        review=_values(top["review"], ReviewConfig),
        source=source,
    )
