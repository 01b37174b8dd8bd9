"""The gateway configuration loader: golden files (a configuration, then its expected issue
lines), the contract's defaults, relative paths, command-line overrides, the bind rule, the
reload diff, and the shipped examples.

Golden files: `golden_config/NAME.yaml` and `golden_config/NAME.expected`, one
`LINE:COL: code: message` line per issue in order; an empty expected file means the file must
load. Paths in them resolve against `golden_config/` (whose `files/` folder holds the files
they reference), written `$DIR` in expected lines. Regenerate after a deliberate change with
`GATEWAY_UPDATE_GOLDEN=1 pytest tests/test_configload.py` and review the diff.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import (
    AuditConfig,
    ClientConfig,
    ClientLimits,
    GatewayConfig,
    ListenConfig,
    ProviderConfig,
    SearchConfig,
)
from gateway.configload import (
    BASE_URL_KINDS,
    KEY_PAIR_KINDS,
    KEYED_KINDS,
    MAX_CONFIG_BYTES,
    PROVIDER_KINDS,
    ConfigError,
    apply_overrides,
    check_bind_safety,
    is_loopback_host,
    load_config_bytes,
    load_config_file,
    restart_needed,
    watched_files,
)

GOLDEN = Path(__file__).parent / "golden_config"
GOLDEN_CASES = sorted(GOLDEN.glob("*.yaml"))
EXAMPLES = Path(__file__).parent.parent / "examples" / "config"
UPDATE = os.environ.get("GATEWAY_UPDATE_GOLDEN") == "1"
HASH_A = hashlib.sha256(b"token-a").hexdigest()
HASH_B = hashlib.sha256(b"token-b").hexdigest()


def _issue_lines(path: Path) -> tuple[list[str], bool]:
    try:
        load_config_bytes(path.read_bytes(), source=path.name, base_dir=str(GOLDEN))
    except ConfigError as exc:
        issues, loaded = exc.issues, False
    else:
        issues, loaded = (), True
    prefix = f"{path.name}:"
    lines = []
    for issue in issues:
        text = str(issue)
        assert text.startswith(prefix)
        lines.append(text[len(prefix) :].replace(str(GOLDEN), "$DIR"))
    return lines, loaded


@pytest.mark.parametrize("path", GOLDEN_CASES, ids=[p.stem for p in GOLDEN_CASES])
def test_golden(path: Path) -> None:
    lines, loaded = _issue_lines(path)
    expected_path = path.with_suffix(".expected")
    if UPDATE:
        expected_path.write_text("".join(line + "\n" for line in lines))
    expected = expected_path.read_text().splitlines()
    assert lines == expected
    assert loaded is (not expected)


def test_golden_files_each_have_expectations() -> None:
    stems = {p.stem for p in GOLDEN.glob("*.expected")}
    assert stems == {p.stem for p in GOLDEN_CASES}


def _load(text: str, base_dir: Path | str = "/nonexistent-base") -> GatewayConfig:
    return load_config_bytes(text.encode(), source="t.yaml", base_dir=str(base_dir))


def _codes(text: str, base_dir: Path | str = "/nonexistent-base") -> list[str]:
    with pytest.raises(ConfigError) as info:
        _load(text, base_dir)
    return [i.code for i in info.value.issues]


# --- defaults: the contract's table, written out here rather than read from config.py ------


DOCUMENTED_DEFAULTS: list[tuple[str, Any]] = [
    ("listen.host", "127.0.0.1"),
    ("listen.port", 8080),
    ("listen.proxy_port", None),
    ("listen.workers", 1),
    ("instance_id", None),
    ("policy", None),
    ("audit.fsync", False),
    ("audit.rotate_bytes", 104857600),
    ("audit.checkpoint_interval", 300),
    ("audit.checkpoints_path", None),
    ("signing_key", None),
    ("retired_keys", ()),
    ("dlp_fingerprint_key", None),
    ("clients", ()),
    ("state.redis", None),
    ("state.on_failure", "closed"),
    ("fetch.cache_ttl", 0),
    ("fetch.user_agent", None),
    ("search.providers", None),  # the automatic chain
    ("search.weights", {}),
    ("search.region_providers", {}),
    ("search.prefer", None),
    ("search.cache_ttl", 600),
    ("search.timeout", 15),
    ("search.deadline", 20),
    ("search.id_ttl", 3600),
    ("x_search.kind", "xai"),
    ("x_search.api_key_env", "XAI_API_KEY"),
    ("x_search.model", "grok-4.3"),
    ("x_search.timeout", 60),
    ("x_search.base_url", "https://api.x.ai"),
    ("x_search.allow_private", False),
    ("resolver.hosts", {}),
    ("resolver.system_hosts", False),
    ("tls.ca_file", None),
    ("proxy.connect_ports", (443,)),
    ("proxy.require_tls", True),
    ("proxy.tunnel_idle_timeout", 300),
    ("proxy.tunnel_max_duration", None),
    ("server.header_timeout", 10),
    ("server.keepalive_timeout", 75),
    ("server.max_connections_per_ip", 256),
    ("server.max_body_bytes", 1048576),
    ("server.shutdown_grace", 30),
    ("server.metrics_need_token", False),
    ("review.enabled", False),
]


def _get(config: object, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


@pytest.mark.parametrize(
    ("key", "expected"), DOCUMENTED_DEFAULTS, ids=[key for key, _ in DOCUMENTED_DEFAULTS]
)
def test_empty_file_has_the_contract_default(key: str, expected: Any, tmp_path: Path) -> None:
    config = _load("", tmp_path)
    assert _get(config, key) == expected
    assert _get(GatewayConfig(), key) == expected  # the model without a file agrees


def test_defaults_table_covers_every_field() -> None:
    listed = {key for key, _ in DOCUMENTED_DEFAULTS}
    expected: set[str] = set()
    for item in dataclasses.fields(GatewayConfig):
        value = getattr(GatewayConfig(), item.name)
        if dataclasses.is_dataclass(value):
            expected.update(f"{item.name}.{inner.name}" for inner in dataclasses.fields(value))
        elif item.name != "source":
            expected.add(item.name)
    assert listed | {"audit.path"} == expected


def test_empty_file_is_the_default_config_with_its_audit_path_resolved(tmp_path: Path) -> None:
    config = _load("# nothing but a comment\n", tmp_path)
    expected = dataclasses.replace(
        GatewayConfig(),
        audit=AuditConfig(path=str(tmp_path / "audit" / "gateway-{instance}.jsonl")),
        source="t.yaml",
    )
    assert config == expected


def test_writing_a_default_out_equals_leaving_it_out(tmp_path: Path) -> None:
    written = _load(
        "audit: {path: 'audit/gateway-{instance}.jsonl'}\nlisten: {port: 8080}\n", tmp_path
    )
    assert written == _load("", tmp_path)


# --- relative paths --------------------------------------------------------------------------


def test_paths_resolve_against_the_files_folder_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "etc" / "gateway"
    (conf_dir / "keys").mkdir(parents=True)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "research.yaml").write_text("version: 1\n")
    (tmp_path / "policies" / "coding.yaml").write_text("version: 1\n")
    (conf_dir / "keys" / "signing.pem").write_text("k")
    (conf_dir / "keys" / "old.pub").write_text("k")
    absolute_ca = tmp_path / "ca.pem"
    absolute_ca.write_text("c")
    config_path = conf_dir / "gateway.yaml"
    config_path.write_text(
        "policy: ../../policies/research.yaml\n"
        "signing_key: keys/signing.pem\n"
        "retired_keys: [./keys/old.pub]\n"
        f"tls: {{ca_file: {absolute_ca}}}\n"
        "audit: {path: 'logs/gw-{instance}.jsonl', checkpoints_path: ship/ckpt.jsonl}\n"
        "clients:\n"
        f"  - {{id: a, token_sha256: '{HASH_A}', policy: ../../policies/coding.yaml}}\n"
        f"  - {{id: b, token_sha256: '{HASH_B}'}}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config_file(os.path.relpath(config_path, elsewhere))
    assert config.policy == str(tmp_path / "policies" / "research.yaml")
    assert config.signing_key == str(conf_dir / "keys" / "signing.pem")
    assert config.retired_keys == (str(conf_dir / "keys" / "old.pub"),)
    assert config.tls.ca_file == str(absolute_ca)
    assert config.audit.path == str(conf_dir / "logs" / "gw-{instance}.jsonl")
    assert config.audit.checkpoints_path == str(conf_dir / "ship" / "ckpt.jsonl")
    assert config.clients[0].policy == str(tmp_path / "policies" / "coding.yaml")
    assert config.clients[1].policy is None
    assert config.source == str(config_path)


def test_stdout_audit_path_is_kept(tmp_path: Path) -> None:
    assert _load('audit: {path: "-"}', tmp_path).audit.path == "-"


def test_missing_file_names_the_resolved_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load("policy: sub/../nope.yaml\n", tmp_path)
    (issue,) = info.value.issues
    assert (issue.line, issue.col, issue.code) == (1, 9, "missing_file")
    assert str(tmp_path / "nope.yaml") in issue.message


def test_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_file(tmp_path / "absent.yaml")
    assert [i.code for i in info.value.issues] == ["unreadable"]


def test_oversized_config_file(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError) as info:
        load_config_file(big)
    assert [i.code for i in info.value.issues] == ["file_too_large"]


@pytest.mark.parametrize(
    "data",
    [b"listen: {port: \x00}", b"\xff\xfe", b"policy: \xc3\x28"],
    ids=["nul", "utf16-bom", "bad-utf8"],
)
def test_binary_input_is_one_issue(data: bytes) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_bytes(data, source="b.yaml", base_dir=".")
    assert [i.code for i in info.value.issues] == ["binary_file"]


# --- values that must never be echoed ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (
            "clients: [{id: a, token_sha256: 'sk-live-0123456789abcdef'}]",
            "sk-live-0123456789abcdef",
        ),
        ("clients: [{id: a, token_sha256: 1234567890123}]", "1234567890123"),
        ("clients: [{id: a, token_sha256: [hunter2secret]}]", "hunter2secret"),
        ("state: {redis: 'http://:hunter2secret@r:6379'}", "hunter2secret"),
        ("state: {redis: 'redis://:hunter2secret@r:6379/x'}", "hunter2secret"),
        (
            "search: {providers: [{id: b, kind: brave, api_key_env: 'BSAhunter2secret'}]}",
            "hunter2secret",
        ),
        ("search: {providers: [{id: b, kind: brave, api_key_env: 123456789}]}", "123456789"),
        ("x_search: {api_key_env: 'xai-hunter2secret'}", "hunter2secret"),
    ],
    ids=[
        "token",
        "numeric-token",
        "token-list",
        "redis-scheme",
        "redis-path",
        "api-key",
        "numeric-key",
        "xai-key",
    ],
)
def test_secret_shaped_values_are_not_echoed(text: str, secret: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(text)
    assert info.value.issues
    assert secret not in str(info.value)


def test_clear_text_token_message_says_how_to_hash() -> None:
    with pytest.raises(ConfigError) as info:
        _load("clients: [{id: a, token_sha256: 'my-token'}]")
    assert 'printf %s "$TOKEN" | sha256sum' in str(info.value)


def test_token_hash_is_lower_cased() -> None:
    config = _load(f"clients: [{{id: a, token_sha256: '{HASH_A.upper()}'}}]")
    assert config.clients == (ClientConfig(id="a", token_sha256=HASH_A, limits=ClientLimits()),)


# --- providers: the kinds table agrees with the search package ------------------------------


def test_provider_kinds_match_the_adapters() -> None:
    from gateway.search.providers import ADAPTERS

    assert set(PROVIDER_KINDS) == set(ADAPTERS)
    needs_key = {kind for kind, adapter in ADAPTERS.items() if adapter.needs_key}
    assert needs_key == KEYED_KINDS | KEY_PAIR_KINDS
    assert set(ADAPTERS) >= BASE_URL_KINDS


@pytest.mark.parametrize(
    ("entry", "codes"),
    [
        ("{id: b, kind: brave, api_key_env: BRAVE_API_KEY}", []),
        ("{id: b, kind: brave}", ["missing_key"]),
        ("{id: s, kind: searxng}", ["missing_key"]),
        ("{id: s, kind: searxng, base_url: 'http://[::1]:8888', allow_private: true}", []),
        ("{id: d, kind: duckduckgo, base_url: 'http://127.0.0.1:9/html/'}", ["private_address"]),
        (
            "{id: d, kind: duckduckgo, base_url: 'http://169.254.169.254', allow_private: true}",
            ["bad_url"],
        ),
        ("{id: d, kind: duckduckgo, base_url: 'https://search.example:8443/x/'}", []),
        ("{id: d, kind: duckduckgo, base_url: 'https://u@x.example'}", ["bad_url"]),
        ("{id: d, kind: duckduckgo, base_url: 'https://x.example/?q=1'}", ["bad_url"]),
        ("{id: d, kind: duckduckgo, base_url: 'https://x.example:0'}", ["bad_url"]),
        ("{id: d, kind: duckduckgo, api_key_env: DDG}", ["unused_key"]),
        ("{id: d, kind: duck}", ["bad_value"]),
        ("{id: 'd d', kind: duckduckgo}", ["bad_id"]),
        ("{id: w, kind: tencent_wsa, secret_id_env: TC_ID, secret_key_env: TC_KEY}", []),
        ("{id: w, kind: tencent_wsa, secret_id_env: TC_ID}", ["missing_key"]),
        ("{id: d, kind: duckduckgo, secret_id_env: TC_ID}", ["unused_key"]),
        ("{id: o, kind: openai, api_key_env: OPENAI_API_KEY, model: gpt-5-mini}", []),
        ("{id: o, kind: anthropic}", ["missing_key"]),
        ("{id: d, kind: duckduckgo, model: m}", ["unused_key"]),
        ("{id: d, kind: baidu, retries: 3, backoff_ms: 2000}", []),
        ("{id: d, kind: baidu, retries: 4}", ["out_of_range"]),
        ("{id: d, kind: baidu, backoff_ms: 0}", ["out_of_range"]),
    ],
    ids=[
        "keyed",
        "keyed-without-key",
        "searxng-without-url",
        "ipv6-loopback-allowed",
        "loopback-not-allowed",
        "metadata-never",
        "ddg-mirror",
        "userinfo",
        "query",
        "port-0",
        "unused-key",
        "bad-kind",
        "bad-id",
        "tencent-key-pair",
        "tencent-without-secret-key",
        "key-pair-on-ddg",
        "openai-with-model",
        "anthropic-without-key",
        "model-on-ddg",
        "retries-and-backoff",
        "too-many-retries",
        "backoff-zero",
    ],
)
def test_provider_entries(entry: str, codes: list[str]) -> None:
    text = f"search: {{providers: [{entry}]}}"
    if codes:
        assert _codes(text) == codes
    else:
        (provider,) = _load(text).search.providers
        assert isinstance(provider, ProviderConfig)


# --- overrides -------------------------------------------------------------------------------


def test_overrides_win_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli.yaml").write_text("version: 1\n")
    (tmp_path / "file.yaml").write_text("version: 1\n")
    config = _load(
        "policy: file.yaml\nlisten: {host: 127.0.0.1, port: 9000, proxy_port: 9001}", tmp_path
    )
    monkeypatch.chdir(tmp_path)
    result = apply_overrides(config, policy="cli.yaml", host="::1", port=7000, proxy_port=7001)
    assert result.policy == str(tmp_path / "cli.yaml")
    assert result.listen == ListenConfig(host="::1", port=7000, proxy_port=7001, workers=1)
    assert result.search == config.search


def test_no_overrides_is_the_same_config(tmp_path: Path) -> None:
    config = _load("listen: {port: 9000}", tmp_path)
    assert apply_overrides(config) == config


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"port": 0}, "out_of_range"),
        ({"port": 65536}, "out_of_range"),
        ({"proxy_port": -1}, "out_of_range"),
        ({"port": True}, "out_of_range"),
        ({"port": 8081}, "port_conflict"),  # equals the file's proxy_port
        ({"proxy_port": 8080}, "port_conflict"),  # equals the file's port
        ({"host": "[::1]"}, "bad_value"),
        ({"host": "bad host"}, "bad_value"),
        ({"policy": "no-such-policy.yaml"}, "missing_file"),
    ],
    ids=[
        "port-0",
        "port-high",
        "proxy-negative",
        "bool",
        "port-vs-proxy",
        "proxy-vs-port",
        "brackets",
        "bad-host",
        "missing-policy",
    ],
)
def test_bad_overrides(
    overrides: dict[str, Any], code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _load("listen: {port: 8080, proxy_port: 8081}", tmp_path)
    with pytest.raises(ConfigError) as info:
        apply_overrides(config, **overrides)
    assert [i.code for i in info.value.issues] == [code]
    assert str(info.value).startswith("<command line>:")


def test_override_host_is_normalised() -> None:
    assert apply_overrides(GatewayConfig(), host="0:0::0").listen.host == "::"


# --- bind safety -----------------------------------------------------------------------------

_CLIENT = (ClientConfig(id="a", token_sha256=HASH_A),)


@pytest.mark.parametrize(
    ("host", "clients", "allowed"),
    [
        ("127.0.0.1", (), True),
        ("127.8.9.10", (), True),
        ("::1", (), True),
        ("localhost", (), True),
        ("LOCALHOST.", (), True),
        ("::ffff:127.0.0.1", (), True),
        ("0.0.0.0", (), False),
        ("::", (), False),
        ("10.1.2.3", (), False),
        ("192.168.1.5", (), False),
        ("gateway.internal", (), False),
        ("localhost.example", (), False),
        ("::ffff:10.1.2.3", (), False),
        ("0.0.0.0", _CLIENT, True),
        ("10.1.2.3", _CLIENT, True),
        ("::", _CLIENT, True),
    ],
    ids=[
        "v4-loopback",
        "v4-loopback-range",
        "v6-loopback",
        "localhost",
        "localhost-case-dot",
        "mapped-loopback",
        "wildcard-v4",
        "wildcard-v6",
        "private",
        "lan",
        "name",
        "localhost-lookalike",
        "mapped-private",
        "wildcard-with-client",
        "private-with-client",
        "v6-wildcard-with-client",
    ],
)
def test_bind_safety(host: str, clients: tuple[ClientConfig, ...], allowed: bool) -> None:
    config = GatewayConfig(listen=ListenConfig(host=host), clients=clients)
    if allowed:
        check_bind_safety(config)
        return
    with pytest.raises(ConfigError) as info:
        check_bind_safety(config)
    (issue,) = info.value.issues
    assert issue.code == "unsafe_bind"
    assert host in issue.message and "clients" in issue.message and "127.0.0.1" in issue.message


def test_bind_safety_after_loading(tmp_path: Path) -> None:
    open_config = _load("listen: {host: 0.0.0.0}", tmp_path)
    with pytest.raises(ConfigError) as info:
        check_bind_safety(open_config)
    assert str(info.value).startswith("t.yaml:1:1: unsafe_bind: refusing to listen on 0.0.0.0")
    closed = _load(
        f"listen: {{host: 0.0.0.0}}\nclients: [{{id: a, token_sha256: '{HASH_A}'}}]", tmp_path
    )
    check_bind_safety(closed)
    check_bind_safety(apply_overrides(open_config, host="127.0.0.1"))


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("[::1]", True), ("0.0.0.0", False), ("", False), ("fe80::1", False)],
    ids=["v4", "bracketed-v6", "wildcard", "empty", "link-local"],
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


# --- reload ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needs_restart"),
    [
        ({"policy": "/p.yaml"}, ()),
        ({"clients": _CLIENT}, ()),
        ({"source": "/other.yaml"}, ()),
        ({"listen": ListenConfig(port=9000)}, ("listen.port",)),
        ({"listen": ListenConfig(port=9000, workers=2)}, ("listen.port", "listen.workers")),
        ({"search": SearchConfig(timeout=5.0)}, ("search.timeout",)),
        ({"signing_key": "/k.pem"}, ("signing_key",)),
        ({"retired_keys": ("/k.pub",)}, ("retired_keys",)),
        ({"instance_id": "x"}, ("instance_id",)),
    ],
    ids=[
        "policy",
        "clients",
        "source",
        "port",
        "port-and-workers",
        "search",
        "signing-key",
        "retired-keys",
        "instance",
    ],
)
def test_restart_needed(change: dict[str, Any], needs_restart: tuple[str, ...]) -> None:
    assert (
        restart_needed(GatewayConfig(), dataclasses.replace(GatewayConfig(), **change))
        == needs_restart
    )


def test_watched_files() -> None:
    config = GatewayConfig(
        source="/etc/g.yaml",
        policy="/p/a.yaml",
        clients=(
            ClientConfig(id="a", token_sha256=HASH_A, policy="/p/b.yaml"),
            ClientConfig(id="b", token_sha256=HASH_B, policy="/p/a.yaml"),
            ClientConfig(id="c", token_sha256="c" * 64),
        ),
    )
    assert watched_files(config) == ("/etc/g.yaml", "/p/a.yaml", "/p/b.yaml")


# --- the shipped examples --------------------------------------------------------------------


def test_full_example_loads_and_is_all_defaults() -> None:
    path = EXAMPLES / "gateway.yaml"
    config = load_config_file(path)
    assert config == dataclasses.replace(
        load_config_bytes(b"", source="empty", base_dir=str(EXAMPLES)), source=str(path.resolve())
    )


def test_full_example_names_every_key() -> None:
    """Every key of the schema is in the example, set or in a commented-out entry."""
    text = (EXAMPLES / "gateway.yaml").read_text()
    keys = {key.rsplit(".", 1)[-1] for key, _ in DOCUMENTED_DEFAULTS} | {"path"}
    keys |= {f.name for f in dataclasses.fields(ClientConfig)} - {"limits"} | {"limits"}
    keys |= {f.name for f in dataclasses.fields(ClientLimits)}
    keys |= {f.name for f in dataclasses.fields(ProviderConfig)}
    missing = sorted(key for key in keys if f"{key}:" not in text)
    assert missing == []


def test_full_example_sections_are_the_schema() -> None:
    document = yaml.safe_load((EXAMPLES / "gateway.yaml").read_text())
    expected = {f.name for f in dataclasses.fields(GatewayConfig)} - {"source"}
    assert set(document) == expected


def test_minimal_example_loads_with_one_client_and_may_bind_widely() -> None:
    config = load_config_file(EXAMPLES / "minimal.yaml")
    assert len(config.clients) == 1
    assert config.clients[0].policy is not None and os.path.isfile(config.clients[0].policy)
    assert not is_loopback_host(config.listen.host)
    check_bind_safety(config)


# --- hostile input: every outcome is a config or a ConfigError, never a traceback -------------

_SCHEMA_KEYS = sorted(
    {key for dotted, _ in DOCUMENTED_DEFAULTS for key in dotted.split(".")}
    | {"path", "id", "kind", "token_sha256", "limits", "requests_per_minute", "concurrent"}
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.sampled_from(["-", "{instance}", "0.0.0.0", "redis://x", "https://x.example", "a" * 64]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(_SCHEMA_KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)


def _never_crashes(data: bytes) -> None:
    try:
        config = load_config_bytes(data, source="f.yaml", base_dir="/nonexistent-base")
    except ConfigError as exc:
        assert exc.issues and all(i.is_error for i in exc.issues)
    else:
        assert isinstance(config, GatewayConfig)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(_SCHEMA_KEYS), _VALUES, max_size=6))
def test_structured_garbage_never_crashes(document: dict[str, Any]) -> None:
    _never_crashes(yaml.safe_dump(document).encode())


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_text_garbage_never_crashes(text: str) -> None:
    _never_crashes(text.encode())


# --- the review page: review.enabled and clients[].role --------------------------------------


def test_review_and_client_roles_are_read() -> None:
    config = _load(
        "review: {enabled: true}\n"
        f"clients:\n  - {{id: a, token_sha256: '{HASH_A}', role: reviewer}}\n"
        f"  - {{id: b, token_sha256: '{HASH_B}'}}\n"
    )
    assert config.review.enabled is True
    assert [(c.id, c.role) for c in config.clients] == [("a", "reviewer"), ("b", "agent")]


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        ("review: {enabled: yes please}\n", ["wrong_type"]),
        ("review: {enable: true}\n", ["unknown_key"]),
        (f"clients: [{{id: a, token_sha256: '{HASH_A}', role: admin}}]\n", ["bad_value"]),
    ],
    ids=["enabled-not-boolean", "typo", "unknown-role"],
)
def test_review_and_role_mistakes_are_errors(text: str, codes: list[str]) -> None:
    assert _codes(text) == codes


@pytest.mark.parametrize(
    ("weights", "codes"),
    [
        ("{'.python.org': 1.3, pinterest.com: 0.5, '*.x.org': 0}", []),
        ("{'https://x.org': 1}", ["bad_pattern"]),
        ("{x.org: 11}", ["out_of_range"]),
        ("{x.org: -1}", ["out_of_range"]),
        ("{x.org: high}", ["wrong_type"]),
        ("[x.org]", ["wrong_type"]),
    ],
)
def test_search_weights(weights: str, codes: list[str]) -> None:
    text = f"search: {{weights: {weights}}}"
    if codes:
        assert _codes(text) == codes
    else:
        loaded = _load(text).search.weights
        assert dict(loaded) == {".python.org": 1.3, "pinterest.com": 0.5, "*.x.org": 0.0}
