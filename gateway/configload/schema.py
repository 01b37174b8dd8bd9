"""The configuration file's keys: each section's fields, defaults and readers.

examples/config/gateway.yaml lists every key with its default.

Defaults come from the `gateway.config` dataclasses, so the file and the code never disagree.
"""

from __future__ import annotations

from types import MappingProxyType

from gateway.config import (
    AuditConfig,
    FetchConfig,
    ListenConfig,
    ProxyConfig,
    ResolverConfig,
    ReviewConfig,
    SearchConfig,
    ServerConfig,
    StateConfig,
    XSearchConfig,
)
from gateway.configload.clients import read_clients
from gateway.configload.providers import (
    PREFER_CHOICES,
    X_SEARCH_KINDS,
    read_providers,
    read_region_providers,
    read_search_timeout,
    read_weights,
)
from gateway.configload.resolver import read_static_hosts
from gateway.configload.values import (
    path_field,
    path_list_field,
    read_env_name,
    read_http_url,
    read_id,
    read_listen_host,
    read_path,
    read_redis_url,
    seconds_field,
)
from gateway.yamlstrict.issues import Severity
from gateway.yamlstrict.walk import (
    Field,
    boolean_field,
    choice_field,
    integer_field,
    port_list_field,
    section_field,
    text_field,
)

LISTEN, AUDIT, SEARCH, XSEARCH = ListenConfig(), AuditConfig(), SearchConfig(), XSearchConfig()
_PROXY, _SERVER = ProxyConfig(), ServerConfig()
_ONE_LINE = " (no line breaks or controls)"


def _port_field(default: int | None) -> Field:
    return integer_field(default, minimum=1, maximum=65535)


TOP_FIELDS: dict[str, Field] = {
    "listen": section_field(
        {
            "host": Field(read_listen_host, LISTEN.host),
            "port": _port_field(LISTEN.port),
            "proxy_port": _port_field(LISTEN.proxy_port),
            "workers": integer_field(LISTEN.workers, minimum=1, maximum=1024),
        }
    ),
    "instance_id": Field(read_id, None),
    "policy": path_field(),
    "audit": section_field(
        {
            "path": Field(
                lambda w, n, p: read_path(
                    w, n, p, must_exist=False, allow_stdout=True, template=True
                ),
                None,  # the default is resolved when building, like a value written out
            ),
            "fsync": boolean_field(AUDIT.fsync),
            "rotate_bytes": integer_field(AUDIT.rotate_bytes, minimum=1024, maximum=None),
            "checkpoint_interval": seconds_field(AUDIT.checkpoint_interval),
            "checkpoints_path": path_field(must_exist=False, template=True),
        }
    ),
    "signing_key": path_field(),
    "retired_keys": path_list_field(),
    "dlp_fingerprint_key": path_field(),
    "clients": Field(read_clients, ()),
    "state": section_field(
        {
            "redis": Field(read_redis_url, None),
            "on_failure": choice_field(StateConfig().on_failure, ("closed", "open")),
        }
    ),
    "fetch": section_field(
        {
            "cache_ttl": seconds_field(FetchConfig().cache_ttl, allow_zero=True),
            "user_agent": text_field(None, max_length=256, note=_ONE_LINE),
        }
    ),
    "search": section_field(
        {
            "providers": Field(read_providers, SEARCH.providers),
            "weights": Field(read_weights, SEARCH.weights),
            "region_providers": Field(read_region_providers, SEARCH.region_providers),
            "prefer": choice_field(SEARCH.prefer, PREFER_CHOICES),
            "cache_ttl": seconds_field(SEARCH.cache_ttl, allow_zero=True),
            "timeout": Field(read_search_timeout, SEARCH.timeout),
            "deadline": seconds_field(SEARCH.deadline),
            "id_ttl": seconds_field(SEARCH.id_ttl),
        }
    ),
    "x_search": section_field(
        {
            "kind": choice_field(XSEARCH.kind, X_SEARCH_KINDS),
            "api_key_env": Field(read_env_name, XSEARCH.api_key_env),
            "model": text_field(XSEARCH.model, max_length=128, note=_ONE_LINE),
            "timeout": seconds_field(XSEARCH.timeout),
            "base_url": Field(read_http_url, XSEARCH.base_url),
            "allow_private": boolean_field(XSEARCH.allow_private),
        }
    ),
    "resolver": section_field(
        {
            "hosts": Field(read_static_hosts, MappingProxyType({})),
            "system_hosts": boolean_field(ResolverConfig().system_hosts),
        }
    ),
    "tls": section_field({"ca_file": path_field()}),
    "proxy": section_field(
        {
            "connect_ports": port_list_field(_PROXY.connect_ports, duplicates=Severity.ERROR),
            "require_tls": boolean_field(_PROXY.require_tls),
            "tunnel_idle_timeout": seconds_field(_PROXY.tunnel_idle_timeout),
            "tunnel_max_duration": seconds_field(_PROXY.tunnel_max_duration),
        }
    ),
    "server": section_field(
        {
            "header_timeout": seconds_field(_SERVER.header_timeout),
            "keepalive_timeout": seconds_field(_SERVER.keepalive_timeout),
            "max_connections_per_ip": integer_field(
                _SERVER.max_connections_per_ip, minimum=1, maximum=1_000_000
            ),
            "max_body_bytes": integer_field(_SERVER.max_body_bytes, minimum=1, maximum=1 << 30),
            "shutdown_grace": seconds_field(_SERVER.shutdown_grace),
            "metrics_need_token": boolean_field(_SERVER.metrics_need_token),
        }
    ),
    "review": section_field({"enabled": boolean_field(ReviewConfig().enabled)}),
}
