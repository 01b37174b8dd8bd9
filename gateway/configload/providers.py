"""`search.providers` and `x_search`'s endpoint: which kinds exist, what each needs (an API key
by environment variable name, a base URL), and the address rule for a base URL that names an
IP literal (metadata never, private only with `allow_private`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from yaml.nodes import MappingNode, Node, ScalarNode

from gateway.config import ProviderConfig, SearchConfig
from gateway.configload.values import claim_unique, read_env_name, read_http_url, read_id
from gateway.policy.addresses import AddressKind, classify_address
from gateway.policy.hosts import PatternError, parse_pattern
from gateway.policy.urls import parse_url
from gateway.yamlstrict.issues import Severity
from gateway.yamlstrict.walk import (
    Field,
    Section,
    Walker,
    boolean_field,
    integer_field,
    is_null,
    text_field,
)

# Provider kinds and what each needs (tests check this against search.providers.ADAPTERS; the
# table is repeated here so that reading a configuration never imports the search stack).
PROVIDER_KINDS = (
    "duckduckgo", "bing", "baidu", "brave", "tavily", "serper", "bocha", "searxng",
    "tencent_wsa", "openai", "anthropic",
)  # fmt: skip
KEYED_KINDS = frozenset({"brave", "tavily", "serper", "bocha", "openai", "anthropic"})
KEY_PAIR_KINDS = frozenset({"tencent_wsa"})  # secret_id_env and secret_key_env
MODEL_KINDS = frozenset({"openai", "anthropic"})
MAX_RETRIES = 3
MAX_BACKOFF_MS = 2000
BASE_URL_KINDS = frozenset({"searxng"})  # self-hosted only: there is no public default
X_SEARCH_KINDS = ("xai",)
PREFER_CHOICES = ("model_native",)
MIN_TIMEOUT, MAX_TIMEOUT = 1.0, 60.0  # search.timeout: one provider request, in seconds

# The automatic chain (no `search.providers`): each keyed provider under its usual key
# variable, asked when that variable is set, in this order; then the keyless engines.
AUTOMATIC_KEYED = (
    ProviderConfig(id="brave", kind="brave", api_key_env="BRAVE_API_KEY"),
    ProviderConfig(id="tavily", kind="tavily", api_key_env="TAVILY_API_KEY"),
    ProviderConfig(id="serper", kind="serper", api_key_env="SERPER_API_KEY"),
    ProviderConfig(id="bocha", kind="bocha", api_key_env="BOCHA_API_KEY"),
    ProviderConfig(
        id="tencent_wsa",
        kind="tencent_wsa",
        secret_id_env="TENCENTCLOUD_SECRET_ID",
        secret_key_env="TENCENTCLOUD_SECRET_KEY",
    ),
    ProviderConfig(id="openai", kind="openai", api_key_env="OPENAI_API_KEY"),
    ProviderConfig(id="anthropic", kind="anthropic", api_key_env="ANTHROPIC_API_KEY"),
)
KEYLESS_CHAIN = (
    ProviderConfig(id="ddg", kind="duckduckgo"),
    ProviderConfig(id="bing", kind="bing"),
    ProviderConfig(id="baidu", kind="baidu"),
)
AUTOMATIC_IDS = tuple(p.id for p in (*AUTOMATIC_KEYED, *KEYLESS_CHAIN))


def effective_providers(
    search: SearchConfig, environ: Mapping[str, str]
) -> tuple[ProviderConfig, ...]:
    """The chain a search asks: `search.providers` exactly as written; without it, every
    keyed provider whose key variables are all set (model-native ones first with
    `prefer: model_native`), then DuckDuckGo, Bing and Baidu."""
    if search.providers is not None:
        return search.providers
    keyed = [
        p
        for p in AUTOMATIC_KEYED
        if all(environ.get(name) for name in (p.api_key_env, p.secret_id_env, p.secret_key_env)
               if name)
    ]  # fmt: skip
    if search.prefer == "model_native":
        keyed.sort(key=lambda p: p.kind not in MODEL_KINDS)  # stable: the order stays within
    return (*keyed, *KEYLESS_CHAIN)


_PROVIDER_FIELDS = {
    "id": Field(read_id, None, required=True),
    "kind": Field(lambda w, n, p: w.choice(n, p, PROVIDER_KINDS), None, required=True),
    "base_url": Field(read_http_url, None),
    "api_key_env": Field(read_env_name, None),
    "secret_id_env": Field(read_env_name, None),
    "secret_key_env": Field(read_env_name, None),
    "model": text_field(None, max_length=128, note=" (no line breaks or controls)"),
    "retries": integer_field(1, minimum=0, maximum=MAX_RETRIES),
    "backoff_ms": integer_field(None, minimum=1, maximum=MAX_BACKOFF_MS),
    "allow_private": boolean_field(False),
}


def read_providers(w: Walker, node: Node, path: str) -> tuple[ProviderConfig, ...] | None:
    entries = w.entries(
        node,
        path,
        _PROVIDER_FIELDS,
        expected="a mapping with id and kind",
        at_least_one="provider (leave it out for the keyless default)",
    )
    if entries is None:
        return None
    providers: list[ProviderConfig] = []
    ids: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        claim_unique(w, entry, "id", ids, where)
        if entry["kind"] is not None and entry.valid("kind"):
            _check_provider_kind(w, entry, where, entry["kind"])
        if entry.valid("base_url", "allow_private"):
            check_url_address(w, entry, where)
        if entry.invalid:
            continue
        providers.append(
            ProviderConfig(
                id=entry["id"],
                kind=entry["kind"],
                base_url=entry["base_url"],
                api_key_env=entry["api_key_env"],
                allow_private=entry["allow_private"],
                secret_id_env=entry["secret_id_env"],
                secret_key_env=entry["secret_key_env"],
                model=entry["model"],
                retries=entry["retries"],
                backoff_ms=entry["backoff_ms"],
            )
        )
    return tuple(providers) if len(providers) == len(entries) else None


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
    for name in ("secret_id_env", "secret_key_env"):
        part = name.split("_")[1]
        node = entry.nodes.get(name)
        given = node is not None and not is_null(node)
        if kind in KEY_PAIR_KINDS and not given:
            w.error(
                entry.nodes["kind"],
                "missing_key",
                f"{where}.{name} is required for {kind}: the name of the environment variable "
                f"holding its secret {part} (e.g. TENCENTCLOUD_SECRET_{part.upper()})",
            )
            entry.invalid.add(name)
        elif kind not in KEY_PAIR_KINDS and given:
            assert node is not None
            w.error(node, "unused_key", f"{where}.{name}: only tencent_wsa takes a key pair")
            entry.invalid.add(name)
    model_node = entry.nodes.get("model")
    if kind not in MODEL_KINDS and model_node is not None and not is_null(model_node):
        w.error(model_node, "unused_key", f"{where}.model: only openai and anthropic take a model")
        entry.invalid.add("model")
    url_node = entry.nodes.get("base_url")
    if kind in BASE_URL_KINDS and (url_node is None or is_null(url_node)):
        w.error(
            entry.nodes["kind"],
            "missing_key",
            f"{where}.base_url is required for {kind}: the URL of the instance to query",
        )
        entry.invalid.add("base_url")


def check_url_address(w: Walker, entry: Section, where: str) -> None:
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


MAX_WEIGHT = 10.0  # fusion.MAX_WEIGHT (repeated here so reading a config never imports search)


def read_weights(w: Walker, node: Node, path: str) -> Mapping[str, float] | None:
    """`search.weights`: host pattern (as in a policy's domains) -> a rank weight, 0 to 10."""
    if not isinstance(node, MappingNode):
        w.wrong_type(node, path, "a mapping of host pattern to a weight")
        return None
    table: dict[str, float] = {}
    ok = True
    for key, value in node.value:
        if not isinstance(key, ScalarNode) or w.is_reported(key):
            ok = False
            continue
        try:
            parse_pattern(key.value)
        except PatternError as exc:
            w.error(key, "bad_pattern", f"{path}: {exc}")
            ok = False
            continue
        weight = w.number(value, f"{path}[{key.value!r}]", maximum=MAX_WEIGHT)
        if weight is None:
            ok = False
        elif weight < 0:
            w.error(value, "out_of_range", f"{path}[{key.value!r}] must not be negative")
            ok = False
        else:
            table[key.value] = weight
    return MappingProxyType(table) if ok else None


_COUNTRY = re.compile(r"^[a-z]{2}$")


def read_region_providers(w: Walker, node: Node, path: str) -> Mapping[str, tuple[str, ...]] | None:
    """`search.region_providers`: a country code (as a query's region names it) -> provider
    ids asked first for that region; whether the ids exist is checked across sections."""
    if not isinstance(node, MappingNode):
        w.wrong_type(node, path, "a mapping of country code to a list of provider ids")
        return None
    table: dict[str, tuple[str, ...]] = {}
    ok = True
    for key, value in node.value:
        if not isinstance(key, ScalarNode) or w.is_reported(key):
            ok = False
            continue
        country = key.value.strip().lower()
        country = "gb" if country == "uk" else country
        if not _COUNTRY.match(country):
            w.error(
                key,
                "bad_value",
                f"{path}: {key.value[:20]!r} is not a two-letter country code (cn, us, de, ...)",
            )
            ok = False
            continue
        where = f"{path}.{country}"
        ids = w.unique_items(
            value, where, lambda item, at: read_id(w, item, at), duplicates=Severity.ERROR
        )
        if ids is None:
            ok = False
        else:
            table[country] = tuple(ids)
    return MappingProxyType(table) if ok else None


def check_region_providers(
    w: Walker, node: Node | None, table: Mapping[str, Sequence[str]], known: Sequence[str]
) -> None:
    """Every id in `search.region_providers` names a provider of the chain (with no
    `search.providers`, one of the automatic chain's ids)."""
    for country, ids in table.items():
        for pid in ids:
            if pid not in known:
                w.error(
                    node,
                    "unknown_provider",
                    f"search.region_providers.{country}: {pid!r} is not a provider of the "
                    f"chain (known: {', '.join(known)})",
                )


def read_search_timeout(w: Walker, node: Node, path: str) -> float | None:
    """`search.timeout`: one provider request, 1 to 60 seconds."""
    value = w.number(node, path)
    if value is None:
        return None
    if not MIN_TIMEOUT <= value <= MAX_TIMEOUT:
        shown = node.value if isinstance(node, ScalarNode) else value
        w.error(
            node,
            "out_of_range",
            f"{path} must be between {MIN_TIMEOUT:g} and {MAX_TIMEOUT:g} seconds, got {shown}",
        )
        return None
    return value
