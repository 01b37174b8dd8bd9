"""The gateway configuration: immutable values with the documented defaults.

Every key and its default is listed in examples/config/gateway.yaml.

`gateway/configload/` reads the YAML file into these, as strictly as a policy file; this
module only describes the shape, so every layer can depend on it without loading YAML.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class ListenConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    proxy_port: int | None = None
    workers: int = 1


@dataclass(frozen=True, slots=True)
class AuditConfig:
    path: str = "audit/gateway-{instance}.jsonl"
    fsync: bool = False
    rotate_bytes: int = 104_857_600
    checkpoint_interval: float = 300.0
    checkpoints_path: str | None = None


@dataclass(frozen=True, slots=True)
class ClientLimits:
    requests_per_minute: int | None = None
    concurrent: int | None = None


@dataclass(frozen=True, slots=True)
class ClientConfig:
    id: str
    token_sha256: str
    policy: str | None = None  # a policy file; None = the gateway's policy
    limits: ClientLimits = ClientLimits()
    role: str = "agent"  # agent | reviewer: a reviewer's token opens /review/ and nothing else


@dataclass(frozen=True, slots=True)
class StateConfig:
    redis: str | None = None
    on_failure: str = "closed"  # closed | open


@dataclass(frozen=True, slots=True)
class FetchConfig:
    cache_ttl: float = 0.0
    user_agent: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    id: str
    kind: str
    base_url: str | None = None
    api_key_env: str | None = None
    allow_private: bool = False
    secret_id_env: str | None = None  # tencent_wsa: a key pair's id and secret key
    secret_key_env: str | None = None
    model: str | None = None  # openai, anthropic: the model that searches
    retries: int = 1  # 0-3, of a timeout, network or server error, or a short rate limit
    backoff_ms: int | None = None  # 1-2000 ms before a retry; None = the gateway's default


@dataclass(frozen=True, slots=True)
class SearchConfig:
    # None: the automatic chain (every keyed provider whose key is set, then the keyless
    # engines: configload.providers.effective_providers); a list is used as written.
    providers: tuple[ProviderConfig, ...] | None = None
    # Host pattern -> rank weight for fusing and ranking results ({".python.org": 1.3}).
    weights: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # Country -> provider ids asked first for a query with that region ({"cn": ("baidu",)}).
    region_providers: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    prefer: str | None = None  # "model_native": those first in the automatic chain
    cache_ttl: float = 600.0
    timeout: float = 15.0
    deadline: float = 20.0
    id_ttl: float = 3600.0


@dataclass(frozen=True, slots=True)
class XSearchConfig:
    kind: str = "xai"
    api_key_env: str = "XAI_API_KEY"
    model: str = "grok-4.3"
    timeout: float = 60.0
    base_url: str = "https://api.x.ai"
    allow_private: bool = False


@dataclass(frozen=True, slots=True)
class ResolverConfig:
    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    system_hosts: bool = False  # also answer names from /etc/hosts (addresses still checked)


@dataclass(frozen=True, slots=True)
class TLSConfig:
    ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    connect_ports: tuple[int, ...] = (443,)
    require_tls: bool = True
    tunnel_idle_timeout: float = 300.0
    tunnel_max_duration: float | None = None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    header_timeout: float = 10.0
    keepalive_timeout: float = 75.0
    max_connections_per_ip: int = 256
    max_body_bytes: int = 1_048_576
    shutdown_grace: float = 30.0
    metrics_need_token: bool = False


@dataclass(frozen=True, slots=True)
class ReviewConfig:
    enabled: bool = False  # the reviewers' read-only audit page at /review/


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    listen: ListenConfig = ListenConfig()
    instance_id: str | None = None
    policy: str | None = None  # a policy file; None = the embedded default
    audit: AuditConfig = AuditConfig()
    signing_key: str | None = None
    retired_keys: tuple[str, ...] = ()
    # The HMAC key of DLP fingerprints in audit records (a file); None: random per start.
    dlp_fingerprint_key: str | None = None
    clients: tuple[ClientConfig, ...] = ()
    state: StateConfig = StateConfig()
    fetch: FetchConfig = FetchConfig()
    search: SearchConfig = SearchConfig()
    x_search: XSearchConfig = XSearchConfig()
    resolver: ResolverConfig = ResolverConfig()
    tls: TLSConfig = TLSConfig()
    proxy: ProxyConfig = ProxyConfig()
    server: ServerConfig = ServerConfig()
    review: ReviewConfig = ReviewConfig()
    source: str | None = None  # the file it was read from, for reload and messages
