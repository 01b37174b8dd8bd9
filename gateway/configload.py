"""The gateway configuration file (CONTRACT 4) -> `GatewayConfig`, or every problem at its line.

Owns the configuration schema and its checks, paths resolved against the file's own folder,
command-line overrides, the non-loopback bind rule and what a reload may change live. The YAML
hazards are `policy.yamlsource`'s. Referenced files are only checked to exist: policies are
loaded and validated elsewhere. Never touches the network; never echoes a secret-shaped value.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

import yarl
from yaml.nodes import MappingNode, Node, ScalarNode

from gateway.config import (
    AuditConfig,
    ClientConfig,
    ClientLimits,
    FetchConfig,
    GatewayConfig,
    ListenConfig,
    ProviderConfig,
    ProxyConfig,
    ResolverConfig,
    SearchConfig,
    ServerConfig,
    StateConfig,
    TLSConfig,
    XSearchConfig,
)
from gateway.policy.addresses import AddressKind, classify_address
from gateway.policy.hosts import HostError, normalize_name
from gateway.policy.urls import InvalidURLError, parse_host, parse_url
from gateway.policy.yamlsource import (
    FLOAT_TAG,
    STR_TAG,
    Field,
    Issue,
    Section,
    SourceError,
    Walker,
    boolean_field,
    choice_field,
    compose,
    is_null,
    read_bounded,
    section_field,
    sort_issues,
)

MAX_CONFIG_BYTES = 1 << 20
MAX_SECONDS = 30 * 86_400.0  # no duration in the file needs more than 30 days
STDOUT_PATH = "-"
INSTANCE_PLACEHOLDER = "{instance}"
COMMAND_LINE = "<command line>"

# Provider kinds and what each needs (tests check this against search.providers.ADAPTERS; the
# table is repeated here so that reading a configuration never imports the search stack).
PROVIDER_KINDS = ("duckduckgo", "bing", "brave", "tavily", "serper", "bocha", "searxng")
KEYED_KINDS = frozenset({"brave", "tavily", "serper", "bocha"})
BASE_URL_KINDS = frozenset({"searxng"})  # self-hosted only: there is no public default
X_SEARCH_KINDS = ("xai",)

LOOPBACK_NAMES = frozenset({"localhost"})
# SHA-256 of the empty string: a client whose token is "" must never be configured.
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
HASH_HOW_TO = 'store its SHA-256 instead: printf %s "$TOKEN" | sha256sum'

_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_HEX64_RE = re.compile(r"[0-9a-fA-F]{64}\Z")
_ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
_PLACEHOLDER_RE = re.compile(r"\{[^{}]*\}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_REDIS_DB_RE = re.compile(r"/?(?:[0-9]{1,5})?\Z")

# Keys whose changes a reload applies live (CONTRACT 4, Reload); anything else needs a restart.
LIVE_KEYS = frozenset({"policy", "clients"})


class ConfigError(Exception):
    """A configuration that must not be used; `issues` holds every problem, sorted by
    position, and str() is their `FILE:LINE:COL: code: message` lines."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = sort_issues(list(issues))
        super().__init__("\n".join(str(i) for i in self.issues))


def load_config_file(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read and validate a configuration file; relative paths in it are resolved against
    the file's folder. Issues name the file as given; `source` is its absolute path, so that a
    reload finds it whatever the working directory. Raises ConfigError with every problem."""
    source = os.fspath(path)
    try:
        data = read_bounded(path, max_bytes=MAX_CONFIG_BYTES)
    except SourceError as exc:
        raise ConfigError(exc.issues) from None
    absolute = os.path.abspath(source)
    config = load_config_bytes(data, source=source, base_dir=os.path.dirname(absolute))
    return dataclasses.replace(config, source=absolute)


def load_config_bytes(data: bytes, *, source: str, base_dir: str) -> GatewayConfig:
    """Validate one configuration document; paths resolve against `base_dir`. An empty
    document is the all-defaults configuration (its default audit path resolved too)."""
    try:
        document = compose(data, source=source, max_bytes=MAX_CONFIG_BYTES)
    except SourceError as exc:
        raise ConfigError(exc.issues) from None
    walker = _ConfigWalker(document.source, document.issues, document.quiet)
    walker.base_dir = os.path.abspath(base_dir)
    top = walker.mapping(document.root, _TOP_FIELDS, path="")
    _check_across(walker, top)
    if walker.has_errors:
        raise ConfigError([i for i in walker.issues if i.is_error])
    return _build(top, source=source, base_dir=walker.base_dir)


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
        normalised, problem = _listen_host(host)
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
        problem = _file_problem(resolved_policy)
        if problem:
            refuse("missing_file", f"--policy: {problem}")
    if issues:
        raise ConfigError(issues)
    return dataclasses.replace(config, listen=listen, policy=resolved_policy)


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


# --- readers -------------------------------------------------------------------------------


class _ConfigWalker(Walker):
    base_dir: str = "."


def _base_dir(w: Walker) -> str:
    return w.base_dir if isinstance(w, _ConfigWalker) else os.getcwd()


def _file_problem(resolved: str) -> str | None:
    """Why `resolved` is not a readable regular file, or None."""
    try:
        if os.path.isfile(resolved):
            if os.access(resolved, os.R_OK):
                return None
            what = "not readable by this user"
        else:
            what = "is a directory" if os.path.isdir(resolved) else "no such file"
    except (OSError, ValueError):
        what = "cannot be checked"
    return f"{what}: {resolved}"


def _read_path(
    w: Walker,
    node: Node,
    path: str,
    *,
    must_exist: bool = True,
    allow_stdout: bool = False,
    template: bool = False,
) -> str | None:
    """A file path resolved against the configuration's folder (`-` kept when allowed)."""
    text = w.string(node, path)
    if text is None:
        return None
    if not text.strip():
        w.error(node, "bad_path", f"{path} must not be empty (write null for the default)")
        return None
    if _CONTROL_RE.search(text):
        w.error(node, "bad_path", f"{path} must be a file path without control characters")
        return None
    if allow_stdout and text == STDOUT_PATH:
        return text
    if template:
        for match in _PLACEHOLDER_RE.finditer(text):
            if match.group() != INSTANCE_PLACEHOLDER:
                w.error(
                    node,
                    "bad_path",
                    f"{path}: unknown placeholder {match.group()}; the only one is "
                    f"{INSTANCE_PLACEHOLDER}",
                )
                return None
    resolved = os.path.normpath(os.path.join(_base_dir(w), text))
    if must_exist:
        problem = _file_problem(resolved)
        if problem:
            hint = "; '~' is not expanded, write the full path" if text.startswith("~") else ""
            w.error(node, "missing_file", f"{path}: {problem}{hint}")
            return None
    return resolved


def _path_field(**options: bool) -> Field:
    return Field(lambda w, n, p: _read_path(w, n, p, **options), None)


def _read_path_list(w: Walker, node: Node, path: str) -> tuple[str, ...] | None:
    items = w.sequence(node, path)
    if items is None:
        return None
    paths: list[str] = []
    ok = True
    for i, item in enumerate(items):
        resolved = _read_path(w, item, f"{path}[{i}]")
        if resolved is None:
            ok = False
        elif resolved in paths:
            ok = False
            w.error(item, "duplicate_entry", f"{path}[{i}]: {resolved} is listed twice")
        else:
            paths.append(resolved)
    return tuple(paths) if ok else None


def _int_field(default: int | None, *, minimum: int, maximum: int | None) -> Field:
    return Field(lambda w, n, p: w.integer(n, p, minimum=minimum, maximum=maximum), default)


def _read_seconds(w: Walker, node: Node, path: str, *, allow_zero: bool) -> float | None:
    kind = "a non-negative" if allow_zero else "a positive"
    expected = f"{kind} number of seconds up to {MAX_SECONDS:.0f} (30 days)"
    if (
        isinstance(node, ScalarNode)
        and node.tag == FLOAT_TAG
        and node.value.lower().lstrip("+-") in (".inf", ".nan")
    ):
        w.error(node, "out_of_range", f"{path} must be {expected}, got {node.value}")
        return None
    value = w.number(node, path)
    if value is None:
        return None
    low_ok = value >= 0 if allow_zero else value > 0
    if not low_ok or value > MAX_SECONDS:
        shown = node.value if isinstance(node, ScalarNode) else value
        w.error(node, "out_of_range", f"{path} must be {expected}, got {shown}")
        return None
    return value


def _seconds_field(default: float | None, *, allow_zero: bool = False) -> Field:
    return Field(lambda w, n, p: _read_seconds(w, n, p, allow_zero=allow_zero), default)


def _read_text(w: Walker, node: Node, path: str, *, max_length: int) -> str | None:
    text = w.string(node, path)
    if text is None:
        return None
    if not text.strip() or len(text) > max_length or not text.isprintable():
        w.error(
            node,
            "bad_value",
            f"{path} must be 1 to {max_length} printable characters (no line breaks or controls)",
        )
        return None
    return text


def _text_field(default: str | None, *, max_length: int) -> Field:
    return Field(lambda w, n, p: _read_text(w, n, p, max_length=max_length), default)


def _read_id(w: Walker, node: Node, path: str) -> str | None:
    text = w.string(node, path)
    if text is None:
        return None
    if not _ID_RE.match(text) or set(text) == {"."}:
        w.error(
            node,
            "bad_id",
            f"{path} must be 1 to 64 letters, digits, '.', '_' or '-' (not only dots), "
            f"got {text[:70]!r}",
        )
        return None
    return text


def _read_env_name(w: Walker, node: Node, path: str) -> str | None:
    if not (isinstance(node, ScalarNode) and node.tag == STR_TAG):
        # Never `describe` the value: it may be the key itself, pasted in by mistake.
        if not w.is_reported(node):
            w.error(node, "wrong_type", f"{path} must be the name of an environment variable")
        return None
    text = str(node.value)
    if not _ENV_NAME_RE.match(text) or len(text) > 128:
        w.error(
            node,
            "bad_env_name",
            f"{path} must name an environment variable (upper-case letters, digits and '_', "
            "e.g. BRAVE_API_KEY) that holds the key, never the key itself",
        )
        return None
    return text


def _read_http_url(w: Walker, node: Node, path: str) -> str | None:
    text = w.string(node, path)
    if text is None:
        return None
    try:
        parse_url(text)
    except InvalidURLError as exc:
        w.error(node, "bad_url", f"{path} must be an absolute http(s) URL: {exc}")
        return None
    raw = yarl.URL(text.strip(), encoded=True)
    if raw.raw_query_string or raw.raw_fragment or "?" in text or "#" in text:
        w.error(node, "bad_url", f"{path} must not carry a query or fragment")
        return None
    return text.strip()


def _read_listen_host(w: Walker, node: Node, path: str) -> str | None:
    text = w.string(node, path)
    if text is None:
        return None
    normalised, problem = _listen_host(text)
    if problem:
        w.error(node, "bad_value", f"{path}: {problem}")
        return None
    return normalised


def _listen_host(text: str) -> tuple[str, str | None]:
    """(normalised host, None), or (text, why it cannot be listened on)."""
    if text.startswith("[") and text.endswith("]"):
        return text, f"write {text[1:-1]!r} without brackets"
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            return text, "IPv6 zone identifiers are not supported; use an address without '%'"
        return ip.compressed, None
    try:
        return normalize_name(text), None
    except HostError as exc:
        return text, f"{text[:70]!r} is neither an IP address nor a host name: {exc}"


def _read_instance_id(w: Walker, node: Node, path: str) -> str | None:
    return _read_id(w, node, path)


# --- clients -------------------------------------------------------------------------------


def _read_token_hash(w: Walker, node: Node, path: str) -> str | None:
    # Whatever is here may be a clear-text token: no message ever repeats the value.
    if not (isinstance(node, ScalarNode) and node.tag == STR_TAG):
        if not w.is_reported(node):
            w.error(
                node,
                "wrong_type",
                f"{path} must be 64 hex digits (the SHA-256 of the token) in quotes; {HASH_HOW_TO}",
            )
        return None
    text = str(node.value).strip()
    if text.lower().startswith("sha256:") and _HEX64_RE.match(text[7:]):
        w.error(node, "bad_token_hash", f"{path}: remove the 'sha256:' prefix")
        return None
    if not _HEX64_RE.match(text):
        w.error(
            node,
            "bad_token_hash",
            f"{path} must be exactly 64 hex digits; this looks like a clear-text token "
            f"({len(text)} characters), which is never stored: {HASH_HOW_TO}",
        )
        return None
    digest = text.lower()
    if digest == EMPTY_SHA256:
        w.error(node, "bad_token_hash", f"{path} is the SHA-256 of an empty token")
        return None
    return digest


_LIMIT_FIELDS = {
    "requests_per_minute": _int_field(None, minimum=1, maximum=1_000_000_000),
    "concurrent": _int_field(None, minimum=1, maximum=1_000_000),
}

_CLIENT_FIELDS = {
    "id": Field(_read_id, None, required=True),
    "token_sha256": Field(_read_token_hash, None, required=True),
    "policy": _path_field(),
    "limits": section_field(_LIMIT_FIELDS),
}


def _read_clients(w: Walker, node: Node, path: str) -> tuple[ClientConfig, ...] | None:
    items = w.sequence(node, path)
    if items is None:
        return None
    clients: list[ClientConfig] = []
    ids: dict[str, str] = {}
    tokens: dict[str, str] = {}
    ok = True
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, MappingNode):
            w.wrong_type(item, where, "a mapping with id and token_sha256")
            ok = False
            continue
        entry = w.mapping(item, _CLIENT_FIELDS, path=where)
        limits: Section = entry["limits"]
        client_id, digest = entry["id"], entry["token_sha256"]
        if client_id is not None and entry.valid("id"):
            if client_id in ids:
                w.error(
                    entry.nodes["id"],
                    "duplicate_id",
                    f"{where}.id: {client_id!r} is already the id of {ids[client_id]}",
                )
                entry.invalid.add("id")
            else:
                ids[client_id] = where
        if digest is not None and entry.valid("token_sha256"):
            if digest in tokens:
                w.error(
                    entry.nodes["token_sha256"],
                    "duplicate_token",
                    f"{where}.token_sha256 is the same as {tokens[digest]}'s; every client "
                    "needs its own token",
                )
                entry.invalid.add("token_sha256")
            else:
                tokens[digest] = where
        if entry.invalid or limits.invalid:
            ok = False
            continue
        clients.append(
            ClientConfig(
                id=client_id,
                token_sha256=digest,
                policy=entry["policy"],
                limits=ClientLimits(limits["requests_per_minute"], limits["concurrent"]),
            )
        )
    return tuple(clients) if ok else None


# --- search providers ----------------------------------------------------------------------

_PROVIDER_FIELDS = {
    "id": Field(_read_id, None, required=True),
    "kind": Field(lambda w, n, p: w.choice(n, p, PROVIDER_KINDS), None, required=True),
    "base_url": Field(_read_http_url, None),
    "api_key_env": Field(_read_env_name, None),
    "allow_private": boolean_field(False),
}


def _read_providers(w: Walker, node: Node, path: str) -> tuple[ProviderConfig, ...] | None:
    items = w.sequence(node, path)
    if items is None:
        return None
    if not items:
        w.error(
            node,
            "bad_value",
            f"{path} must list at least one provider (leave it out for the keyless default)",
        )
        return None
    providers: list[ProviderConfig] = []
    ids: dict[str, str] = {}
    ok = True
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, MappingNode):
            w.wrong_type(item, where, "a mapping with id and kind")
            ok = False
            continue
        entry = w.mapping(item, _PROVIDER_FIELDS, path=where)
        provider_id, kind = entry["id"], entry["kind"]
        if provider_id is not None and entry.valid("id"):
            if provider_id in ids:
                w.error(
                    entry.nodes["id"],
                    "duplicate_id",
                    f"{where}.id: {provider_id!r} is already the id of {ids[provider_id]}",
                )
                entry.invalid.add("id")
            else:
                ids[provider_id] = where
        if kind is not None and entry.valid("kind"):
            _check_provider_kind(w, entry, where, kind)
        if entry.valid("base_url", "allow_private"):
            _check_url_address(w, entry, where)
        if entry.invalid:
            ok = False
            continue
        providers.append(
            ProviderConfig(
                id=provider_id,
                kind=kind,
                base_url=entry["base_url"],
                api_key_env=entry["api_key_env"],
                allow_private=entry["allow_private"],
            )
        )
    return tuple(providers) if ok else None


def _check_provider_kind(w: Walker, entry: Section, where: str, kind: str) -> None:
    key_node = entry.nodes.get("api_key_env")
    if kind in KEYED_KINDS and (key_node is None or is_null(key_node)):
        w.error(
            entry.nodes["kind"],
            "missing_key",
            f"{where}.api_key_env is required for {kind}: the name of the environment variable "
            f"holding its API key (e.g. {kind.upper()}_API_KEY)",
        )
        entry.invalid.add("api_key_env")
    elif kind not in KEYED_KINDS and key_node is not None and not is_null(key_node):
        w.error(
            key_node,
            "unused_key",
            f"{where}.api_key_env: {kind} takes no API key; remove it (or check the kind)",
        )
        entry.invalid.add("api_key_env")
    url_node = entry.nodes.get("base_url")
    if kind in BASE_URL_KINDS and (url_node is None or is_null(url_node)):
        w.error(
            entry.nodes["kind"],
            "missing_key",
            f"{where}.base_url is required for {kind}: the URL of the instance to query",
        )
        entry.invalid.add("base_url")


def _check_url_address(w: Walker, entry: Section, where: str) -> None:
    """A base_url naming an IP literal is checked now, as a request to it would be later:
    metadata never, private only with allow_private."""
    url_node, url = entry.nodes.get("base_url"), entry["base_url"]
    if url is None or url_node is None:
        return
    ip = parse_url(url).ip
    if ip is None:
        return
    kind = classify_address(ip).kind
    if kind is AddressKind.METADATA:
        w.error(
            url_node,
            "bad_url",
            f"{where}.base_url: {ip} is a cloud metadata address, which is never reachable",
        )
        entry.invalid.add("base_url")
    elif kind is AddressKind.PRIVATE and not entry["allow_private"]:
        w.error(
            url_node,
            "private_address",
            f"{where}.base_url: {ip} is a private address; set {where}.allow_private: true "
            "if this provider really lives there",
        )
        entry.invalid.add("base_url")


# --- resolver ------------------------------------------------------------------------------


def _read_static_hosts(w: Walker, node: Node, path: str) -> Any:
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
        addresses = _static_addresses(w, value, f"{path}.{key.value}")
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


def _static_addresses(w: Walker, node: Node, path: str) -> tuple[str, ...] | None:
    items = w.sequence(node, path)
    if items is None:
        return None
    if not items:
        w.error(node, "bad_value", f"{path} must list at least one IP address")
        return None
    addresses: list[str] = []
    ok = True
    for i, item in enumerate(items):
        text = w.string(item, f"{path}[{i}]")
        if text is None:
            ok = False
            continue
        try:
            ip = ipaddress.ip_address(text)
            if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
                raise ValueError("zone identifiers are not supported")
        except ValueError:
            w.error(item, "bad_address", f"{path}[{i}]: {text[:70]!r} is not an IP address")
            ok = False
            continue
        if ip.compressed in addresses:
            w.error(item, "duplicate_entry", f"{path}[{i}]: {ip.compressed} is listed twice")
            ok = False
            continue
        addresses.append(ip.compressed)
    return tuple(addresses) if ok else None


# --- other values --------------------------------------------------------------------------


def _read_redis_url(w: Walker, node: Node, path: str) -> str | None:
    # The URL may carry a password: messages describe the problem, never the value.
    text = w.string(node, path)
    if text is None:
        return None
    problem = None
    try:
        url = yarl.URL(text)
    except (ValueError, TypeError):
        problem = "it does not parse"
    else:
        if url.scheme not in ("redis", "rediss"):
            problem = "the scheme must be redis:// or rediss:// (TLS)"
        elif not url.host:
            problem = "it names no host"
        elif not _REDIS_DB_RE.match(url.raw_path) or url.raw_fragment:
            problem = "the path may only be a database number (redis://host:6379/0)"
    if problem or _CONTROL_RE.search(text):
        w.error(node, "bad_url", f"{path} must be a redis:// or rediss:// URL: {problem}")
        return None
    return text


def _read_ports(w: Walker, node: Node, path: str) -> tuple[int, ...] | None:
    items = w.sequence(node, path)
    if items is None:
        return None
    ports: list[int] = []
    ok = True
    for i, item in enumerate(items):
        port = w.integer(item, f"{path}[{i}]", minimum=1, maximum=65535)
        if port is None:
            ok = False
        elif port in ports:
            ok = False
            w.error(item, "duplicate_entry", f"{path}[{i}]: port {port} is listed twice")
        else:
            ports.append(port)
    return tuple(ports) if ok else None


_LISTEN, _AUDIT, _SEARCH, _XSEARCH = ListenConfig(), AuditConfig(), SearchConfig(), XSearchConfig()
_PROXY, _SERVER = ProxyConfig(), ServerConfig()

_TOP_FIELDS: dict[str, Field] = {
    "listen": section_field(
        {
            "host": Field(_read_listen_host, _LISTEN.host),
            "port": _int_field(_LISTEN.port, minimum=1, maximum=65535),
            "proxy_port": _int_field(_LISTEN.proxy_port, minimum=1, maximum=65535),
            "workers": _int_field(_LISTEN.workers, minimum=1, maximum=1024),
        }
    ),
    "instance_id": Field(_read_instance_id, None),
    "policy": _path_field(),
    "audit": section_field(
        {
            "path": Field(
                lambda w, n, p: _read_path(
                    w, n, p, must_exist=False, allow_stdout=True, template=True
                ),
                None,  # the default is resolved in `_build`, like a value written out
            ),
            "fsync": boolean_field(_AUDIT.fsync),
            "rotate_bytes": _int_field(_AUDIT.rotate_bytes, minimum=1024, maximum=None),
            "checkpoint_interval": _seconds_field(_AUDIT.checkpoint_interval),
            "checkpoints_path": _path_field(must_exist=False, template=True),
        }
    ),
    "signing_key": _path_field(),
    "retired_keys": Field(_read_path_list, ()),
    "clients": Field(_read_clients, ()),
    "state": section_field(
        {
            "redis": Field(_read_redis_url, None),
            "on_failure": choice_field(StateConfig().on_failure, ("closed", "open")),
        }
    ),
    "fetch": section_field(
        {
            "cache_ttl": _seconds_field(FetchConfig().cache_ttl, allow_zero=True),
            "user_agent": _text_field(None, max_length=256),
        }
    ),
    "search": section_field(
        {
            "providers": Field(_read_providers, _SEARCH.providers),
            "cache_ttl": _seconds_field(_SEARCH.cache_ttl, allow_zero=True),
            "timeout": _seconds_field(_SEARCH.timeout),
            "deadline": _seconds_field(_SEARCH.deadline),
            "id_ttl": _seconds_field(_SEARCH.id_ttl),
        }
    ),
    "x_search": section_field(
        {
            "kind": choice_field(_XSEARCH.kind, X_SEARCH_KINDS),
            "api_key_env": Field(_read_env_name, _XSEARCH.api_key_env),
            "model": _text_field(_XSEARCH.model, max_length=128),
            "timeout": _seconds_field(_XSEARCH.timeout),
            "base_url": Field(_read_http_url, _XSEARCH.base_url),
            "allow_private": boolean_field(_XSEARCH.allow_private),
        }
    ),
    "resolver": section_field({"hosts": Field(_read_static_hosts, MappingProxyType({}))}),
    "tls": section_field({"ca_file": _path_field()}),
    "proxy": section_field(
        {
            "connect_ports": Field(_read_ports, _PROXY.connect_ports),
            "require_tls": boolean_field(_PROXY.require_tls),
            "tunnel_idle_timeout": _seconds_field(_PROXY.tunnel_idle_timeout),
            "tunnel_max_duration": _seconds_field(_PROXY.tunnel_max_duration),
        }
    ),
    "server": section_field(
        {
            "header_timeout": _seconds_field(_SERVER.header_timeout),
            "keepalive_timeout": _seconds_field(_SERVER.keepalive_timeout),
            "max_connections_per_ip": _int_field(
                _SERVER.max_connections_per_ip, minimum=1, maximum=1_000_000
            ),
            "max_body_bytes": _int_field(_SERVER.max_body_bytes, minimum=1, maximum=1 << 30),
            "shutdown_grace": _seconds_field(_SERVER.shutdown_grace),
            "metrics_need_token": boolean_field(_SERVER.metrics_need_token),
        }
    ),
}


# --- checks across sections, and building ---------------------------------------------------


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
        _check_url_address(w, x_search, "x_search")
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


def _build(top: Section, *, source: str, base_dir: str) -> GatewayConfig:
    audit: dict[str, Any] = dict(top["audit"].values)
    if audit["path"] is None:
        audit["path"] = os.path.normpath(os.path.join(base_dir, _AUDIT.path))
    return GatewayConfig(
        listen=_values(top["listen"], ListenConfig),
        instance_id=top["instance_id"],
        policy=top["policy"],
        audit=AuditConfig(**audit),
        signing_key=top["signing_key"],
        retired_keys=tuple(top["retired_keys"]),
        clients=tuple(top["clients"]),
        state=_values(top["state"], StateConfig),
        fetch=_values(top["fetch"], FetchConfig),
        search=_values(top["search"], SearchConfig),
        x_search=_values(top["x_search"], XSearchConfig),
        resolver=ResolverConfig(hosts=top["resolver"]["hosts"]),
        tls=_values(top["tls"], TLSConfig),
        proxy=_values(top["proxy"], ProxyConfig),
        server=_values(top["server"], ServerConfig),
        source=source,
    )


__all__ = [
    "ConfigError",
    "apply_overrides",
    "check_bind_safety",
    "is_loopback_host",
    "load_config_bytes",
    "load_config_file",
    "restart_needed",
    "watched_files",
]
