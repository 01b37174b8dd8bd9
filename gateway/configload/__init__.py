"""The gateway configuration file -> `GatewayConfig`, or every problem at its line.

Owns the configuration schema and its checks, paths resolved against the file's own folder,
command-line overrides, the non-loopback bind rule and what a reload may change live. The YAML
hazards are `yamlstrict.source`'s. Referenced files are only checked to exist: policies are
loaded and validated elsewhere (`check` loads them as serve would). Never touches the network;
never echoes a secret-shaped value.

Modules: `load` (entry points, checks across sections, building), `schema` (the keys),
`values`, `clients`, `providers`, `resolver` (their readers), `serving` (overrides, bind rule,
reload), `check` (`gateway config check`: the file, its policies, the environment).
"""

from __future__ import annotations

from gateway.configload.check import CheckResult, check_config
from gateway.configload.clients import client_entry, new_token
from gateway.configload.load import (
    AUDIT_PATH_ENV,
    MAX_CONFIG_BYTES,
    ConfigError,
    builtin_config,
    default_audit_path,
    load_config_bytes,
    load_config_file,
)
from gateway.configload.providers import (
    BASE_URL_KINDS,
    KEY_PAIR_KINDS,
    KEYED_KINDS,
    PROVIDER_KINDS,
)
from gateway.configload.serving import (
    apply_overrides,
    check_bind_safety,
    is_loopback_host,
    restart_needed,
    watched_files,
)
from gateway.configload.values import is_valid_id

__all__ = [
    "AUDIT_PATH_ENV",
    "BASE_URL_KINDS",
    "CheckResult",
    "KEYED_KINDS",
    "KEY_PAIR_KINDS",
    "MAX_CONFIG_BYTES",
    "PROVIDER_KINDS",
    "ConfigError",
    "apply_overrides",
    "builtin_config",
    "check_bind_safety",
    "check_config",
    "client_entry",
    "default_audit_path",
    "is_loopback_host",
    "is_valid_id",
    "load_config_bytes",
    "load_config_file",
    "new_token",
    "restart_needed",
    "watched_files",
]
