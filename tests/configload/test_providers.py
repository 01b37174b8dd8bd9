"""`search.providers` left out: the automatic chain that follows the keys set; and the search
keys beside it (`region_providers`, `prefer`, `timeout`) as the configuration check reads them."""

from __future__ import annotations

import pytest

from gateway.config import ProviderConfig, SearchConfig
from gateway.configload import ConfigError, load_config_bytes
from gateway.configload.providers import AUTOMATIC_IDS, effective_providers

KEYLESS = ["ddg", "bing", "baidu"]


def _load(text: str):  # type: ignore[no-untyped-def]
    return load_config_bytes(text.encode(), source="t.yaml", base_dir="/nonexistent-base")


def _messages(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _load(text)
    return [f"{i.code}: {i.message}" for i in info.value.issues]


def ids(search: SearchConfig, environ: dict[str, str]) -> list[str]:
    return [p.id for p in effective_providers(search, environ)]


def test_no_keys_is_the_keyless_chain() -> None:
    assert ids(SearchConfig(), {}) == KEYLESS
    assert ids(SearchConfig(), {"BRAVE_API_KEY": ""}) == KEYLESS  # empty is not set


def test_each_key_set_adds_its_provider_in_the_documented_order() -> None:
    environ = {
        "ANTHROPIC_API_KEY": "a",
        "SERPER_API_KEY": "s",
        "BRAVE_API_KEY": "b",
        "TENCENTCLOUD_SECRET_ID": "id",
        "TENCENTCLOUD_SECRET_KEY": "key",
        "BOCHA_API_KEY": "c",
        "TAVILY_API_KEY": "t",
        "OPENAI_API_KEY": "o",
    }
    assert ids(SearchConfig(), environ) == [
        "brave", "tavily", "serper", "bocha", "tencent_wsa", "openai", "anthropic", *KEYLESS
    ]  # fmt: skip
    assert tuple(ids(SearchConfig(), environ)) == AUTOMATIC_IDS


def test_a_key_pair_needs_both_halves() -> None:
    assert ids(SearchConfig(), {"TENCENTCLOUD_SECRET_ID": "id"}) == KEYLESS


def test_prefer_model_native_moves_them_first() -> None:
    environ = {"BRAVE_API_KEY": "b", "OPENAI_API_KEY": "o", "ANTHROPIC_API_KEY": "a"}
    preferred = SearchConfig(prefer="model_native")
    assert ids(preferred, environ) == ["openai", "anthropic", "brave", *KEYLESS]
    assert ids(SearchConfig(), environ) == ["brave", "openai", "anthropic", *KEYLESS]


def test_an_explicit_list_is_used_exactly_as_written() -> None:
    written = (ProviderConfig(id="bing", kind="bing"),)
    search = SearchConfig(providers=written, prefer="model_native")
    assert effective_providers(search, {"BRAVE_API_KEY": "b", "OPENAI_API_KEY": "o"}) == written


def test_the_file_reads_region_providers_and_prefer() -> None:
    search = _load("search: {region_providers: {CN: [baidu], uk: [ddg]}, prefer: model_native}")
    assert dict(search.search.region_providers) == {"cn": ("baidu",), "gb": ("ddg",)}
    assert search.search.prefer == "model_native"
    assert search.search.providers is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "search: {region_providers: {cn: [bochaa]}}",
            "unknown_provider: search.region_providers.cn: 'bochaa' is not a provider",
            id="unknown-automatic-id",
        ),
        pytest.param(
            "search: {providers: [{id: ddg, kind: duckduckgo}], region_providers: {cn: [baidu]}}",
            "unknown_provider: search.region_providers.cn: 'baidu' is not a provider of the "
            "chain (known: ddg)",
            id="not-in-the-written-list",
        ),
        pytest.param(
            "search: {region_providers: {china: [baidu]}}",
            "bad_value: search.region_providers: 'china' is not a two-letter country code",
            id="not-a-country",
        ),
        pytest.param(
            "search: {region_providers: {cn: [baidu, baidu]}}", "duplicate_entry", id="twice"
        ),
        pytest.param("search: {prefer: fastest}", "search.prefer", id="prefer-choice"),
        pytest.param(
            "search: {timeout: 0.5}",
            "out_of_range: search.timeout must be between 1 and 60 seconds, got 0.5",
            id="timeout-low",
        ),
        pytest.param(
            "search: {timeout: 61, deadline: 90}",
            "out_of_range: search.timeout must be between 1 and 60 seconds, got 61",
            id="timeout-high",
        ),
    ],
)
def test_bad_search_keys_are_named(text: str, message: str) -> None:
    assert any(message in line for line in _messages(text)), _messages(text)


def test_timeout_bounds_are_accepted() -> None:
    assert _load("search: {timeout: 1}").search.timeout == 1
    assert _load("search: {timeout: 60, deadline: 60}").search.timeout == 60
    assert _load("").search.timeout == 15
