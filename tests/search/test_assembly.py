"""`build_engine`: the configuration's search section, and the environment, to an engine."""

from __future__ import annotations

from gateway.config import ProviderConfig, SearchConfig
from gateway.search.assembly import build_engine, chain_entries
from gateway.search.query import SearchQuery
from tests.search.conftest import FakeClock, LoopbackTransport


def test_no_providers_follows_the_keys_set(transport: LoopbackTransport, clock: FakeClock) -> None:
    keyless = build_engine(SearchConfig(), transport, clock, environ={})
    assert keyless.provider_ids == ("ddg", "bing", "baidu")
    keyed = build_engine(
        SearchConfig(prefer="model_native"),
        transport,
        clock,
        environ={"TAVILY_API_KEY": "tvly-k", "ANTHROPIC_API_KEY": "sk-ant-k"},
    )
    assert keyed.provider_ids == ("anthropic", "tavily", "ddg", "bing", "baidu")
    assert keyed.missing_keys() == {}  # only providers whose keys are set are in it


def test_a_written_list_is_kept(transport: LoopbackTransport, clock: FakeClock) -> None:
    search = SearchConfig(providers=(ProviderConfig(id="b", kind="bing"),))
    assert chain_entries(search, {"BRAVE_API_KEY": "k"}) == search.providers
    assert build_engine(search, transport, clock, environ={}).provider_ids == ("b",)


def test_region_providers_reach_the_engine(transport: LoopbackTransport, clock: FakeClock) -> None:
    search = SearchConfig(region_providers={"cn": ("baidu",), "de": ("bing",)})
    engine = build_engine(search, transport, clock, environ={})
    assert engine.chain_for(SearchQuery("q", region="cn-zh")) == ("baidu", "ddg", "bing")
    assert engine.chain_for(SearchQuery("q", region="de")) == ("bing", "ddg", "baidu")
    assert engine.chain_for(SearchQuery("q", region="wt-wt")) == ("ddg", "bing", "baidu")
